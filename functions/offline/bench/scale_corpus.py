"""The scale bench's corpus: prose passages of about 700 characters from a git clone of a public text collection,
written as JSONL (`{"id", "source", "text"}`), for functions/offline/bench/retrieval_scale.py.

    git clone --bare https://github.com/chinapedia/wikipedia.abstract.en wiki.git        # CC BY-SA 3.0 (Wikipedia)
    git clone --bare https://github.com/rcdm-uga/Gutenberg_Text gutenberg.git             # public domain in the USA
    python -m functions.offline.bench.scale_corpus wiki.git --kind wiki --out wiki.jsonl
    python -m functions.offline.bench.scale_corpus gutenberg.git --kind gutenberg --out gutenberg.jsonl

Paragraphs (split at blank lines) shorter than 80 characters, list and table lines, and lines less than 70 % letters
are dropped; the rest are packed into passages of about 700 characters (a long paragraph is split at sentence ends).
A Gutenberg book keeps only the text between its `*** START OF` and `*** END OF` lines (the licence boilerplate goes);
Wikipedia's footnote markers (`[12]`) are removed."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

TARGET, LONGEST = 700, 1000
PATHS = {"wiki": re.compile(r"^Page/.*\.md$"), "gutenberg": re.compile(r"\.txt$")}
_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z"])')
_FOOTNOTE = re.compile(r"\[\d+\]")


def paragraphs(text: str, kind: str) -> Iterator[str]:
    if kind == "gutenberg":
        start = text.find("*** START OF")
        start = text.find("\n", start) if start >= 0 else 0
        end = text.find("*** END OF")
        text = text[start : end if end > 0 else None]
    for block in re.split(r"\n\s*\n", text.replace("\r", "")):
        paragraph = " ".join(_FOOTNOTE.sub("", block).split())
        if len(paragraph) < 80 or paragraph.startswith(("-", "|", "[", "Category:", "#")):
            continue
        if sum(c.isalpha() for c in paragraph) >= 0.7 * len(paragraph):
            yield paragraph


def passages(text: str, kind: str) -> Iterator[str]:
    buffer = ""
    for paragraph in paragraphs(text, kind):
        for piece in _SENTENCE_END.split(paragraph) if len(paragraph) > LONGEST else [paragraph]:
            if buffer and len(buffer) + 1 + len(piece) > LONGEST:
                yield buffer
                buffer = ""
            buffer = f"{buffer} {piece}".strip()
            if len(buffer) >= TARGET:
                yield buffer[: 2 * LONGEST]
                buffer = ""
    if len(buffer) >= 200:
        yield buffer


def files(repo: Path, pattern: re.Pattern[str]) -> Iterator[tuple[str, bytes]]:
    """(path, contents) of the repository's HEAD files matching `pattern`, in path order."""
    listing = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", "HEAD"], capture_output=True, check=True)
    entries = []
    for entry in listing.stdout.split(b"\0"):
        if entry:
            meta, path = entry.split(b"\t", 1)
            if pattern.search(name := path.decode("utf-8", "replace")):
                entries.append((name, meta.split()[2].decode()))
    with subprocess.Popen(
        ["git", "-C", str(repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as cat:
        assert cat.stdin is not None and cat.stdout is not None
        for name, sha in sorted(entries):
            cat.stdin.write(sha.encode() + b"\n")
            cat.stdin.flush()
            header = cat.stdout.readline().split()
            if header[1] == b"missing":
                continue
            data = cat.stdout.read(int(header[2]))
            cat.stdout.read(1)
            yield name, data
        cat.stdin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", type=Path)
    parser.add_argument("--kind", choices=sorted(PATHS), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    count = 0
    with args.out.open("w", encoding="utf-8") as out:
        for name, data in files(args.repo, PATHS[args.kind]):
            for text in passages(data.decode("utf-8", "replace"), args.kind):
                count += 1
                out.write(json.dumps({"id": f"{args.kind}-{count}", "source": name, "text": text}) + "\n")
    print(f"{count} passages -> {args.out}")


if __name__ == "__main__":
    main()
