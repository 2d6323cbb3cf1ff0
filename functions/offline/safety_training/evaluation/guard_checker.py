"""A configured guard as what `fleetchat eval safety` judges with: the same golden sets and held-out public sources
measure Llama Guard served as a pool, any `/v1/moderations` endpoint, or the embedded cascade, as a deployment's
settings name them.

The guard is built without the fail policy (`guards.bare_guard`): a remote guard that cannot answer raises
`GuardUnavailableError` and the evaluation stops, since counting an unanswered item as the embedded guard's verdict
(fail open) or as a block (fail closed) would report a number the guard never produced."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType

import httpx

from functions.safety.findings import SafetyFinding
from functions.safety.guards.configured import bare_guard
from functions.safety.guards.embedded import EmbeddedGuard
from shared.settings import Settings
from shared.wire.schemas import ChatMessage


class GuardChecker:
    """`check(messages)` and `policy_version` of the guard `settings` name, run synchronously on a private event loop
    with its own HTTP client (a context manager: the client is closed on leaving)."""

    def __init__(self, settings: Settings, embedded: EmbeddedGuard) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = httpx.AsyncClient()
        self.guard = bare_guard(settings, embedded, self._client)
        self.judged = 0  # conversations the guard has answered

    @property
    def policy_version(self) -> str:
        return self.guard.policy_version

    @property
    def name(self) -> str:
        return self.guard.name

    def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        finding = self._loop.run_until_complete(self.guard.check(messages))
        self.judged += 1
        return finding

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()

    def __enter__(self) -> GuardChecker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()
