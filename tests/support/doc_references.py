"""What the README and docs/*.md name, read with markdown-it: code blocks and spans, the commands in them (`make`,
`fleetchat`, `modal`), links and heading anchors; and the command registries those names are checked against."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[2]

# Docs and commands written on other branches this session: docs/configuration.md and `fleetchat config` (the
# operator config work), docs/files.md (files and retrieval), docs/engine.md (the engine work). Each is allowed to be
# missing only while it is missing: once it exists, links and commands naming it are checked like every other.
# The integrator empties this set once those branches are merged.
PENDING_FROM_OTHER_BRANCHES: frozenset[str] = frozenset()

SHELL_FENCES = frozenset({"", "bash", "sh", "shell", "console"})
TOOLS = ("fleetchat", "make", "modal")
_WORD = re.compile(r"^[a-z][a-z0-9-]*$")
_OPTION = re.compile(r"^--[a-z][a-z0-9-]*")
# A tool's name at the start of a command: at the line start, after whitespace, `$(`, or a path (`.venv/bin/`).
_INVOCATION = re.compile(r"(?:^|(?<=[\s(/]))(fleetchat|make|modal)\s+(\S.*)$")
_SEPARATORS = re.compile(r"\s*(?:\|\||&&|[|;])\s*")


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def parse(path: Path) -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class CodeText:
    """One piece of code in a doc: a fenced block (its language) or an inline span (language None)."""

    path: Path
    text: str
    language: str | None

    @property
    def is_shell(self) -> bool:
        return self.language is None or self.language in SHELL_FENCES


def code_texts(path: Path) -> list[CodeText]:
    found = []
    for token in parse(path):
        if token.type == "fence":
            found.append(CodeText(path, token.content, token.info.strip().split(" ")[0]))
        elif token.type == "inline":
            found.extend(CodeText(path, c.content, None) for c in token.children or [] if c.type == "code_inline")
    return found


@dataclass(frozen=True)
class Command:
    """A command named in a doc: the tool, the words after it and where it was found."""

    tool: str
    words: tuple[str, ...]
    where: str

    def __str__(self) -> str:
        return f"{self.tool} {' '.join(self.words)}  ({self.where})"


def _lines(code: CodeText) -> list[str]:
    text = code.text.replace("\\\n", " ")  # a shell line continued
    if code.language is None:
        return [text.replace("\n", " ")]
    return [line.split(" #")[0] for line in text.splitlines() if not line.lstrip().startswith("#")]


def commands(path: Path) -> list[Command]:
    """Every `make`, `fleetchat` and `modal` invocation in the file's shell code (blocks and inline spans)."""
    found = []
    for code in code_texts(path):
        if not code.is_shell:
            continue
        for line in _lines(code):
            for segment in _SEPARATORS.split(line):
                match = _INVOCATION.search(segment.strip())
                if match is None:
                    continue
                try:
                    words = shlex.split(match.group(2), comments=False)
                except ValueError:  # an unbalanced quote in an inline span: split on blanks
                    words = match.group(2).split()
                found.append(Command(match.group(1), tuple(words), f"{path.relative_to(REPO)}: `{segment.strip()}`"))
    return found


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.MULTILINE)}


# Commands are click-style objects: typer's (which vendors its own click) and modal's (click). Read by duck typing:
# a group has `commands` (name -> command), every command has `params` with `opts`.


@cache
def fleetchat_cli() -> Any:
    import typer

    from functions.cli import app

    return typer.main.get_command(app)


@cache
def modal_cli() -> Any:
    from modal.cli.entry_point import entrypoint_cli

    return entrypoint_cli


def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def resolve(group: Any, words: tuple[str, ...]) -> tuple[list[str], Any, str | None]:
    """Walk the subcommand words: (the path found, the command reached, the first word that is no subcommand of the
    group it was given to, or None). Stops at a leaf command or at the first word that is not a plain name."""
    path: list[str] = []
    command = group
    for word in words:
        if not _is_group(command) or not _WORD.match(word):
            break
        sub = command.commands.get(word)
        if sub is None:
            return path, command, word
        path.append(word)
        command = sub
    return path, command, None


def unknown_options(command: Any, words: tuple[str, ...]) -> list[str]:
    """The `--long` options among `words` that `command` does not take."""
    known = {"--help"}
    for param in command.params:
        known.update(param.opts)
        known.update(getattr(param, "secondary_opts", []))
    named = [word.lstrip("[(").split("=")[0].rstrip("])") for word in words]  # `[--smoke]` in a usage line
    return [word for word in named if _OPTION.match(word) and word not in known]


def links(path: Path) -> list[str]:
    hrefs = []
    for token in parse(path):
        for child in token.children or []:
            if child.type == "link_open":
                hrefs.append(str(child.attrs["href"]))
    return hrefs


def _slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (word characters, spaces and hyphens kept),
    spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    tokens = parse(path)
    seen: dict[str, int] = {}
    found = set()
    for i, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        text = "".join(c.content for c in tokens[i + 1].children or [] if c.type in ("text", "code_inline"))
        slug = _slug(text)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def pending_missing(name: str) -> bool:
    """True when `name` is one of the other branches' docs or commands and is still missing here."""
    if name not in PENDING_FROM_OTHER_BRANCHES:
        return False
    if name.startswith("fleetchat "):
        _, _, unknown = resolve(fleetchat_cli(), tuple(name.split()[1:]))
        return unknown is not None
    return not (REPO / name).exists()
