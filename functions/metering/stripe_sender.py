"""Send one meter event to Stripe: the SDK client, the tenacity retry policy and duplicate-identifier detection.

Errors, as the exporter sees them:
    SendOutcome.SENT / SendOutcome.ALREADY_THERE   Stripe has the event (a duplicate identifier means it already did)
    StripeSendError(transient=True)                 429, 409, 5xx or no connection, still failing after every retry
    StripeSendError(transient=False)                anything else (bad key, invalid request): retrying cannot help
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import TYPE_CHECKING

import stripe
from pydantic import BaseModel, Field
from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_attempt, stop_after_delay
from tenacity.wait import wait_random_exponential

from shared.storage.ledger import MeterSend

if TYPE_CHECKING:
    from stripe.params.billing import MeterEventCreateParams

logger = logging.getLogger(__name__)

ALREADY_EXISTS_CODE = "resource_already_exists"


class RetryPolicy(BaseModel):
    """How hard one send tries before the exporter stops and leaves the rest to the next run."""

    attempts: int = Field(default=6, ge=1)
    wait_initial_s: float = Field(default=0.5, ge=0)  # exponential backoff with full jitter from here...
    wait_max_s: float = Field(default=20.0, ge=0)  # ...capped here
    give_up_after_s: float = Field(default=120.0, gt=0)  # one send never blocks the run longer than this
    timeout_s: float = Field(default=20.0, gt=0)  # per HTTP request (the SDK's default is 80 s)


class SendOutcome(StrEnum):
    SENT = "sent"
    ALREADY_THERE = "already_there"  # Stripe refused the identifier as a duplicate: an earlier attempt got through


class StripeSendError(Exception):
    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


def _error_code(exc: stripe.StripeError) -> str | None:
    body = exc.json_body if isinstance(exc.json_body, dict) else {}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    return exc.code or error.get("code")


def is_duplicate(exc: BaseException) -> bool:
    """Stripe's answer to an identifier it has already accepted (within its rolling dedup window of >= 24 h)."""
    return isinstance(exc, stripe.InvalidRequestError) and _error_code(exc) == ALREADY_EXISTS_CODE


def is_transient(exc: BaseException) -> bool:
    if not isinstance(exc, stripe.StripeError):
        return False
    should_retry = {name.lower(): value for name, value in (exc.headers or {}).items()}.get("stripe-should-retry")
    if should_retry is not None:
        return should_retry == "true"
    if isinstance(exc, stripe.RateLimitError | stripe.APIConnectionError):
        return True
    # A lock timeout (409) or a server error; InvalidRequestError and the other 4xx never get better by retrying.
    status = exc.http_status
    return type(exc) is stripe.APIError and (status is None or status == 409 or status >= 500)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, stripe.StripeError):
        status = exc.http_status if exc.http_status is not None else "no response"
        return f"{type(exc).__name__} ({status}): {exc.user_message or exc}"
    return f"{type(exc).__name__}: {exc}"


class MeterEventSender:
    """Stripe's `POST /v1/billing/meter_events` with retries (the SDK's own are off: tenacity alone decides)."""

    def __init__(self, api_key: str, *, api_base: str | None = None, policy: RetryPolicy | None = None) -> None:
        self.policy = policy or RetryPolicy()
        self._http = stripe.new_default_http_client(timeout=self.policy.timeout_s)
        self._client = stripe.StripeClient(
            api_key,
            base_addresses={"api": api_base} if api_base else None,
            max_network_retries=0,
            http_client=self._http,
        )

    def send(self, event: MeterSend) -> SendOutcome:
        """Deliver `event` (its identifier makes this safe to repeat); raises StripeSendError when it cannot."""
        params: MeterEventCreateParams = {
            "event_name": event.meter,
            "identifier": event.identifier,
            "timestamp": int(event.window_start.timestamp()),
            "payload": {"stripe_customer_id": event.customer_id, "value": str(event.value)},
        }
        policy = self.policy
        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=stop_after_attempt(policy.attempts) | stop_after_delay(policy.give_up_after_s),
            wait=wait_random_exponential(multiplier=policy.wait_initial_s, max=policy.wait_max_s),
            before_sleep=before_sleep_log(logger, logging.WARNING),
            reraise=True,
        )
        try:
            retrying(self._client.v1.billing.meter_events.create, params)
        except stripe.StripeError as exc:
            if is_duplicate(exc):
                return SendOutcome.ALREADY_THERE
            attempts = retrying.statistics.get("attempt_number", 1)
            message = f"meter event {event.identifier}: {_describe(exc)} (attempts: {attempts})"
            raise StripeSendError(message, transient=is_transient(exc)) from exc
        return SendOutcome.SENT

    def close(self) -> None:
        self._http.close()
