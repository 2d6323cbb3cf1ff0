"""Where a search's words are marked (functions/accounts/search_highlight.py): read as the engine reads them (stems,
accents off, lower case, stop words dropped, other scripts kept), and the snippet around the first of them."""

from __future__ import annotations

from functions.accounts.search_highlight import matches, query_terms, search_text, snippet


def marked(text: str, query: str) -> list[str]:
    return [text[s.start : s.end] for s in matches(text, query_terms(query))]


def test_words_are_marked_by_their_stems_without_accents_in_any_script() -> None:
    assert marked("I baked bread; baking breads is fun", "bake bread") == ["baked", "bread", "baking", "breads"]
    assert marked("Café crème in München", "cafe munchen") == ["Café", "München"]
    assert marked("Привет, Москва зимой", "москва") == ["Москва"]
    assert marked("東京 の 天気", "東京") == ["東京"]
    assert query_terms("the and of") == frozenset()  # stop words alone search nothing


def test_the_query_reaches_the_engine_as_words_only() -> None:
    assert search_text('title:"bread" AND (crust)*') == "title bread AND crust"


def test_a_snippet_is_one_line_around_the_first_match_with_its_marks_moved_into_it() -> None:
    text = "Intro words. " * 30 + "The sourdough\n\nstarter needs feeding daily. " + "Outro words. " * 30
    cut, spans = snippet(text, matches(text, query_terms("starter feeding")), width=80)
    assert cut.startswith("…") and cut.endswith("…") and "\n" not in cut and len(cut) <= 82
    assert [cut[s.start : s.end] for s in spans] == ["starter", "feeding"]
    whole, spans = snippet("Short text", [])
    assert (whole, spans) == ("Short text", [])
