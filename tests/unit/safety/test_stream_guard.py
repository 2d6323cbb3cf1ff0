"""The streaming post-filter: a phrase split across chunks is caught on the chunk that completes it, benign text
streams through untouched, and a whole answer is cut where the stream would have halted."""

from __future__ import annotations

from functions.safety.classifier.output_classifier import OutputMeta, OutputVerdict
from functions.safety.pii import pii_detector
from functions.safety.stream_guard import (
    OUTPUT_MIN_CHARS,
    OUTPUT_STEP_CHARS,
    WINDOW_CHARS,
    StreamGuard,
    output_windows,
)

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


class _OutputCheck:
    """Scores a window 0.99 when it holds "detonator", else 0.01; records what it read."""

    def __init__(self) -> None:
        self.meta = OutputMeta(labels=["benign", "illicit/violent"], max_tokens=96, threshold=0.5, version="test")
        self.read: list[str] = []

    def judge(self, text: str) -> OutputVerdict:
        self.read.append(text)
        return OutputVerdict(score=0.99 if "detonator" in text else 0.01, category="illicit/violent")


def test_the_output_check_reads_a_window_every_step_once_the_answer_is_long_enough() -> None:
    check = _OutputCheck()
    guard = StreamGuard(None, check)  # type: ignore[arg-type]
    assert all(guard.check(chunk) is None for chunk in _chunks(TRAVEL, 4))
    assert len(check.read) == (len(TRAVEL) - OUTPUT_MIN_CHARS) // OUTPUT_STEP_CHARS + 1
    assert all(len(window) <= WINDOW_CHARS for window in check.read)
    assert TRAVEL.startswith(check.read[0]) and len(check.read[0]) >= OUTPUT_MIN_CHARS


def test_the_output_check_halts_a_harmful_answer_and_names_the_classifier() -> None:
    check = _OutputCheck()
    guard = StreamGuard(None, check)  # type: ignore[arg-type]
    answer = TRAVEL[:200] + "Now wire the detonator to the timer and pack the pipe. " * 4
    sent, finding = guard.scan(answer)
    assert finding is not None and finding.detector == "classifier" and finding.layer == "post"
    assert sent < len(answer) and "detonator" not in answer[:sent][:OUTPUT_MIN_CHARS]


def test_the_windows_training_reads_are_the_ones_a_stream_meets() -> None:
    assert output_windows("short answer") == [] and output_windows("short answer", short=True) == ["short answer"]
    check = _OutputCheck()
    guard = StreamGuard(None, check)  # type: ignore[arg-type]
    assert all(guard.check(char) is None for char in TRAVEL)  # one character a chunk: a check at every step's end
    assert check.read == output_windows(TRAVEL)


def test_the_shipped_output_check_lets_ordinary_answers_stream() -> None:
    """GPT-4's reference answers to MT-Bench (held out from the check's training) stream through it untouched."""
    from functions.offline.safety_training.labelled_data import public_examples
    from functions.safety.classifier.output_classifier import OutputClassifier

    check = OutputClassifier.load()
    assert check is not None
    halted = []
    for example in public_examples("mt-bench-answers"):
        answer = example.messages[0].content
        if StreamGuard(None, check).scan(answer)[1] is not None:
            halted.append(answer[:80])
    assert halted == []
