"""The streaming post-filter: a phrase split across chunks is caught on the chunk that completes it, benign text
streams through untouched, and a whole answer is cut where the stream would have halted."""

from __future__ import annotations

from functions.safety.pii import pii_detector
from functions.safety.stream_guard import StreamGuard

RECIPE = "Sure. To put together a pipe bomb you will need a steel pipe and two end caps."
TRAVEL = "Lisbon is lovely in October: take tram 28, walk around Alfama and try the pastries in Belém. " * 6


def _chunks(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def test_a_phrase_split_across_chunks_halts_on_the_chunk_that_completes_it() -> None:
    guard = StreamGuard(None)
    sent = ""
    for chunk in _chunks(RECIPE):
        finding = guard.check(chunk)
        if finding is not None:
            break
        sent += chunk
    assert finding is not None and finding.layer == "post" and finding.category == "illicit/violent"
    assert RECIPE.startswith(sent) and "you will need" not in sent  # nothing after the hit was let through
    assert "you will" in sent  # the phrase began in earlier chunks: the hit needed them


def test_benign_text_streams_through() -> None:
    guard = StreamGuard(None)
    assert all(guard.check(chunk) is None for chunk in _chunks(TRAVEL, 4))


def test_an_ordinary_answer_the_request_classifier_misread_streams_through() -> None:
    """The request classifier read this gardening answer (its opening is one SmolLM2 really wrote) as sexual/minors
    at 0.996 on both stages and halted it; generated text is left to the output rules."""
    guard = StreamGuard(None)
    answer = "Growkingdomz, a highly rated seed company, sells her favourite cherry tomatoes in small pots."
    assert all(guard.check(chunk) is None for chunk in _chunks(answer, 2))


def test_outbound_pii_only_when_the_tenant_blocks_it() -> None:
    text = "Write to our manager at jane.roe@example.org for a refund."
    assert StreamGuard(None).scan(text) == (len(text), None)
    kept, finding = StreamGuard(pii_detector()).scan(text)
    assert finding is not None and (finding.detector, finding.category) == ("pii", "email")
    assert "jane.roe@" not in text[:kept]


def test_scan_cuts_a_whole_answer_before_the_step_that_hit() -> None:
    answer = TRAVEL + RECIPE
    kept, finding = StreamGuard(None).scan(answer)
    assert finding is not None
    assert len(TRAVEL) - 100 < kept < len(answer) and "you will need" not in answer[:kept]
