"""`ModerationApiGuard`: any OpenAI-compatible `/v1/moderations` endpoint (OpenAI's own, another fleetchat gateway, a
self-hosted one) as the guard. A conversation is sent as its user-side turns joined, as the embedded classifier reads
it, in pieces no longer than a moderation input may be (`pieces`: a long chat is judged, not refused by the endpoint);
the endpoint's `flagged` on any piece decides."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.findings import SafetyFinding
from functions.safety.guard import GuardUnavailableError, ModerationResult
from functions.safety.guards.remote import RemoteEndpoint
from shared.storage.safety_audit import SafetyDetector, SafetyLayer
from shared.wire.moderation_api import MAX_INPUT_CHARS, MAX_INPUTS
from shared.wire.schemas import ChatMessage

UNSPECIFIED = "unspecified"


class _RemoteResult(BaseModel):
    """One result as the remote endpoint sends it; categories it omits count as not flagged, score 0."""

    model_config = ConfigDict(extra="ignore")

    flagged: bool
    categories: dict[str, bool | None] = {}
    category_scores: dict[str, float | None] = {}


class _RemoteResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    results: list[_RemoteResult]


class ModerationApiGuard:
    def __init__(self, endpoint: RemoteEndpoint) -> None:
        self.endpoint = endpoint

    @property
    def name(self) -> str:
        return self.endpoint.model

    @property
    def policy_version(self) -> str:
        return f"moderation-api:{self.endpoint.model}"

    async def moderate(self, inputs: list[str]) -> list[ModerationResult]:
        answer = await self.endpoint.post("/v1/moderations", {"input": inputs})
        try:
            results = _RemoteResponse.model_validate(answer).results
        except ValidationError as exc:
            raise GuardUnavailableError(f"moderation endpoint answered no results: {exc.error_count()} errors") from exc
        if len(results) != len(inputs):
            raise GuardUnavailableError(f"moderation endpoint answered {len(results)} results for {len(inputs)} inputs")
        return [
            ModerationResult.of(
                r.flagged,
                {name for name, flag in r.categories.items() if flag},
                {name: score or 0.0 for name, score in r.category_scores.items()},
            )
            for r in results
        ]

    async def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        text = ConversationText.of(messages).whole
        parts = pieces(text)
        results: list[ModerationResult] = []
        for start in range(0, len(parts), MAX_INPUTS):
            results += await self.moderate(parts[start : start + MAX_INPUTS])
        hits = [result for result in results if result.flagged]
        if not hits:
            return None
        # The likeliest flagged category; on a tie the subcategory, which says more ("illicit/violent" over "illicit").
        flagged = [
            (result.category_scores.get(name, 0.0), "/" in name, name)
            for result in hits
            for name, flag in result.categories.items()
            if flag
        ]
        score, _, category = max(flagged) if flagged else (1.0, False, UNSPECIFIED)
        return SafetyFinding(
            layer=SafetyLayer.PRE,
            detector=SafetyDetector.MODERATION_API,
            category=category,
            score=min(max(score, 0.0), 1.0),
            excerpt=text,
        )


def pieces(text: str, size: int = MAX_INPUT_CHARS) -> list[str]:
    """`text` in pieces of at most `size` characters, cut after a line end where one falls in a piece's second half;
    blank pieces left out (an endpoint refuses an empty input)."""
    parts = []
    while len(text) > size:
        cut = text.rfind("\n", size // 2, size)
        cut = size if cut < 0 else cut + 1
        parts.append(text[:cut])
        text = text[cut:]
    parts.append(text)
    return [part for part in parts if part.strip()]
