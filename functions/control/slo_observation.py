"""One request's SLO observation: when it reached the gateway, which tier and pool it is for, when each content chunk
was handed to the client; at its end, the chat counter by status, end-to-end latency and the goodput verdict.

The HTTP middleware (functions/api/http_metrics.py) opens an observation per request and makes it the current one (a
context variable: the router, the stream relay and its worker threads all see the same object); the chat router
labels it (`label_chat`), the stream relay reports content chunks (`content_sent`) and the stream's end
(`stream_ended`). Without a current observation (a relay driven outside the app, in a unit test) every call is a no-op.

What is measured, and the decisions behind it (docs/observability.md):
- TTFT: arrival of the request at the gateway to the first chunk carrying content handed to the client (so auth,
  admission, the safety gate and routing count, as the user sees them). Inter-token: gaps between content chunks.
- Only streamed requests get TTFT, inter-token and a goodput verdict: the tier's `TierSlo` is defined for streams.
  A non-streamed answer's first content is the whole answer, so its latency is only end-to-end (its own histogram
  series; no verdict): folding it into TTFT would make a long non-streamed answer look like a slow first token, and
  the overload signal read from TTFT would react to answer length.
- Goodput: a stream that ended (finished, or halted by the safety filter) meets the SLO when its TTFT is within the
  tier's `ttft_p95_s` and its own p95 inter-token gap within `inter_token_p95_s` (the p95 of each request's gaps, so
  one scheduler hiccup does not fail a long answer); a stream that failed, or a 5xx after the request was routed, is
  met=false; a stream the client stopped gets no verdict (the client chose its end); 4xx get none (the client's
  request or quota, not the service's latency).
"""

from __future__ import annotations

import math
import time
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from functions.metrics.gateway import GatewayMetrics, tier_label
from shared.fleet.tables import policy_for
from shared.fleet.tiers import Tier, TierSlo
from shared.storage.accounts import Tenant

CHAT_ROUTE = "/v1/chat/completions"
UNKNOWN_MODEL = "unknown"  # the chat counter's model label before a pool was resolved (never the client's string)

_current: ContextVar[RequestObservation | None] = ContextVar("fleetchat_request_observation", default=None)


def p95(values: list[float]) -> float:
    """The 95th percentile with linear interpolation between ranks (numpy's default); values must not be empty."""
    data = sorted(values)
    rank = 0.95 * (len(data) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (rank - low)


def meets_slo(slo: TierSlo, ttft_s: float | None, gaps_s: list[float]) -> bool:
    """One streamed request against its tier's SLO: TTFT within `ttft_p95_s` and the p95 of its own inter-token gaps
    within `inter_token_p95_s` (no gap: a one-chunk answer meets the second half). No content at all (`ttft_s` None)
    does not meet it. The benchmark judges its client-side timings with this same function."""
    if ttft_s is None or ttft_s > slo.ttft_p95_s:
        return False
    return not gaps_s or p95(gaps_s) <= slo.inter_token_p95_s


@dataclass
class RequestObservation:
    metrics: GatewayMetrics
    arrived: float  # time.perf_counter() when the request reached the gateway
    tier: str | None = None  # the tier label (tier_label: "eval" for eval tenants), once the caller is known
    policy_tier: Tier | None = None  # the caller's tier itself (an eval tenant's too): what admission acts on
    slo: TierSlo | None = None
    pool: str | None = None  # the pool routed to; the answering pool once a stream reports it
    streamed: bool = False
    first_content: float | None = None
    last_content: float | None = None
    gaps: list[float] = field(default_factory=list)
    failed: bool = False  # the stream ended with an error event
    finished: bool = False  # the stream reached its end ([DONE] or a safety halt), not cut short by the client

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_content is None else self.first_content - self.arrived

    def content_sent(self, pool: str, now: float | None = None) -> None:
        """A chunk carrying content is being handed to the client."""
        now = time.perf_counter() if now is None else now
        self.streamed = True
        self.pool = pool
        if self.last_content is None:
            self.first_content = now
            if self.tier is not None and self.policy_tier is not None:
                ttft = now - self.arrived
                self.metrics.ttft.labels(self.tier, pool).observe(ttft)
                for listener in self.metrics.first_token_listeners:  # e.g. the overload control's TTFT signal
                    listener(pool, self.policy_tier, ttft)
        else:
            gap = now - self.last_content
            self.gaps.append(gap)
            if self.tier is not None:
                self.metrics.inter_token.labels(self.tier, pool).observe(gap)
        self.last_content = now

    def response_ended(self, status: int, now: float | None = None) -> None:
        """The chat response is over (its last byte sent, or it failed): count it, time it, judge it."""
        now = time.perf_counter() if now is None else now
        self.metrics.requests.labels(self.pool or UNKNOWN_MODEL, str(status)).inc()
        if self.tier is None or self.pool is None:
            return  # refused before routing (bad request, auth, unknown model): no tier and pool to judge
        answered = status == 200 and (not self.streamed or (self.finished and not self.failed))
        if answered:
            self.metrics.e2e.labels(self.tier, self.pool).observe(now - self.arrived)
        if self.streamed and (self.finished or self.failed):
            met = not self.failed and self.slo is not None and meets_slo(self.slo, self.ttft_s, self.gaps)
        elif status >= 500:
            met = False
        else:
            return
        self.metrics.goodput.labels(self.tier, self.pool, str(met).lower()).inc()


def begin(metrics: GatewayMetrics) -> tuple[RequestObservation, Token[RequestObservation | None]]:
    """Open the current request's observation (the middleware); returns it and the token to `end` it with."""
    observation = RequestObservation(metrics, time.perf_counter())
    return observation, _current.set(observation)


def end(token: Token[RequestObservation | None]) -> None:
    _current.reset(token)


def current() -> RequestObservation | None:
    return _current.get()


def label_chat(tenant: Tenant, pool: str) -> None:
    """The chat router resolved the pool: label this request with its tier (judged by its tier's SLO) and pool."""
    observation = _current.get()
    if observation is not None:
        observation.tier = tier_label(tenant)
        observation.policy_tier = tenant.tier
        observation.slo = policy_for(tenant.tier).slo
        observation.pool = pool


def content_sent(pool: str) -> None:
    """The stream relay is handing a chunk with content, from `pool`, to the client."""
    observation = _current.get()
    if observation is not None:
        observation.content_sent(pool)


def stream_ended(pool: str, *, finished: bool, failed: bool) -> None:
    """The stream relay is done: `finished` when the stream reached its end (not cut by the client), `failed` when it
    ended with an error event."""
    observation = _current.get()
    if observation is not None:
        observation.streamed = True
        observation.pool = pool
        observation.finished = finished
        observation.failed = failed
