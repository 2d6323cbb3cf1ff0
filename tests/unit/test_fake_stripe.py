"""The Stripe meter-events fake, driven by the real `stripe` SDK over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import requests
import stripe
from stripe._http_client import HTTPClient

from tests.support.fake_stripe import FakeStripe

API_KEY = "sk_test_fleetchat_fake"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeStripe]:
    with FakeStripe() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeStripe) -> Iterator[FakeStripe]:
    server.clear()
    server.clock = time.time
    server.come_back()
    yield server
    server.come_back()


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK sleeps >= 0.5 s between retries; keep the retry tests fast."""
    monkeypatch.setattr(HTTPClient, "INITIAL_DELAY", 0.01)
    monkeypatch.setattr(HTTPClient, "MAX_DELAY", 0.02)


def client(fake: FakeStripe, retries: int = 0, key: str = API_KEY) -> stripe.StripeClient:
    return stripe.StripeClient(key, base_addresses={"api": fake.url}, max_network_retries=retries)


def send(sc: stripe.StripeClient, identifier: str | None = "evt-1", **overrides: Any) -> Any:
    params: dict[str, Any] = {
        "event_name": "fleetchat_tokens",
        "payload": {"stripe_customer_id": "cus_A", "value": "42"},
    }
    if identifier is not None:
        params["identifier"] = identifier
    params.update(overrides)
    return sc.v1.billing.meter_events.create(params)


def test_create_is_recorded_and_answers_a_meter_event(fake: FakeStripe) -> None:
    fake.now = 1_750_000_000
    event = send(client(fake), timestamp=1_750_000_000 - 60)
    assert event.object == "billing.meter_event"
    assert (event.event_name, event.identifier, event.timestamp, event.created) == (
        "fleetchat_tokens",
        "evt-1",
        1_750_000_000 - 60,
        1_750_000_000,
    )
    assert event.livemode is False
    assert event.payload.to_dict() == {"stripe_customer_id": "cus_A", "value": "42"}
    assert event.last_response.request_id.startswith("req_")
    [recorded] = fake.events
    assert recorded.value == Decimal(42)
    assert recorded.idempotency_key
    assert fake.totals() == {("cus_A", "fleetchat_tokens"): 42}
    assert fake.identifiers() == {"evt-1"}


def test_decimal_negative_and_extra_payload_keys_sum(fake: FakeStripe) -> None:
    sc = client(fake)
    send(sc, "a", payload={"stripe_customer_id": "cus_A", "value": "1.5", "model": "mini"})
    send(sc, "b", payload={"stripe_customer_id": "cus_A", "value": "-0.5"})
    send(sc, "c", payload={"stripe_customer_id": "cus_B", "value": "7"})
    assert fake.events[0].payload == {"stripe_customer_id": "cus_A", "value": "1.5", "model": "mini"}
    assert fake.totals() == {("cus_A", "fleetchat_tokens"): Decimal("1.0"), ("cus_B", "fleetchat_tokens"): 7}


def test_missing_identifier_is_generated(fake: FakeStripe) -> None:
    event = send(client(fake), identifier=None)
    assert event.identifier
    assert fake.identifiers() == {event.identifier}


def test_duplicate_identifier_is_rejected_and_not_counted(fake: FakeStripe) -> None:
    sc = client(fake)
    send(sc, "evt-dup")
    with pytest.raises(stripe.InvalidRequestError) as info:
        send(sc, "evt-dup", payload={"stripe_customer_id": "cus_A", "value": "1"})
    err = info.value
    assert (err.http_status, err.code, err.param) == (400, "resource_already_exists", "identifier")
    assert err.json_body == {
        "error": {
            "type": "invalid_request_error",
            "code": "resource_already_exists",
            "message": "An event already exists with identifier evt-dup.",
            "param": "identifier",
        }
    }
    assert len(fake.events) == 1
    assert fake.totals() == {("cus_A", "fleetchat_tokens"): 42}


def test_identifier_window_expires_when_configured(fake: FakeStripe) -> None:
    fake.identifier_window_s = 24 * 3600
    try:
        fake.now = 1_750_000_000
        sc = client(fake)
        send(sc, "evt-old")
        fake.advance(24 * 3600)
        send(sc, "evt-old")
        assert len(fake.events) == 2
    finally:
        fake.identifier_window_s = None


@pytest.mark.parametrize(
    ("overrides", "param", "code"),
    [
        ({"payload": {"value": "3"}}, "payload[stripe_customer_id]", "parameter_missing"),
        ({"payload": {"stripe_customer_id": "cus_A"}}, "payload[value]", "parameter_missing"),
        ({"payload": {"stripe_customer_id": "cus_A", "value": "lots"}}, "payload[value]", None),
        ({"event_name": ""}, "event_name", "parameter_missing"),
        ({"event_name": "x" * 101}, "event_name", None),
        ({"identifier": "x" * 101}, "identifier", None),
        ({"timestamp": "soon"}, "timestamp", "parameter_invalid_integer"),
        ({"customer": "cus_A"}, "customer", "parameter_unknown"),
    ],
)
def test_bad_input_is_a_400_with_param(
    fake: FakeStripe, overrides: dict[str, Any], param: str, code: str | None
) -> None:
    with pytest.raises(stripe.InvalidRequestError) as info:
        send(client(fake), **overrides)
    assert (info.value.http_status, info.value.param, info.value.code) == (400, param, code)
    assert info.value.json_body["error"]["type"] == "invalid_request_error"
    assert fake.events == []


def test_timestamp_window(fake: FakeStripe) -> None:
    fake.now = 1_750_000_000
    sc = client(fake)
    for i, offset in enumerate((-35 * 24 * 3600 - 1, 301)):
        with pytest.raises(stripe.InvalidRequestError) as info:
            send(sc, f"bad-{i}", timestamp=1_750_000_000 + offset)
        assert (info.value.http_status, info.value.param) == (400, "timestamp")
    send(sc, "edge-past", timestamp=1_750_000_000 - 35 * 24 * 3600)
    send(sc, "edge-future", timestamp=1_750_000_000 + 300)
    assert fake.identifiers() == {"edge-past", "edge-future"}


def test_fail_next_500_twice_then_succeeds(fake: FakeStripe) -> None:
    sc = client(fake)
    fake.fail_next(2, 500)
    for _ in range(2):
        with pytest.raises(stripe.APIError) as info:
            send(sc)
        assert info.value.http_status == 500
        assert info.value.json_body["error"]["type"] == "api_error"
    assert fake.events == []
    send(sc)
    assert fake.identifiers() == {"evt-1"}
    assert fake.requests_received == 3


def test_sdk_retries_a_500_with_the_same_idempotency_key(fake: FakeStripe, fast_retries: None) -> None:
    fake.fail_next(1, 503)
    send(client(fake, retries=2))
    first, second = fake.requests
    assert (first.status, second.status) == (503, 200)
    assert first.idempotency_key == second.idempotency_key
    assert len(fake.events) == 1


def test_429_is_a_rate_limit_error(fake: FakeStripe) -> None:
    fake.fail_next(1, 429)
    with pytest.raises(stripe.RateLimitError) as info:
        send(client(fake, retries=2))
    assert info.value.http_status == 429
    assert info.value.json_body["error"]["code"] == "rate_limit"
    assert fake.requests_received == 1
    assert fake.events == []


def test_go_down_refuses_connections_and_come_back_serves_the_same_url(fake: FakeStripe) -> None:
    url = fake.url
    sc = client(fake)
    fake.go_down()
    assert fake.is_down
    with pytest.raises(stripe.APIConnectionError) as info:
        send(sc)
    assert info.value.should_retry is True
    assert fake.requests_received == 0
    fake.come_back()
    assert fake.url == url
    send(sc)
    assert fake.identifiers() == {"evt-1"}


def test_accept_then_drop_records_but_client_hears_nothing(fake: FakeStripe) -> None:
    sc = client(fake)
    fake.accept_then_drop(1)
    with pytest.raises(stripe.APIConnectionError):
        send(sc, "evt-lost")
    assert fake.identifiers() == {"evt-lost"}
    assert fake.requests[0].status is None
    with pytest.raises(stripe.InvalidRequestError) as info:
        send(sc, "evt-lost")
    assert info.value.code == "resource_already_exists"
    assert len(fake.events) == 1


def test_sdk_retry_after_a_drop_gets_the_original_response_replayed(fake: FakeStripe, fast_retries: None) -> None:
    fake.accept_then_drop(1)
    event = send(client(fake, retries=1), "evt-replay")
    assert event.identifier == "evt-replay"
    assert event.last_response.headers["Idempotent-Replayed"] == "true"
    dropped, replayed = fake.requests
    assert (dropped.status, replayed.status, replayed.replayed) == (None, 200, True)
    assert len(fake.events) == 1


def test_same_idempotency_key_with_other_params_is_an_idempotency_error(fake: FakeStripe) -> None:
    sc = client(fake)
    sc.v1.billing.meter_events.create(
        {"event_name": "e", "identifier": "k1", "payload": {"stripe_customer_id": "cus_A", "value": "1"}},
        {"idempotency_key": "ik-1"},
    )
    again = sc.v1.billing.meter_events.create(
        {"event_name": "e", "identifier": "k1", "payload": {"stripe_customer_id": "cus_A", "value": "1"}},
        {"idempotency_key": "ik-1"},
    )
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    with pytest.raises(stripe.IdempotencyError):
        sc.v1.billing.meter_events.create(
            {"event_name": "e", "identifier": "k2", "payload": {"stripe_customer_id": "cus_A", "value": "1"}},
            {"idempotency_key": "ik-1"},
        )
    assert fake.identifiers() == {"k1"}


def test_auth(fake: FakeStripe) -> None:
    with pytest.raises(stripe.AuthenticationError) as info:
        send(client(fake, key="pk_test_publishable"))
    assert info.value.http_status == 401
    raw = requests.post(f"{fake.url}/v1/billing/meter_events", data={"event_name": "e"}, timeout=5)
    assert raw.status_code == 401
    assert raw.headers["request-id"].startswith("req_")
    error = raw.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "API key" in error["message"]
    assert fake.events == []
    assert fake.requests_received == 2


def test_form_body_is_what_the_sdk_sends(fake: FakeStripe) -> None:
    raw = requests.post(
        f"{fake.url}/v1/billing/meter_events",
        headers={"Authorization": f"Bearer {API_KEY}"},
        data={"event_name": "e", "identifier": "raw-1", "payload[stripe_customer_id]": "cus_Z", "payload[value]": "5"},
        timeout=5,
    )
    assert raw.status_code == 200
    assert json.loads(raw.content)["payload"] == {"stripe_customer_id": "cus_Z", "value": "5"}
    assert fake.totals() == {("cus_Z", "e"): 5}
