"""The configured guard: `open_guard(settings, ...)` builds the one `settings.guard.kind` names (a remote one that
judges alone behind the deny rules, `rule_gate.py`, unless `safety_guard_rules` is off), wrapped in the fail policy
(`ResilientGuard`) when it is remote; `bare_guard` builds it without (for an evaluation of the guard itself)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from functions.metrics.gateway import GatewayMetrics
from functions.safety.findings import SafetyFinding
from functions.safety.guard import GUARD_RETRY_AFTER_S, FailPolicy, Guard, GuardUnavailableError, ModerationResult
from functions.safety.guards.embedded import EmbeddedGuard
from functions.safety.guards.llama_guard import LlamaGuardGuard
from functions.safety.guards.moderation_api import ModerationApiGuard
from functions.safety.guards.remote import RemoteEndpoint
from functions.safety.guards.rule_gated import RuleGatedGuard
from shared.errors import ServiceUnavailableError
from shared.settings import Settings
from shared.wire.schemas import ChatMessage

log = logging.getLogger("fleetchat.safety.guard")

DEFAULT_MODELS = {"llama_guard": "llama-guard", "moderation_api": "omni-moderation-latest"}
GUARD_DOWN = "The safety guard is unavailable right now; please retry shortly."


class ResilientGuard:
    """A remote guard under the fail policy: GuardUnavailableError becomes a 503 with retry-after ("closed") or the
    embedded guard's verdict ("open"); either way it is logged and counted."""

    def __init__(self, remote: Guard, embedded: EmbeddedGuard, policy: FailPolicy, metrics: GatewayMetrics) -> None:
        self.remote = remote
        self.embedded = embedded
        self.policy = policy
        self.metrics = metrics

    @property
    def name(self) -> str:
        return self.remote.name

    @property
    def policy_version(self) -> str:
        return self.remote.policy_version

    def _failed(self, exc: GuardUnavailableError) -> None:
        action = "refused" if self.policy == "closed" else "embedded"
        log.warning("safety guard %s unavailable (%s): %s", self.remote.name, action, exc)
        self.metrics.safety_guard_failures.labels(self.remote.name, action).inc()
        if self.policy == "closed":
            raise ServiceUnavailableError(GUARD_DOWN, retry_after_s=GUARD_RETRY_AFTER_S, code="guard_unavailable")

    async def check(self, messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        try:
            return await self.remote.check(messages)
        except GuardUnavailableError as exc:
            self._failed(exc)
            finding = await self.embedded.check(messages)
            # Audited under the policy that decided, not the remote one that could not.
            return finding.model_copy(update={"policy_version": self.embedded.policy_version}) if finding else None

    async def moderate(self, inputs: list[str]) -> list[ModerationResult]:
        try:
            return await self.remote.moderate(inputs)
        except GuardUnavailableError as exc:
            self._failed(exc)
            return await self.embedded.moderate(inputs)


def open_guard(
    settings: Settings, embedded: EmbeddedGuard, client: httpx.AsyncClient, metrics: GatewayMetrics
) -> Guard:
    """The guard this deployment is configured with (remote guards share the gateway's HTTP client)."""
    if settings.guard.kind == "embedded":
        return embedded
    return ResilientGuard(bare_guard(settings, embedded, client), embedded, settings.guard.fail, metrics)


def bare_guard(settings: Settings, embedded: EmbeddedGuard, client: httpx.AsyncClient) -> Guard:
    """The guard `settings` name without the fail policy: a remote one raises GuardUnavailableError when it cannot
    answer (what an evaluation of it must see, rather than the embedded guard's verdict or a 503)."""
    if settings.guard.kind == "embedded":
        return embedded
    assert settings.guard.url is not None  # Settings validates it
    key = settings.guard.api_key.get_secret_value() if settings.guard.api_key else None
    endpoint = RemoteEndpoint(
        client,
        settings.guard.url,
        settings.guard.model or DEFAULT_MODELS[settings.guard.kind],
        api_key=key,
        timeout_s=settings.guard.timeout_s,
        attempts=settings.guard.attempts,
    )
    remote: Guard
    if settings.guard.kind == "llama_guard":
        band = settings.guard.band
        ignored = frozenset(settings.guard.ignored_codes)
        remote = LlamaGuardGuard(endpoint, ignored_codes=ignored, embedded=embedded if band else None, band=band)
        if band is not None:
            return remote  # the embedded guard decides deny-rule hits in band mode
    else:
        remote = ModerationApiGuard(endpoint)
    return RuleGatedGuard(remote, embedded) if settings.guard.rules else remote
