"""The SLO judgement of one request, fed explicit timestamps: which histograms it lands in and its goodput verdict."""

from __future__ import annotations

import pytest

from functions.control.slo_observation import RequestObservation, meets_slo, p95
from functions.metrics.gateway import INTER_TOKEN_BUCKETS, TTFT_BUCKETS, GatewayMetrics
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier, TierSlo

SLO = TierSlo(ttft_p95_s=2.0, inter_token_p95_s=0.25)


def _value(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def _stream(metrics: GatewayMetrics, times: list[float], *, failed: bool = False, finished: bool = True):
    """A stream labelled plus/flagship that arrived at t=0 and sent content at `times`."""
    observation = RequestObservation(metrics, arrived=0.0, tier="plus", policy_tier=Tier.PLUS, slo=SLO, pool="flagship")
    for t in times:
        observation.content_sent("flagship", now=t)
    observation.streamed, observation.finished, observation.failed = True, finished, failed
    observation.response_ended(200, now=(times[-1] if times else 0.0) + 0.01)
    return observation


def test_p95_interpolates_between_ranks() -> None:
    assert p95([1.0]) == 1.0
    assert p95([0.0, 1.0]) == pytest.approx(0.95)
    assert p95([float(i) for i in range(101)]) == pytest.approx(95.0)


@pytest.mark.parametrize(
    ("ttft", "gaps", "met"),
    [
        (1.0, [0.1] * 20, True),
        (2.0, [0.25] * 20, True),  # on the bound is within it
        (2.01, [0.1] * 20, False),
        (1.0, [0.1] * 39 + [5.0], True),  # one hiccup in forty gaps is within what a p95 allows
        (1.0, [0.1] * 18 + [5.0, 5.0], False),
        (1.0, [], True),  # a one-chunk answer
        (None, [], False),  # no content at all
    ],
)
def test_meets_slo(ttft: float | None, gaps: list[float], met: bool) -> None:
    assert meets_slo(SLO, ttft, gaps) is met


def test_a_fast_stream_meets_the_slo_and_fills_the_histograms() -> None:
    metrics = GatewayMetrics()
    _stream(metrics, [0.5, 0.6, 0.7, 0.8])
    labels = {"tier": "plus", "pool": "flagship"}
    assert _value(metrics, "fleetchat_gateway_ttft_seconds_count", **labels) == 1
    assert _value(metrics, "fleetchat_gateway_ttft_seconds_sum", **labels) == pytest.approx(0.5)
    assert _value(metrics, "fleetchat_gateway_inter_token_seconds_count", **labels) == 3
    assert _value(metrics, "fleetchat_gateway_inter_token_seconds_sum", **labels) == pytest.approx(0.3)
    assert _value(metrics, "fleetchat_gateway_e2e_seconds_sum", **labels) == pytest.approx(0.81)
    assert _value(metrics, "fleetchat_gateway_goodput_total", met="true", **labels) == 1
    assert _value(metrics, "fleetchat_gateway_requests_total", model="flagship", status="200") == 1


def test_first_token_listeners_get_each_stream_ttft_once_with_the_callers_tier() -> None:
    metrics = GatewayMetrics()
    heard: list[tuple[str, Tier, float]] = []
    metrics.first_token_listeners.append(lambda pool, tier, seconds: heard.append((pool, tier, seconds)))
    _stream(metrics, [0.5, 0.6, 0.7])
    eval_stream = RequestObservation(metrics, arrived=1.0, tier="eval", policy_tier=Tier.FREE, slo=SLO, pool="mini")
    eval_stream.content_sent("mini", now=1.25)
    assert heard == [("flagship", Tier.PLUS, 0.5), ("mini", Tier.FREE, 0.25)]


def test_a_slow_first_token_or_a_stalling_stream_misses_it() -> None:
    metrics = GatewayMetrics()
    _stream(metrics, [2.5, 2.6])
    _stream(metrics, [0.1, 0.2, 1.2, 2.2])
    assert _value(metrics, "fleetchat_gateway_goodput_total", tier="plus", pool="flagship", met="false") == 2


def test_a_failed_stream_misses_it_and_a_stopped_one_gets_no_verdict() -> None:
    metrics = GatewayMetrics()
    _stream(metrics, [0.1, 0.2], failed=True)
    _stream(metrics, [0.1, 0.2], finished=False)  # the client stopped it
    labels = {"tier": "plus", "pool": "flagship"}
    assert _value(metrics, "fleetchat_gateway_goodput_total", met="false", **labels) == 1
    assert _value(metrics, "fleetchat_gateway_goodput_total", met="true", **labels) == 0
    assert _value(metrics, "fleetchat_gateway_e2e_seconds_count", **labels) == 0  # neither was a whole answer
    assert _value(metrics, "fleetchat_gateway_ttft_seconds_count", **labels) == 2  # both had a first token


def test_refusals_before_routing_count_as_unknown_and_4xx_get_no_verdict() -> None:
    metrics = GatewayMetrics()
    RequestObservation(metrics, arrived=0.0).response_ended(401, now=0.01)
    routed = RequestObservation(metrics, arrived=0.0, tier="free", slo=SLO, pool="mini")
    routed.response_ended(429, now=0.01)
    unavailable = RequestObservation(metrics, arrived=0.0, tier="free", slo=SLO, pool="mini")
    unavailable.response_ended(503, now=0.01)
    assert _value(metrics, "fleetchat_gateway_requests_total", model="unknown", status="401") == 1
    assert _value(metrics, "fleetchat_gateway_requests_total", model="mini", status="429") == 1
    assert _value(metrics, "fleetchat_gateway_goodput_total", tier="free", pool="mini", met="false") == 1


def test_every_tier_slo_is_a_bucket_bound_and_every_customer_series_exists_from_the_start() -> None:
    metrics = GatewayMetrics()
    for tier, policy in tables().tiers.items():
        assert policy.slo.ttft_p95_s in TTFT_BUCKETS
        assert policy.slo.inter_token_p95_s in INTER_TOKEN_BUCKETS
        for pool in policy.pools:
            for met in ("true", "false"):
                sample = metrics.registry.get_sample_value(
                    "fleetchat_gateway_goodput_total", {"tier": tier.value, "pool": pool, "met": met}
                )
                assert sample == 0.0
