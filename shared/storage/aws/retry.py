"""Retries for the AWS adapter: tenacity retries transient errors only and turns an unreachable store into a 503."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from botocore.config import Config
from botocore.exceptions import ClientError, HTTPClientError, NoCredentialsError
from botocore.exceptions import ConnectionError as BotoConnectionError
from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_attempt, stop_after_delay
from tenacity.wait import wait_random_exponential

from shared.storage.conversations import StoreUnavailableError

logger = logging.getLogger(__name__)

# botocore's own retries are off so that tenacity alone decides; short timeouts make a dead store fail fast.
CLIENT_CONFIG = Config(connect_timeout=2, read_timeout=5, retries={"total_max_attempts": 1})

TRANSIENT_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "InternalServerError",
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
    }
)
# A cancelled transaction is worth retrying only when nothing in it failed a condition.
TRANSIENT_CANCEL_REASONS = frozenset(
    {"None", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded", "TransactionConflict"}
)
# Not transient, but the store is unusable (missing table or bucket, bad credentials): a 503, never a retry.
UNUSABLE_CODES = frozenset(
    {
        "ResourceNotFoundException",
        "NoSuchBucket",
        "AccessDenied",
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
        "ExpiredToken",
        "ExpiredTokenException",
    }
)


def error_code(exc: BaseException) -> str | None:
    return exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else None


def cancel_reasons(exc: BaseException) -> list[str]:
    """The per-item codes of a cancelled DynamoDB transaction ("None" for items that were fine)."""
    if not isinstance(exc, ClientError) or error_code(exc) != "TransactionCanceledException":
        return []
    return [reason.get("Code", "None") for reason in exc.response.get("CancellationReasons", [])]


def is_transient(exc: BaseException) -> bool:
    """Throttling, 5xx and broken connections; never a failed condition (412, ConditionalCheckFailed)."""
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return True
    if not isinstance(exc, ClientError):
        return False
    code = error_code(exc)
    if code == "TransactionCanceledException":
        reasons = cancel_reasons(exc)
        return any(r != "None" for r in reasons) and all(r in TRANSIENT_CANCEL_REASONS for r in reasons)
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return code in TRANSIENT_CODES or (status >= 500 and status != 501)


class Retrier:
    """Calls a boto3 method with exponential backoff and jitter, within `max_attempts` and `budget_s` seconds."""

    def __init__(self, max_attempts: int, budget_s: float) -> None:
        self.max_attempts = max_attempts
        self.budget_s = budget_s

    def __call__(self, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
        retrying = Retrying(
            stop=stop_after_attempt(self.max_attempts) | stop_after_delay(self.budget_s),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            retry=retry_if_exception(is_transient),
            before_sleep=before_sleep_log(logger, logging.WARNING),
            reraise=True,
        )
        try:
            return retrying(fn, **kwargs)
        except (ClientError, BotoConnectionError, HTTPClientError, NoCredentialsError) as exc:
            if is_transient(exc) or error_code(exc) in UNUSABLE_CODES or isinstance(exc, NoCredentialsError):
                logger.warning("AWS store unavailable: %s", exc)
                raise StoreUnavailableError() from exc
            raise
