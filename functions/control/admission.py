"""Admission control: RPM and TPM per key and per tenant, the free tier's rolling message cap, and the output budget.

A request reserves (estimated prompt tokens + its completion budget) in the current one-minute window of both its key
and its tenant before it is admitted, and settles to the real usage when it ends. The counters live in the shared store,
so every gateway replica enforces one limit. Brownout lowers each tier's completion budget while a pool is overloaded
(functions/control/brownout.py decides when).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from shared.context_window import BYTES_PER_TOKEN, IMAGE_TOKENS, MESSAGE_OVERHEAD_TOKENS
from shared.errors import InvalidRequestError, QuotaExceededError, RateLimitError
from shared.fleet.tiers import TierLimits
from shared.storage.limits import ChargeOutcome, RateLimitStore, WindowCharge, WindowCount
from shared.storage.timestamps import utc_now
from shared.wire.schemas import ChatCompletionRequest, ChatMessage

WINDOW_S = 60
BROWNOUT_HEADER = "x-fleetchat-brownout"


def prompt_messages(request: ChatCompletionRequest) -> list[ChatMessage]:
    """The messages as admission estimates them: tool definitions and tool calls are prompt text too (the worker
    renders them into the prompt), so they count toward the token reservation, the context bound and limits."""
    counted = [
        m.model_copy(update={"content": m.text() + json.dumps([c.model_dump() for c in m.tool_calls])})
        if m.tool_calls
        else m
        for m in request.messages
    ]
    if request.tools:  # counted even with tool_choice "none": vLLM still renders them (an upper bound is safe)
        tools = json.dumps([t.model_dump(exclude_none=True) for t in request.tools], ensure_ascii=False)
        counted.insert(0, ChatMessage(role="system", content=tools))
    return counted


def estimate_prompt_tokens(messages: list[ChatMessage]) -> int:
    """A cheap estimate for the reservation (~3 bytes per token); settlement replaces it with the real count."""
    text = sum(len(m.text().encode()) for m in messages) // BYTES_PER_TOKEN
    return text + IMAGE_TOKENS * sum(len(m.images()) for m in messages) + MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1)


def prompt_token_bound(messages: list[ChatMessage]) -> int:
    """A bound the real count never exceeds: byte-level BPE tokenizers make at most one token per byte."""
    text = sum(len(m.text().encode()) for m in messages)
    return (
        text + IMAGE_TOKENS * sum(len(m.images()) for m in messages) + 2 * MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1)
    )


def _duration(seconds: float) -> str:
    """OpenAI's reset format: "1s", "6m0s"."""
    whole = max(math.ceil(seconds), 0)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{whole}s"


@dataclass
class Reservation:
    """An admitted request's claim on its windows; `settle` it exactly once with the real usage."""

    scopes: tuple[str, ...]  # empty: admitted unchecked, nothing to settle
    window_start: int
    reserved_tokens: int
    max_tokens: int | None  # the completion budget sent to the worker (None: the worker's context bound)
    brownout: bool
    headers: dict[str, str] = field(default_factory=dict)
    message_subject: str | None = None
    message_at: datetime | None = None


def _scopes(tenant_id: str, key_id: str, prefix: str = "") -> tuple[str, str]:
    """The two windows every request is charged to: its API key's and its tenant's (a batch line's own, prefixed:
    functions/control/batch_lines.py)."""
    return f"{prefix}key:{key_id}", f"{prefix}tenant:{tenant_id}"


def _headers(limits: TierLimits, counts: list[WindowCount], window_end: float, now: float) -> dict[str, str]:
    key, tenant = counts
    requests = min(
        (limits.key_rpm - key.requests, limits.key_rpm), (limits.tenant_rpm - tenant.requests, limits.tenant_rpm)
    )
    tokens = min((limits.key_tpm - key.tokens, limits.key_tpm), (limits.tenant_tpm - tenant.tokens, limits.tenant_tpm))
    reset = _duration(window_end - now)
    return {
        "x-ratelimit-limit-requests": str(requests[1]),
        "x-ratelimit-remaining-requests": str(max(requests[0], 0)),
        "x-ratelimit-reset-requests": reset,
        "x-ratelimit-limit-tokens": str(tokens[1]),
        "x-ratelimit-remaining-tokens": str(max(tokens[0], 0)),
        "x-ratelimit-reset-tokens": reset,
    }


def check_choices(limits: TierLimits, choices: int) -> None:
    """A 400 for more choices (`n`) than the tier allows per request (each is a sequence on the GPU)."""
    if choices > limits.max_choices:
        raise InvalidRequestError(
            f"n is too large: {choices}. Your tier allows at most {limits.max_choices} choices per request.",
            param="n",
            code="invalid_value",
        )


class Admission:
    def __init__(
        self,
        store: RateLimitStore,
        context_tokens: dict[str, int],
        brownout: Callable[[str], bool] = lambda _pool: False,
    ) -> None:
        self.store = store
        self.context_tokens = context_tokens
        # Whether a pool is in brownout now: the gateway passes its BrownoutController's (load-driven, with the admin
        # override, functions/control/brownout.py).
        self.brownout = brownout

    def admit(
        self,
        tenant_id: str,
        key_id: str,
        limits: TierLimits,
        messages: list[ChatMessage],
        requested_max_tokens: int | None,
        pool: str,
        now: datetime | None = None,
        *,
        choices: int = 1,
        scope_prefix: str = "",
    ) -> Reservation:
        """Reserve the request's tokens (the prompt once, the output budget for each of its `choices`) or raise 429
        (nothing is charged when refused)."""
        now = now or utc_now()
        check_choices(limits, choices)
        if requested_max_tokens is not None and requested_max_tokens > limits.max_output_tokens:
            raise InvalidRequestError(
                f"max_tokens is too large: {requested_max_tokens}. Your tier allows at most "
                f"{limits.max_output_tokens} completion tokens per request.",
                param="max_tokens",
                code="invalid_value",
            )
        budget, max_tokens, capped = self._completion_budget(limits, requested_max_tokens, messages, pool)
        reserved = estimate_prompt_tokens(messages) + choices * (max_tokens or budget)
        smallest_tpm = min(limits.key_tpm, limits.tenant_tpm)
        if reserved > smallest_tpm:
            each = "max_tokens" if choices == 1 else f"{choices} x max_tokens"
            raise QuotaExceededError(
                f"Request too large: it may use {reserved} tokens (prompt + {each}) and the limit is "
                f"{smallest_tpm} tokens per minute. Send fewer messages or a smaller max_tokens.",
                retry_after_s=WINDOW_S,
                code="request_too_large",
                param="max_tokens",
            )
        moment = now.timestamp()
        window_start = int(moment // WINDOW_S * WINDOW_S)
        reservation = Reservation(_scopes(tenant_id, key_id, scope_prefix), window_start, reserved, max_tokens, capped)
        if limits.message_cap is not None:
            try:
                self._count_message(tenant_id, limits, now, reservation)
            except QuotaExceededError as refused:
                # Charges nothing: a zero charge only reads the windows for the x-ratelimit-* headers.
                counts = self._charge(reservation, limits, 0, 0).counts
                refused.headers.update(_headers(limits, counts, window_start + WINDOW_S, moment))
                raise
        return self._admit(reservation, limits, moment)

    def admit_tokens(
        self, tenant_id: str, key_id: str, limits: TierLimits, tokens: int, now: datetime | None = None,
        *, scope_prefix: str = "",
    ) -> Reservation:  # fmt: skip
        """Reserve one request of exactly `tokens` (input only, nothing generated: a moderation) or raise 429. It does
        not count against the free tier's message cap, which counts chat messages."""
        smallest_tpm = min(limits.key_tpm, limits.tenant_tpm)
        if tokens > smallest_tpm:
            raise QuotaExceededError(
                f"Request too large: it uses {tokens} tokens and the limit is {smallest_tpm} tokens per minute. "
                "Send less input.",
                retry_after_s=WINDOW_S,
                code="request_too_large",
                param="input",
            )
        moment = (now or utc_now()).timestamp()
        window_start = int(moment // WINDOW_S * WINDOW_S)
        reservation = Reservation(_scopes(tenant_id, key_id, scope_prefix), window_start, tokens, 0, False)
        return self._admit(reservation, limits, moment)

    def _charge(self, reservation: Reservation, limits: TierLimits, requests: int, tokens: int) -> ChargeOutcome:
        key, tenant = reservation.scopes
        start = reservation.window_start
        return self.store.charge(
            [
                WindowCharge(scope=key, window_start=start, window_s=WINDOW_S, requests=requests, tokens=tokens,
                             max_requests=limits.key_rpm, max_tokens=limits.key_tpm),
                WindowCharge(scope=tenant, window_start=start, window_s=WINDOW_S, requests=requests, tokens=tokens,
                             max_requests=limits.tenant_rpm, max_tokens=limits.tenant_tpm),
            ]
        )  # fmt: skip

    def _admit(self, reservation: Reservation, limits: TierLimits, moment: float) -> Reservation:
        """Charge the reservation to both windows, or raise 429 (and free its message-cap slot)."""
        window_end = reservation.window_start + WINDOW_S
        outcome = self._charge(reservation, limits, 1, reservation.reserved_tokens)
        headers = _headers(limits, outcome.counts, window_end, moment)
        if not outcome.admitted:
            self.release_message(reservation)
            raise self._refusal(outcome, headers, window_end - moment)
        reservation.headers.update(headers)
        return reservation

    def unchecked(
        self, limits: TierLimits, messages: list[ChatMessage], requested_max_tokens: int | None, pool: str
    ) -> Reservation:
        """A reservation that holds no counters (the store was unavailable): the budget still applies."""
        _, max_tokens, capped = self._completion_budget(limits, requested_max_tokens, messages, pool)
        return Reservation((), 0, 0, max_tokens, capped)

    def _completion_budget(
        self, limits: TierLimits, requested: int | None, messages: list[ChatMessage], pool: str
    ) -> tuple[int, int | None, bool]:
        """(the tier's budget now, max_tokens to send, whether brownout capped it)."""
        brownout = self.brownout(pool)
        budget = limits.brownout_max_output_tokens if brownout else limits.max_output_tokens
        if requested is not None:
            max_tokens: int | None = min(requested, budget)  # only brownout lowers it below the ceiling (see admit)
        else:
            # Unasked, the budget is sent only where it surely fits the context (the worker refuses prompt +
            # max_tokens > context); otherwise the worker bounds the answer by the context and settlement corrects.
            room = self.context_tokens.get(pool, 0) - prompt_token_bound(messages)
            max_tokens = budget if room >= budget else None
        return budget, max_tokens, brownout and max_tokens == budget

    def _count_message(self, tenant_id: str, limits: TierLimits, now: datetime, reservation: Reservation) -> None:
        assert limits.message_cap is not None
        subject = f"tenant:{tenant_id}"
        outcome = self.store.record_message(subject, now, limits.message_window_s, limits.message_cap)
        frees_at = (outcome.oldest_at or now) + timedelta(seconds=limits.message_window_s)
        cap_headers = {
            "x-ratelimit-limit-messages": str(limits.message_cap),
            "x-ratelimit-remaining-messages": str(max(limits.message_cap - outcome.used, 0)),
            "x-ratelimit-reset-messages": _duration((frees_at - now).total_seconds()),
        }
        if not outcome.admitted:
            hours = limits.message_window_s / 3600
            raise QuotaExceededError(
                f"You have reached the free tier's limit of {limits.message_cap} messages per {hours:g} hours. "
                f"A message frees up at {frees_at:%H:%M} UTC; upgrade to Plus for no message cap.",
                retry_after_s=(frees_at - now).total_seconds(),
                code="message_cap_reached",
                headers=cap_headers,
            )
        reservation.headers.update(cap_headers)
        reservation.message_subject, reservation.message_at = subject, now

    @staticmethod
    def _refusal(outcome: ChargeOutcome, headers: dict[str, str], reset_s: float) -> RateLimitError:
        scope = "API key" if (outcome.refused_scope or "").startswith("key:") else "organization"
        kind = outcome.refused_by or "requests"
        unit = "requests per minute (RPM)" if kind == "requests" else "tokens per minute (TPM)"
        limit = headers[f"x-ratelimit-limit-{kind}"]
        return RateLimitError(
            f"Rate limit reached for your {scope} on {unit}: limit {limit}. Please try again in {_duration(reset_s)}.",
            limit_type=kind,
            retry_after_s=reset_s,
            headers=dict(headers),
        )

    def settle(self, reservation: Reservation, used_tokens: int) -> None:
        """Replace the reservation by the real usage in both windows."""
        delta = used_tokens - reservation.reserved_tokens
        for scope in reservation.scopes:
            self.store.settle(scope, reservation.window_start, delta)

    def release_message(self, reservation: Reservation) -> None:
        """A request that got no answer does not count against the message cap."""
        if reservation.message_subject is not None and reservation.message_at is not None:
            self.store.forget_message(reservation.message_subject, reservation.message_at)
            reservation.message_subject = None
