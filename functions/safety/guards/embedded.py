"""The embedded guard (the local default): the pre-filter's rule layer and learned cascade, run in process on CPU, and
its verdicts in OpenAI's moderation terms."""

from __future__ import annotations

from collections.abc import Sequence

from anyio import to_thread

from functions.safety.categories import BENIGN, CLASSIFIER_LABELS
from functions.safety.findings import SafetyFinding
from functions.safety.guard import ModerationResult
from functions.safety.moderation_categories import derived_scores, flags_for
from functions.safety.prefilter import Assessment, PreFilter
from shared.wire.schemas import ChatMessage

EMBEDDED_GUARD_NAME = "fleetchat-embedded"


def category_scores(assessment: Assessment, labels: Sequence[str]) -> dict[str, float]:
    """Our categories' scores: P(harmful) of the stage that decided times P(category | harmful).

    P(category | harmful) is the second stage's category distribution renormalised over the harmful labels. Where an
    earlier stage let the input through there is no distribution (no second pass is spent on scores): the stage's
    P(harmful) is spread evenly over the harmful labels. A deny rule scores its category 1.0 and the rest 0."""
    finding, verdict = assessment.finding, assessment.verdict
    if verdict is None:
        return {finding.category: 1.0} if finding is not None else {}
    distribution = verdict.distribution
    if distribution is None:
        spread = [label for label in labels if label != BENIGN]
        return {label: verdict.score / len(spread) for label in spread}
    harmful = {label: p for label, p in distribution.items() if label != BENIGN}
    total = sum(harmful.values()) or 1.0
    return {label: verdict.score * p / total for label, p in harmful.items()}


def moderation_result(assessment: Assessment, labels: Sequence[str]) -> ModerationResult:
    scores = category_scores(assessment, labels)
    finding = assessment.finding
    flags = flags_for(finding.category) if finding is not None else set()
    return ModerationResult.of(finding is not None, flags, derived_scores(scores))


class EmbeddedGuard:
    def __init__(self, prefilter: PreFilter) -> None:
        self.prefilter = prefilter

    @property
    def name(self) -> str:
        return EMBEDDED_GUARD_NAME

    @property
    def policy_version(self) -> str:
        return self.prefilter.policy_version

    @property
    def labels(self) -> list[str]:
        intent = self.prefilter.classifier.intent
        return intent.meta.labels if intent is not None else list(CLASSIFIER_LABELS)

    async def assess(self, messages: Sequence[ChatMessage]) -> Assessment:
        return await to_thread.run_sync(self.prefilter.assess, messages)

    async def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        return await to_thread.run_sync(self.prefilter.check, messages)

    async def moderate(self, inputs: list[str]) -> list[ModerationResult]:
        def run() -> list[ModerationResult]:
            labels = self.labels
            return [
                moderation_result(self.prefilter.assess([ChatMessage(role="user", content=text)]), labels)
                for text in inputs
            ]

        return await to_thread.run_sync(run)
