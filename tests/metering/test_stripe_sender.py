"""One meter event through the real SDK to the fake over HTTP: duplicates, retried and non-retried failures."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from functions.metering.stripe_sender import MeterEventSender, RetryPolicy, SendOutcome, StripeSendError
from shared.storage.ledger import MeterSend
from tests.metering.conftest import API_KEY, FAST, HOUR0
from tests.support.fake_stripe import FakeStripe


@pytest.fixture
def sender(fake: FakeStripe) -> Iterator[MeterEventSender]:
    sender = MeterEventSender(API_KEY, api_base=fake.url, policy=FAST)
    yield sender
    sender.close()


def event(identifier: str = "fc-ten_a-in-x-0", value: int = 42) -> MeterSend:
    return MeterSend(
        identifier=identifier,
        tenant_id="ten_a",
        customer_id="cus_A",
        meter="fleetchat_input_tokens",
        window_start=HOUR0,
        value=value,
    )


def statuses(fake: FakeStripe) -> list[int | None]:
    return [request.status for request in fake.requests]


def test_an_event_arrives_with_its_identifier_value_and_window_timestamp(
    sender: MeterEventSender, fake: FakeStripe
) -> None:
    assert sender.send(event()) is SendOutcome.SENT
    [got] = fake.events
    assert (got.identifier, got.customer_id, got.event_name, got.value) == (
        "fc-ten_a-in-x-0",
        "cus_A",
        "fleetchat_input_tokens",
        42,
    )
    assert got.timestamp == int(HOUR0.timestamp())


def test_a_duplicate_identifier_means_stripe_already_has_it(sender: MeterEventSender, fake: FakeStripe) -> None:
    assert sender.send(event()) is SendOutcome.SENT
    assert sender.send(event()) is SendOutcome.ALREADY_THERE
    assert statuses(fake) == [200, 400], "refused once, not retried"
    assert fake.totals() == {("cus_A", "fleetchat_input_tokens"): 42}


@pytest.mark.parametrize("status", [429, 500, 502, 503, 409])
def test_rate_limits_lock_timeouts_and_server_errors_are_retried(
    sender: MeterEventSender, fake: FakeStripe, status: int
) -> None:
    fake.fail_next(2, status)
    assert sender.send(event()) is SendOutcome.SENT
    assert statuses(fake) == [status, status, 200]


def test_a_lost_response_is_retried_and_the_duplicate_counts_as_delivered(
    sender: MeterEventSender, fake: FakeStripe
) -> None:
    fake.accept_then_drop(1)
    assert sender.send(event()) is SendOutcome.ALREADY_THERE
    assert statuses(fake) == [None, 400]
    assert len(fake.events) == 1


def test_retries_give_up_with_a_transient_error(sender: MeterEventSender, fake: FakeStripe) -> None:
    fake.fail_next(10, 503)
    with pytest.raises(StripeSendError) as caught:
        sender.send(event())
    assert caught.value.transient
    assert "attempts: 4" in str(caught.value)
    assert len(fake.requests) == FAST.attempts


def test_stripe_down_is_a_transient_error(sender: MeterEventSender, fake: FakeStripe) -> None:
    fake.go_down()
    with pytest.raises(StripeSendError) as caught:
        sender.send(event())
    assert caught.value.transient and "APIConnectionError" in str(caught.value)


def test_an_invalid_request_is_not_retried(fake: FakeStripe) -> None:
    bad = MeterEventSender(API_KEY, api_base=fake.url, policy=FAST)
    too_old = event().model_copy(update={"window_start": HOUR0 - timedelta(days=40)})
    with pytest.raises(StripeSendError) as caught:
        bad.send(too_old)
    assert not caught.value.transient and "35 calendar days" in str(caught.value)
    assert statuses(fake) == [400]


def test_a_bad_key_is_not_retried(fake: FakeStripe) -> None:
    wrong = MeterEventSender("sk_test_wrong", api_base=fake.url, policy=FAST)
    with pytest.raises(StripeSendError) as caught:
        wrong.send(event())
    assert not caught.value.transient and "AuthenticationError" in str(caught.value)
    assert "sk_test_wrong" not in str(caught.value)
    assert statuses(fake) == [401]


def test_stripe_should_retry_false_is_respected(sender: MeterEventSender, fake: FakeStripe) -> None:
    fake.fail_next(3, 500, should_retry=False)
    with pytest.raises(StripeSendError) as caught:
        sender.send(event())
    assert not caught.value.transient
    assert statuses(fake) == [500]


def test_the_default_policy_backs_off_and_bounds_a_send() -> None:
    policy = RetryPolicy()
    assert policy.attempts > 1 and policy.wait_initial_s > 0 and policy.give_up_after_s <= 300
