"""The post-model filter: judges generated text as it streams, on a sliding window over the chunk boundaries, so a
phrase split across chunks is still caught; the caller halts the stream on the first finding. Three checks: outbound
PII (per tenant policy) and the output rules on every chunk, and the learned output check (trained on model answers,
`output_classifier.py`) every OUTPUT_STEP_CHARS of new text once an answer has OUTPUT_MIN_CHARS."""

from __future__ import annotations

from functions.safety.classifier.output_classifier import OutputClassifier
from functions.safety.findings import SafetyFinding
from functions.safety.pii import PiiDetector
from functions.safety.rules import first_output_deny
from shared.storage.safety_audit import SafetyDetector, SafetyLayer

# Characters of generated text judged at each step: the newest chunk and what came just before it.
WINDOW_CHARS = 400
# A whole (non-streamed) answer is judged in steps of this many characters, as if it had streamed.
SCAN_STEP_CHARS = 100
# The request classifier is not run on generated text: trained on requests, it scores fragments of ordinary answers
# as harmful ("Growkingdomz, a highly rated seed company, sells her" read as sexual/minors at 0.996 by both stages),
# so on output it halted harmless answers. The output rules name recipes, not topics; the output check is trained on
# answers. It first reads an answer at OUTPUT_MIN_CHARS (an opening line alone reads alike in harmful and ordinary
# answers), then every OUTPUT_STEP_CHARS (a check costs about two milliseconds: once per ~30 chunks, not per chunk).
OUTPUT_MIN_CHARS = 160
OUTPUT_STEP_CHARS = 120


def output_windows(text: str, *, short: bool = False) -> list[str]:
    """The windows the output check reads of an answer that streams `text` (`short`: an answer shorter than
    OUTPUT_MIN_CHARS as one window, which training learns from although a stream never reads it alone)."""
    ends = list(range(OUTPUT_MIN_CHARS, len(text) + 1, OUTPUT_STEP_CHARS))
    if not ends:
        return [text] if short and text.strip() else []
    return [text[max(0, end - WINDOW_CHARS) : end] for end in ends]


class StreamGuard:
    """One per stream. `check(delta)` before a chunk is forwarded: a finding means do not send it, halt."""

    def __init__(self, pii: PiiDetector | None, output: OutputClassifier | None = None) -> None:
        self.pii = pii  # set when the tenant blocks outbound PII
        self.output = output  # the learned output check (None: rules and PII only)
        self._accepted = ""
        self._length = 0  # characters accepted so far
        self._next_output_check = OUTPUT_MIN_CHARS

    def check(self, delta: str) -> SafetyFinding | None:
        window = (self._accepted + delta)[-WINDOW_CHARS:]
        length = self._length + len(delta)
        finding = self._judge(window)
        if finding is None and self.output is not None and length >= self._next_output_check:
            finding = self._judge_output(window)
            self._next_output_check = length + OUTPUT_STEP_CHARS
        if finding is None:
            self._accepted = window
            self._length = length
        return finding

    def scan(self, text: str) -> tuple[int, SafetyFinding | None]:
        """Judge a whole answer step by step: (characters safe to send, the finding that stopped it or None)."""
        sent = 0
        while sent < len(text):
            step = text[sent : sent + SCAN_STEP_CHARS]
            if (finding := self.check(step)) is not None:
                return sent, finding
            sent += len(step)
        return sent, None

    def _judge(self, window: str) -> SafetyFinding | None:
        if self.pii is not None and (kind := self.pii.contains_pii(window)) is not None:
            return self._finding(SafetyDetector.PII, str(kind), 1.0, window)
        if (hit := first_output_deny(window)) is not None:
            return self._finding(SafetyDetector.RULES, hit.category.value, 1.0, window, hit.rule)
        return None

    def _judge_output(self, window: str) -> SafetyFinding | None:
        assert self.output is not None
        verdict = self.output.judge(window)
        if verdict.score < self.output.meta.threshold:
            return None
        return self._finding(SafetyDetector.CLASSIFIER, verdict.category, verdict.score, window)

    @staticmethod
    def _finding(
        detector: SafetyDetector, category: str, score: float, window: str, rule: str | None = None
    ) -> SafetyFinding:
        return SafetyFinding(
            layer=SafetyLayer.POST, detector=detector, category=category, score=score, rule=rule, excerpt=window
        )
