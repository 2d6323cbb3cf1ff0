"""One request's accounting: admit it (429 or a reservation), then settle the reservation and write its ledger entry
exactly once when it ends, whether it completed, was aborted by the client, failed or was filtered."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from anyio import CancelScope, to_thread

from functions.accounts.auth import Caller
from functions.control.admission import Admission, Reservation, check_choices, estimate_prompt_tokens, prompt_messages
from functions.control.batch_lines import batch_line_request, scope_prefix
from functions.metrics.gateway import GatewayMetrics
from functions.spooled_writer import LedgerWriter
from shared.errors import FleetchatError, RateLimitError
from shared.fleet.tables import limits_for
from shared.storage.conversations import StoreUnavailableError
from shared.storage.ledger import LedgerEntry, Outcome, PriceClass
from shared.storage.timestamps import utc_now
from shared.wire.schemas import ChatCompletionRequest

log = logging.getLogger("fleetchat.accounting")

REQUEST_ID_HEADER = "x-request-id"


def _request_identity() -> tuple[str, PriceClass]:
    """A new request id at the standard price; a batch line's own id at the batch price (functions/control/
    batch_lines.py: the same on every run of that line, so a line run again is never billed twice)."""
    line = batch_line_request()
    return (f"req_{uuid.uuid4().hex}", "standard") if line is None else (line, "batch")


@dataclass(frozen=True)
class TokenUsage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @classmethod
    def from_openai(cls, usage: dict[str, Any] | None) -> TokenUsage | None:
        if not usage:
            return None
        details = usage.get("prompt_tokens_details") or {}
        return cls(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            cached_tokens=int(details.get("cached_tokens") or 0),
        )

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class RequestAccount:
    request_id: str
    caller: Caller
    model: str
    reservation: Reservation
    prompt_estimate: int
    accounting: Accounting
    closed: bool = False
    model_version: str | None = (
        None  # the model version that answered (stored with the answer; functions/control/canary.py)
    )
    served_from_cache: bool = (
        False  # a result-cache hit (functions/chat/result_cache/cache.py): no GPU time to count as spend
    )
    usage: TokenUsage | None = None  # the answer's usage once the books are closed (a stored response keeps it)
    price_class: PriceClass = "standard"

    @property
    def headers(self) -> dict[str, str]:
        return {REQUEST_ID_HEADER: self.request_id, **self.reservation.headers}

    def apply(self, request: ChatCompletionRequest) -> ChatCompletionRequest:
        """The request with the completion budget admission granted."""
        if self.reservation.max_tokens is None:
            return request
        return request.model_copy(update={"max_tokens": self.reservation.max_tokens, "max_completion_tokens": None})

    async def close(self, usage: TokenUsage | None, outcome: Outcome) -> None:
        """Settle and write the ledger entry once; shielded, so a client that goes away cannot interrupt it."""
        if self.closed:
            return
        self.closed = True
        self.usage = usage
        with CancelScope(shield=True):
            await to_thread.run_sync(self._close, usage, outcome)

    @asynccontextmanager
    async def closed_if_raising(self) -> AsyncIterator[None]:
        """Close the account when the block raises: failed for an API error (which then carries this request's id and
        x-ratelimit-* headers), aborted for anything else (the client went away)."""
        try:
            yield
        except FleetchatError as exc:
            await self.close(None, Outcome.FAILED)
            exc.headers.update(self.headers)
            raise
        except BaseException:
            await self.close(None, Outcome.ABORTED)
            raise

    def _close(self, usage: TokenUsage | None, outcome: Outcome) -> None:
        admission = self.accounting.admission
        used = usage or TokenUsage(0, 0)
        try:
            admission.settle(self.reservation, used.total)
            if used.total == 0 and outcome is not Outcome.FILTERED:
                admission.release_message(self.reservation)
        except StoreUnavailableError:
            log.warning("request %s: rate-limit counters not settled (store unavailable)", self.request_id)
        if used.total == 0 and outcome in (Outcome.FAILED, Outcome.ABORTED):
            return  # nothing reached the model: nothing to bill
        metrics = self.accounting.metrics
        for kind, tokens in (
            ("prompt", used.prompt_tokens),
            ("completion", used.completion_tokens),
            ("cached", used.cached_tokens),
        ):
            metrics.ledger_tokens.labels(self.model, kind, outcome.value).inc(tokens)
        if not self.served_from_cache:
            metrics.count_spend(self.caller.tenant, self.model, used.prompt_tokens, used.completion_tokens)
        recorded = self.accounting.writer.record(
            LedgerEntry(
                request_id=self.request_id,
                tenant_id=self.caller.tenant.id,
                key_id=self.caller.key.id,
                model=self.model,
                prompt_tokens=used.prompt_tokens,
                completion_tokens=used.completion_tokens,
                cached_tokens=used.cached_tokens,
                outcome=outcome,
                created_at=utc_now(),
                price_class=self.price_class,
            )
        )
        if not recorded:
            metrics.ledger_spooled.inc()


class Accounting:
    def __init__(self, admission: Admission, writer: LedgerWriter, metrics: GatewayMetrics) -> None:
        self.admission = admission
        self.writer = writer
        self.metrics = metrics

    async def open(self, caller: Caller, request: ChatCompletionRequest, pool: str) -> RequestAccount:
        """Admit the request (raises 429) and return its account.

        If the counter store cannot be reached the request is admitted unchecked (fail open, counted and logged): an
        outage of the limiter must not become an outage of the service. The ledger still records it.
        """
        limits = limits_for(caller.tenant.tier, caller.tenant.limits)
        counted = prompt_messages(request)  # tool definitions and calls are prompt tokens too

        prefix = scope_prefix()  # a batch line's windows are its own

        def admit() -> Reservation:
            return self.admission.admit(
                caller.tenant.id, caller.key.id, limits, counted, request.output_limit(), pool, choices=request.n,
                scope_prefix=prefix,
            )  # fmt: skip

        def unchecked() -> Reservation:
            check_choices(limits, request.n)
            return self.admission.unchecked(limits, counted, request.output_limit(), pool)

        reservation = await self._reserve(caller, admit, unchecked)
        request_id, price_class = _request_identity()
        return RequestAccount(
            request_id=request_id,
            caller=caller,
            model=pool,
            reservation=reservation,
            prompt_estimate=estimate_prompt_tokens(counted),
            accounting=self,
            price_class=price_class,
        )

    async def open_input_only(self, caller: Caller, tokens: int, model: str) -> RequestAccount:
        """Admit a request that reads `tokens` of input and generates nothing (a moderation), billed as `model`."""
        limits = limits_for(caller.tenant.tier, caller.tenant.limits)

        prefix = scope_prefix()

        def admit() -> Reservation:
            return self.admission.admit_tokens(caller.tenant.id, caller.key.id, limits, tokens, scope_prefix=prefix)

        def unchecked() -> Reservation:
            return Reservation((), 0, 0, 0, False)

        reservation = await self._reserve(caller, admit, unchecked)
        request_id, price_class = _request_identity()
        return RequestAccount(request_id, caller, model, reservation, tokens, self, price_class=price_class)

    async def _reserve(
        self, caller: Caller, admit: Callable[[], Reservation], unchecked: Callable[[], Reservation]
    ) -> Reservation:
        try:
            return await to_thread.run_sync(admit)
        except RateLimitError as refused:
            self.metrics.rate_limited.labels(caller.tenant.tier.value, refused.code or refused.error_type).inc()
            raise
        except StoreUnavailableError:
            log.warning("rate-limit store unavailable: admitting a request of %s unchecked", caller.tenant.id)
            self.metrics.admission_unavailable.inc()
            return unchecked()
