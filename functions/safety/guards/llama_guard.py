"""`LlamaGuardGuard`: Llama Guard 3 served as an OpenAI-compatible chat-completions pool (`vllm serve
meta-llama/Llama-Guard-3-1B` deployed; any server speaking its output format in tests), used alone or for the
embedded cascade's uncertain band only.

In band mode the embedded guard decides what it is clear about (its P(harmful) below the band: let through; at or
above the band's top and blocked: blocked; a deny rule: blocked) and the guard model reads only the rest, so the extra
round trip is paid on the few requests the small classifier is unsure of.

A deployment's ignored hazard codes (`settings.guard.ignored_codes`, default S6 and S8) do not block: a verdict
that names only those is a pass, here and in `/v1/moderations`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.findings import SafetyFinding
from functions.safety.guard import GuardUnavailableError, ModerationResult
from functions.safety.guards.embedded import EmbeddedGuard, moderation_result
from functions.safety.guards.llama_guard_format import (
    LlamaGuardVerdict,
    MalformedVerdictError,
    guard_messages,
    parse_verdict,
)
from functions.safety.guards.remote import RemoteEndpoint
from functions.safety.moderation_categories import derived_scores
from functions.safety.prefilter import Assessment
from shared.storage.safety_audit import SafetyDetector, SafetyLayer
from shared.wire.schemas import ChatMessage

# The verdict is two short lines; a code list cut short here loses only its last codes (`parse_verdict`).
VERDICT_MAX_TOKENS = 20
LLAMA_GUARD_VERSION = "llama-guard-3"


class LlamaGuardGuard:
    def __init__(
        self,
        endpoint: RemoteEndpoint,
        *,
        ignored_codes: frozenset[str] = frozenset(),
        embedded: EmbeddedGuard | None = None,
        band: tuple[float, float] | None = None,
    ) -> None:
        if band is not None and embedded is None:
            raise ValueError("band mode needs the embedded guard to decide the clear cases")
        self.endpoint = endpoint
        self.ignored_codes = ignored_codes
        self.embedded = embedded
        self.band = band

    @property
    def name(self) -> str:
        return self.endpoint.model

    @property
    def policy_version(self) -> str:
        base = f"{LLAMA_GUARD_VERSION}:{self.endpoint.model}"
        if self.ignored_codes:
            base += f":ignore-{','.join(sorted(self.ignored_codes, key=lambda code: int(code[1:])))}"
        return f"{self.embedded.policy_version}+{base}" if self.band and self.embedded else base

    async def verdict(self, messages: Sequence[ChatMessage]) -> LlamaGuardVerdict:
        """The guard model's verdict on the conversation (on its last turn, in the context of the earlier ones), the
        deployment's ignored codes taken out."""
        conversation = guard_messages(messages)
        if not conversation:
            return LlamaGuardVerdict(safe=True)  # nothing a user said: nothing to judge
        body = {"messages": conversation, "max_tokens": VERDICT_MAX_TOKENS, "temperature": 0}
        answer = await self.endpoint.post("/v1/chat/completions", body)
        try:
            text = answer["choices"][0]["message"]["content"]
            verdict = parse_verdict(text if isinstance(text, str) else "")
        except (KeyError, IndexError, TypeError, MalformedVerdictError) as exc:
            raise GuardUnavailableError(f"Llama Guard answered no verdict: {exc}") from exc
        return verdict.ignoring(self.ignored_codes)

    def _clear(self, assessment: Assessment) -> bool:
        """Whether the embedded guard's assessment is outside the band (it decides), or inside (the model does)."""
        assert self.band is not None
        return not in_band(assessment, self.band)

    async def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        if self.band is not None and self.embedded is not None:
            assessment = await self.embedded.assess(messages)
            if self._clear(assessment):
                return assessment.finding
        verdict = await self.verdict(messages)
        if verdict.safe:
            return None
        return SafetyFinding(
            layer=SafetyLayer.PRE,
            detector=SafetyDetector.GUARD_MODEL,
            category=verdict.category,
            score=1.0,  # Llama Guard's answer is a decision, not a probability
            rule=",".join(verdict.codes) or None,
            excerpt=ConversationText.of(messages).whole,
        )

    async def moderate(self, inputs: list[str]) -> list[ModerationResult]:
        async def one(text: str) -> ModerationResult:
            messages = [ChatMessage(role="user", content=text)]
            if self.band is not None and self.embedded is not None:
                assessment = await self.embedded.assess(messages)
                if self._clear(assessment):
                    return moderation_result(assessment, self.embedded.labels)
            return moderation_of(await self.verdict(messages))

        # gather, not a task group: the first GuardUnavailableError propagates as itself for the fail policy; the
        # other inputs' calls are cancelled then, not left running for an answer nobody reads.
        tasks = [asyncio.ensure_future(one(text)) for text in inputs]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


def in_band(assessment: Assessment, band: tuple[float, float]) -> bool:
    """Whether band mode hands this conversation to the guard model: the embedded guard's deciding P(harmful) is in
    `band`, or at or above its top without a block. A deny rule, a score below the band and a block at or above its
    top are the embedded guard's to decide (`training/guard_band.py` applies the same rule to arrays)."""
    if assessment.verdict is None:
        return False  # a deny rule decided
    low, high = band
    score = assessment.verdict.score
    return score >= low and not (score >= high and assessment.finding is not None)


def moderation_of(verdict: LlamaGuardVerdict) -> ModerationResult:
    """Flagged categories score 1.0 and the rest 0.0 (the verdict is a decision, not a distribution); subcategories
    follow `derived_scores` as the embedded guard's do. An unsafe verdict is flagged even when none of its hazards has
    an OpenAI category (S6 specialized advice, S7 privacy, S8 IP, S13 elections, S14 code interpreter abuse, an
    unknown code or none) unless the deployment ignores those codes (`LlamaGuardVerdict.ignoring`)."""
    flags = verdict.openai_flags
    return ModerationResult.of(not verdict.safe, flags, derived_scores(dict.fromkeys(flags, 1.0)))
