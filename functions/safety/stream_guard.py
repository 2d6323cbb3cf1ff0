"""The post-model filter: judges generated text as it streams, on a sliding window over the chunk boundaries, so a
phrase split across chunks is still caught; the caller halts the stream on the first finding."""

from __future__ import annotations

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
# so on output it halted harmless answers. The output rules name recipes, not topics.


class StreamGuard:
    """One per stream. `check(delta)` before a chunk is forwarded: a finding means do not send it, halt."""

    def __init__(self, pii: PiiDetector | None) -> None:
        self.pii = pii  # set when the tenant blocks outbound PII
        self._accepted = ""

    def check(self, delta: str) -> SafetyFinding | None:
        window = (self._accepted + delta)[-WINDOW_CHARS:]
        finding = self._judge(window)
        if finding is None:
            self._accepted = window
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

    @staticmethod
    def _finding(
        detector: SafetyDetector, category: str, score: float, window: str, rule: str | None = None
    ) -> SafetyFinding:
        return SafetyFinding(
            layer=SafetyLayer.POST, detector=detector, category=category, score=score, rule=rule, excerpt=window
        )
