"""The pre-model gate: judges the whole conversation (every user/system turn) with the rule layer, then the
classifier, before routing — a blocked request never reaches a worker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from functions.safety.classifier.cascade import ClassifierVerdict, SafetyClassifier
from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.deobfuscate import deobfuscate
from functions.safety.findings import SafetyFinding
from functions.safety.pii import pii_detector
from functions.safety.rules import RULES_VERSION, first_deny, neutralise_idioms
from shared.storage.safety_audit import SafetyDetector, SafetyLayer
from shared.wire.schemas import ChatMessage


@dataclass(frozen=True)
class Assessment:
    finding: SafetyFinding | None  # the reason to refuse, or None
    verdict: ClassifierVerdict | None  # the classifier's verdict (None when a deny rule decided first)


class PreFilter:
    def __init__(
        self,
        classifier: SafetyClassifier,
        *,
        escalate_at: float | None = None,
        redact_pii: Callable[[str], str] | None = None,
    ) -> None:
        self.classifier = classifier
        self.escalate_at = escalate_at  # None: the trained threshold (0.0 sends everything to the second stage)
        # The classifier reads the conversation with PII replaced by placeholders ("[CARD]"): it judges the ask, and
        # a support message holding a card number and a phone number read as carding ("illicit", 0.80) when raw.
        self.redact_pii = redact_pii or pii_detector().redact

    @property
    def policy_version(self) -> str:
        return f"{RULES_VERSION}+{self.classifier.version}"

    def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        """The reason to refuse this conversation, or None to let it through."""
        return self.assess(messages).finding

    def deny(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        """The rule layer alone: the first deny-list hit in any judged turn (allow-listed idioms neutralised first, and
        each turn read again with obfuscation undone), or None. Any guard may run it in front of itself
        (`rule_gate.py`)."""
        conversation = ConversationText.of(messages)
        neutral = conversation.map(neutralise_idioms)
        return self._deny(conversation, neutral)

    def _deny(self, conversation: ConversationText, neutral: ConversationText) -> SafetyFinding | None:
        for turn, neutral_turn in zip(conversation.turns, neutral.turns, strict=True):
            plain = deobfuscate(turn)
            hit = first_deny(neutral_turn, neutralised=True) or (first_deny(plain) if plain != turn else None)
            if hit is not None:
                return SafetyFinding(
                    layer=SafetyLayer.PRE,
                    detector=SafetyDetector.RULES,
                    category=hit.category.value,
                    score=1.0,
                    rule=hit.rule,
                    excerpt=turn,
                )
        return None

    def assess(self, messages: Sequence[ChatMessage]) -> Assessment:
        """The finding, and the classifier's verdict behind it (its scores are what `/v1/moderations` reports)."""
        conversation = ConversationText.of(messages)
        neutral = conversation.map(neutralise_idioms)
        denied = self._deny(conversation, neutral)
        if denied is not None:
            return Assessment(denied, None)
        verdict = self.classifier.judge(neutral.map(self.redact_pii), escalate_at=self.escalate_at)
        if not verdict.flagged:
            return Assessment(None, verdict)
        finding = SafetyFinding(
            layer=SafetyLayer.PRE,
            detector=SafetyDetector.CLASSIFIER,
            category=verdict.category,
            score=verdict.score,
            excerpt=conversation.whole,
        )
        return Assessment(finding, verdict)
