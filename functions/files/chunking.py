"""Split a file's extracted text by its structure: sections under Markdown headings, paragraphs within them, packed
into chunks of at most `max_tokens` embedding-model tokens, each chunk repeating the previous one's last paragraph
(the overlap) when that paragraph is short enough. Every chunk is an exact slice `text[start:end]` of the extracted
text, so a citation's offsets open the passage. A paragraph longer than a chunk is cut at token boundaries (the
tokenizer's own offsets) with `overlap_tokens` of overlap.

Tokens are counted by the embedding model's tokenizer (passed in as `token_spans`), so no chunk is refused as too
long by the embedding service.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

TokenSpans = Callable[[str], list[tuple[int, int]]]  # character spans of a text's tokens (no special tokens)

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_PARAGRAPH = re.compile(r"[^\n]+(?:\n[ \t]*\S[^\n]*)*")  # lines up to a blank line


@dataclass(frozen=True)
class Chunk:
    seq: int
    start: int
    end: int
    text: str
    heading: str | None  # the heading path it sits under, "Guide > Install"


@dataclass(frozen=True)
class _Block:
    start: int
    end: int
    tokens: int
    heading: str | None
    is_heading: bool


def _blocks(text: str, token_spans: TokenSpans, max_tokens: int, overlap_tokens: int) -> list[_Block]:
    """Paragraphs and headings in order, each with the heading path above it; long paragraphs already cut."""
    path: list[str] = []
    blocks = []
    for match in _PARAGRAPH.finditer(text):
        start, end = match.start(), match.end()
        heading = _HEADING.match(match.group(0))
        if heading is not None and "\n" not in match.group(0):
            level = len(heading.group(1))
            path = [*path[: level - 1], heading.group(2).strip()]
            blocks.append(_Block(start, end, len(token_spans(match.group(0))), " > ".join(path), True))
            continue
        under = " > ".join(path) or None
        spans = token_spans(match.group(0))
        if len(spans) <= max_tokens:
            blocks.append(_Block(start, end, len(spans), under, False))
            continue
        step = max(1, max_tokens - overlap_tokens)
        for first in range(0, len(spans), step):
            piece = spans[first : first + max_tokens]
            blocks.append(_Block(start + piece[0][0], start + piece[-1][1], len(piece), under, False))
            if first + max_tokens >= len(spans):
                break
    return blocks


def chunk_text(text: str, token_spans: TokenSpans, *, max_tokens: int = 200, overlap_tokens: int = 40) -> list[Chunk]:
    """The text's chunks in order (see the module docstring)."""
    chunks: list[Chunk] = []
    current: list[_Block] = []

    def emit() -> None:
        body = [b for b in current if not b.is_heading]
        if body:
            start, end = current[0].start, current[-1].end
            chunks.append(Chunk(len(chunks), start, end, text[start:end], body[0].heading))

    for block in _blocks(text, token_spans, max_tokens, overlap_tokens):
        if block.is_heading:  # a new section starts a new chunk: the heading rides with its first paragraph
            emit()
            current = [block]
            continue
        used = sum(b.tokens for b in current)
        if current and used + block.tokens > max_tokens and any(not b.is_heading for b in current):
            emit()
            last = current[-1]
            current = [last] if not last.is_heading and last.tokens <= overlap_tokens else []
        current.append(block)
    emit()
    return chunks
