"""Whether the request being served is a line of a batch (functions/batches/), and what that changes on its way:
the request id it is billed under (fixed by the batch and the line, so a line run again is billed once) at the batch
price, rate-limit windows of its own (a batch never spends the tenant's interactive requests or tokens per minute),
and the lowest place in a pool's queue (interactive requests of every tier start first)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from shared.fleet.tiers import Tier

# Set by the batch runner around one line (functions/batches/lines.py); the request id the line is billed under.
_BATCH_LINE_REQUEST: ContextVar[str | None] = ContextVar("fleetchat_batch_line_request", default=None)
BATCH_SCOPE_PREFIX = "batch-"  # a batch line's rate-limit windows: `batch-key:<id>`, `batch-tenant:<id>`
BATCH_QUEUE_TIER = Tier.FREE  # the lowest priority in a pool's queue (functions/control/pool_admission.py)


@contextmanager
def billed_as_batch_line(request_id: str) -> Iterator[None]:
    """Requests opened inside the block are that batch line's."""
    token = _BATCH_LINE_REQUEST.set(request_id)
    try:
        yield
    finally:
        _BATCH_LINE_REQUEST.reset(token)


def batch_line_request() -> str | None:
    """The request id of the batch line being served, None for an interactive request."""
    return _BATCH_LINE_REQUEST.get()


def scope_prefix() -> str:
    """The prefix of the rate-limit windows the request is charged to ('' for interactive requests)."""
    return BATCH_SCOPE_PREFIX if batch_line_request() is not None else ""


def queue_tier(tier: Tier) -> Tier:
    """The tier the request waits as in a pool's queue: its own, or the lowest for a batch line."""
    return BATCH_QUEUE_TIER if batch_line_request() is not None else tier
