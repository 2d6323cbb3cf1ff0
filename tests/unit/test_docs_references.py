"""The README and docs/*.md name only what exists: make targets, `fleetchat` and `modal` commands with their options,
modules and Modal functions, files and heading anchors, API routes; the README stays short and machine-neutral; the
deploy guide's cost figures follow from the pool prices. (The README's first request runs against a real stack in
tests/integration/local_stack/test_docs_commands.py.)"""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path

import pytest

from shared.fleet.tables import get_pool, tables
from tests.support.doc_references import (
    PENDING_FROM_OTHER_BRANCHES,
    REPO,
    Command,
    anchors,
    commands,
    doc_files,
    fleetchat_cli,
    links,
    make_targets,
    modal_cli,
    pending_missing,
    resolve,
    unknown_options,
)

DOCS = doc_files()
ALL_COMMANDS = [command for path in DOCS for command in commands(path)]
_METHOD_PATH = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/[^\s`?|)]*)")


def _by_tool(tool: str) -> list[Command]:
    return [command for command in ALL_COMMANDS if command.tool == tool]


def test_the_docs_name_commands_at_all() -> None:
    # The extraction itself must find what the README shows, or every check below would pass on nothing.
    readme = {(c.tool, c.words[:1]) for c in commands(REPO / "README.md")}
    assert {("make", ("up",)), ("make", ("test",)), ("fleetchat", ("up",)), ("fleetchat", ("doctor",))} <= readme


def test_every_make_target_named_exists() -> None:
    targets = make_targets()
    assert {"up", "test", "bench"} <= targets
    missing = [
        str(c) for c in _by_tool("make") if c.words and not c.words[0].startswith("-") and c.words[0] not in targets
    ]
    assert missing == [], f"make targets the Makefile does not define: {missing}"


@pytest.mark.parametrize("tool", ["fleetchat", "modal"])
def test_every_command_and_option_named_exists(tool: str) -> None:
    cli = fleetchat_cli() if tool == "fleetchat" else modal_cli()
    problems = []
    for command in _by_tool(tool):
        path, reached, unknown = resolve(cli, command.words)
        if unknown is not None:
            if not pending_missing(" ".join([tool, *path, unknown])):
                problems.append(f"no command {unknown!r} under `{' '.join([tool, *path])}`: {command}")
            continue
        options = unknown_options(reached, command.words[len(path) :])
        if options:
            problems.append(f"`{' '.join([tool, *path])}` takes no {options}: {command}")
    assert problems == []


def test_modules_and_modal_functions_named_exist() -> None:
    problems = []
    for command in ALL_COMMANDS:
        words = command.words
        for flag, module in itertools.pairwise(words):
            if flag == "-m" and importlib.util.find_spec(module) is None:
                problems.append(f"no module {module}: {command}")
        for word in words:
            if "::" in word:
                file, _, function = word.partition("::")
                source = REPO / file
                if not source.is_file() or f"def {function}(" not in source.read_text(encoding="utf-8"):
                    problems.append(f"no function {function} in {file}: {command}")
    python_modules = [
        m.group(1) for path in DOCS for m in re.finditer(r"python -m ([\w.]+)", path.read_text(encoding="utf-8"))
    ]
    assert python_modules, "the docs name `python -m` modules (the engine bench)"
    problems += [f"no module {name} (python -m)" for name in python_modules if importlib.util.find_spec(name) is None]
    assert problems == []


def test_every_relative_link_and_anchor_resolves() -> None:
    problems = []
    for path in DOCS:
        for href in links(path):
            if re.match(r"^[a-z]+:", href):  # http(s), mailto
                continue
            target, _, anchor = href.partition("#")
            file = (path.parent / target).resolve() if target else path
            name = file.relative_to(REPO).as_posix() if file.is_relative_to(REPO) else str(file)
            if not file.exists():
                if not pending_missing(name):
                    problems.append(f"{path.relative_to(REPO)}: {href} (no such file)")
                continue
            if anchor and file.suffix == ".md" and anchor not in anchors(file):
                problems.append(f"{path.relative_to(REPO)}: {href} (no such heading)")
    assert problems == []


def test_pending_entries_name_other_branches_docs_or_commands() -> None:
    # Kept honest: each entry is a docs page or a fleetchat command the docs really link or name.
    named = {href.partition("#")[0] for path in DOCS for href in links(path)}
    texts = "\n".join(path.read_text(encoding="utf-8") for path in DOCS)
    for entry in PENDING_FROM_OTHER_BRANCHES:
        if entry.startswith("fleetchat "):
            assert entry in texts
        else:
            assert Path(entry).name in {Path(href).name for href in named}, entry


def test_readme_is_short_and_machine_neutral() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    # No per-run timings (they live in docs/benchmarks.md, dated) and no paths of one machine.
    assert re.findall(r"\d[\d.,]*\s?(?:ms|µs|tok/s)\b", text) == []
    # /mnt/data is no machine's: it is the directory inside the code sandbox (docs/sandbox.md), as in OpenAI's.
    machine_path = r"(?<![\w.])/(?:home|Users|root|work|tmp|mnt(?!/data\b))/\S+"
    for path in DOCS:
        found = re.findall(machine_path, path.read_text(encoding="utf-8"))
        assert found == [], f"{path.relative_to(REPO)}: {found}"


def test_every_route_is_documented_and_every_documented_route_exists() -> None:
    from functions.app import create_app
    from shared.settings import Settings

    app = create_app(Settings())

    def normal(path: str) -> str:
        return re.sub(r"\{[^}]*\}", "{}", path)

    described = {(method.upper(), normal(path)) for path, ops in app.openapi()["paths"].items() for method in ops}
    assert len(described) > 30  # the description was read (a vacuous set would pass everything below)
    # Routes outside the description: the web chat at `/`, `/openapi.json` and its viewers.
    undescribed = {(m, normal(r.path)) for r in app.routes if getattr(r, "methods", None) for m in r.methods}
    served = described | {(method, path) for method, path in undescribed if method != "HEAD"}
    api_md = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    in_api_md = {(m.group(1), normal(m.group(2))) for m in _METHOD_PATH.finditer(api_md)}
    assert len(in_api_md) > 30
    # Families with pages of their own (files and vector stores) may be documented there rather than in api.md.
    everywhere = {
        (m.group(1), normal(m.group(2)))
        for path in DOCS
        for m in _METHOD_PATH.finditer(path.read_text(encoding="utf-8"))
    }
    assert sorted(described - everywhere) == [], "routes no doc describes"
    assert sorted(in_api_md - served) == [], "docs/api.md describes routes the app does not serve"


def test_deploy_cost_figures_follow_from_the_pool_prices() -> None:
    text = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    mini, flagship, guard = get_pool("mini"), get_pool("flagship"), tables().guard_pools["llama-guard"]
    assert mini is not None and flagship is not None
    for pool in (mini, flagship, guard):
        for price in (pool.price.prompt_usd_per_mtok, pool.price.completion_usd_per_mtok):
            assert f"**${price:.2f}**" in text, (pool.name, price)
    prompt_share = 0.75  # the guide's 3 prompt tokens per completion token
    for pool in (mini, flagship):
        blended = (
            prompt_share * pool.price.prompt_usd_per_mtok + (1 - prompt_share) * pool.price.completion_usd_per_mtok
        )
        assert f"**${blended:.2f}**" in text, (pool.name, blended)
    assert f"**+${prompt_share * guard.price.prompt_usd_per_mtok:.2f}**" in text
