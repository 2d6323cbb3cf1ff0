"""Where a search's words are in a message: the words stemmed and folded as the search engine reads them (Snowball
English, ASCII folding, lower case, English stop words dropped), so every highlighted word is one the search matched,
and a snippet of the message around the first of them."""

from __future__ import annotations

import re
import unicodedata
from functools import cache

from shared.service_api.conversation_api import TextSpan

_WORD = re.compile(r"\w+")
_MAX_TOKEN = 40  # the index's longest token; longer words are not indexed
SNIPPET_CHARS = 180


@cache
def _stemmer():  # type: ignore[no-untyped-def]
    import Stemmer

    return Stemmer.Stemmer("english")


@cache
def _stop_words() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def _folded(word: str) -> str:
    """Accents off ("München" reads "munchen"), lower case; letters of other scripts kept as they are."""
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c)).lower()


def search_text(query: str) -> str:
    """The query as the index is asked it: its words alone (no operators, quotes or field names)."""
    return " ".join(_WORD.findall(query))


def query_terms(query: str) -> frozenset[str]:
    """The stems a query searches for (its stop words, as the index's, match nothing)."""
    words = (_folded(w) for w in _WORD.findall(query))
    kept = [w for w in words if w and len(w) <= _MAX_TOKEN and w not in _stop_words()]
    return frozenset(_stemmer().stemWords(kept))


def matches(text: str, terms: frozenset[str]) -> list[TextSpan]:
    """Every word of `text` whose stem is one of `terms`, in order, as character offsets."""
    if not terms:
        return []
    found = list(_WORD.finditer(text))
    stems = _stemmer().stemWords([_folded(m.group()) for m in found])
    return [TextSpan(start=m.start(), end=m.end()) for m, stem in zip(found, stems, strict=True) if stem in terms]


def snippet(text: str, spans: list[TextSpan], width: int = SNIPPET_CHARS) -> tuple[str, list[TextSpan]]:
    """About `width` characters of `text` around its first match, cut at spaces, "…" where it was cut, and the matches
    inside it as offsets into the snippet. Whitespace runs read as one space (a snippet is one line)."""
    first = spans[0].start if spans else 0
    start = max(0, first - width // 3)
    end = min(len(text), start + width)
    start = max(0, min(start, end - width))
    if start > 0 and (space := text.find(" ", start, first)) != -1:
        start = space + 1
    if end < len(text) and (space := text.rfind(" ", max(start, spans[0].end if spans else start), end)) != -1:
        end = space
    head, tail = ("…" if start > 0 else ""), ("…" if end < len(text) else "")
    pieces, kept, position, cursor = [head], [], len(head), start
    for span in (s for s in spans if s.start >= start and s.end <= end):
        before = _one_line(text[cursor : span.start])
        pieces.append(before)
        position += len(before)
        kept.append(TextSpan(start=position, end=position + span.end - span.start))
        pieces.append(text[span.start : span.end])
        position += span.end - span.start
        cursor = span.end
    pieces += [_one_line(text[cursor:end]), tail]
    return "".join(pieces), kept


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text)
