"""The guard protocol: what judges a conversation before it reaches a model (the pre-filter) and what answers
`/v1/moderations`, whichever implementation a deployment picks (`settings.guard.kind`).

Implementations:

- `EmbeddedGuard` (`embedded_guard.py`): the rule layer + the learned cascade, in process, on CPU (the default);
- `LlamaGuardGuard` (`llama_guard.py`): Llama Guard 3 served as an OpenAI-compatible chat-completions pool, alone or
  for the embedded cascade's uncertain band only;
- `ModerationApiGuard` (`moderation_api_guard.py`): any OpenAI-compatible `/v1/moderations` endpoint.

A remote guard that cannot answer (down, timing out after its retries, or answering something it cannot parse) raises
`GuardUnavailableError`; `FailPolicy` decides what that means for the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel

from functions.safety.findings import SafetyFinding
from functions.safety.moderation_categories import OPENAI_CATEGORIES
from shared.wire.schemas import ChatMessage

GuardKind = Literal["embedded", "llama_guard", "moderation_api"]
# "closed": a request the guard could not judge is refused with 503 + retry-after (the default: an outage of the guard
# a deployment chose must not silently lower its safety bar); "open": the embedded guard, always available in process,
# judges it instead (availability first; still never unchecked).
FailPolicy = Literal["closed", "open"]
GUARD_RETRY_AFTER_S = 5


class GuardUnavailableError(Exception):
    """A remote guard gave no usable verdict (connection refused, timeout, 5xx after retries, malformed output)."""


class ModerationResult(BaseModel):
    """One input's verdict in OpenAI's moderation terms: every category of `OPENAI_CATEGORIES` is present."""

    flagged: bool
    categories: dict[str, bool]
    category_scores: dict[str, float]

    @classmethod
    def of(cls, flagged: bool, flags: set[str], scores: dict[str, float]) -> ModerationResult:
        return cls(
            flagged=flagged,
            categories={name: name in flags for name in OPENAI_CATEGORIES},
            category_scores={name: float(scores.get(name, 0.0)) for name in OPENAI_CATEGORIES},
        )


class Guard(Protocol):
    @property
    def name(self) -> str:
        """The moderation model id reported to clients and the ledger (e.g. `fleetchat-embedded`)."""
        ...

    @property
    def policy_version(self) -> str:
        """What the audit records as the policy that decided."""
        ...

    async def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        """The reason to refuse this conversation (judged whole, multi-turn), or None to let it through.
        Raises GuardUnavailableError when a remote guard cannot answer."""
        ...

    async def moderate(self, inputs: list[str]) -> list[ModerationResult]:
        """One result per input, in order, each judged on its own. Raises GuardUnavailableError likewise."""
        ...
