"""The meter exporter against SQLite stores and the Stripe fake over real HTTP: exactly once, faults, corrections."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest

from functions.metering.exporter import LEDGER_ONLY_WARNING, FlushReport, flush_from_settings, run_flush
from functions.metering.meters import meters_from_settings
from functions.metering.stripe_sender import MeterEventSender, SendOutcome
from shared.storage.ledger import MeterSend
from shared.storage.sqlite.ledger import SQLiteLedger, SQLiteMeterState
from tests.metering.conftest import API_KEY, FAST, HOUR0, NOW, World


def test_a_flush_sends_the_ledger_totals_per_customer_and_meter(world: World, billed: tuple[str, str]) -> None:
    report = world.flush()
    assert report.ok, report.failure
    world.assert_stripe_matches_ledger()
    assert report.events_sent == len(world.fake.events) == 3 * (3 + 2)  # windows x meters (globex: no cached)
    assert report.windows_with_sends == 3
    assert world.fake.totals()[("cus_Acme", "fleetchat_cached_input_tokens")] == 3 * 40
    assert world.fake.totals()[("cus_Acme", "fleetchat_input_tokens")] == (60 + 61 + 62) + 3 * 7
    assert ("cus_Globex", "fleetchat_cached_input_tokens") not in world.fake.totals(), "a 0 is never sent"
    assert {event.timestamp for event in world.fake.events} == {
        int((HOUR0 + timedelta(hours=h)).timestamp()) for h in range(3)
    }
    assert report.cursor == world.cursor() and report.cursor is not None
    assert report.cursor > HOUR0 + timedelta(hours=3)


def test_a_second_flush_sends_nothing_new(world: World, billed: tuple[str, str]) -> None:
    world.flush()
    requests = world.fake.requests_received
    again = world.flush()
    assert again.ok and (again.events_sent, again.already_there, again.corrections) == (0, 0, 0)
    assert world.fake.requests_received == requests, "no request at all"
    world.assert_stripe_matches_ledger()


def test_open_and_grace_windows_wait(world: World) -> None:
    acme = world.tenant("acme", "cus_Acme")
    world.usage(acme, HOUR0 + timedelta(minutes=5))
    world.usage(acme, HOUR0 + timedelta(hours=1, minutes=5), prompt=1000)
    # One minute after the second window closed: still in its grace period.
    report = world.flush(now=HOUR0 + timedelta(hours=2, minutes=1))
    assert report.ok and {event.timestamp for event in world.fake.events} == {int(HOUR0.timestamp())}
    assert world.cursor() == HOUR0 + timedelta(hours=1)
    world.flush()
    world.assert_stripe_matches_ledger()


def test_stripe_down_loses_nothing_and_the_next_flush_sends_everything(world: World, billed: tuple[str, str]) -> None:
    world.fake.go_down()
    down = world.flush()
    assert not down.ok and down.failures == 1
    assert "APIConnectionError" in (down.failure or "")
    assert down.failed_window == HOUR0
    assert down.events_sent == 0
    [pending] = world.outbox()
    assert pending.sent_at is None and pending.window_start == HOUR0
    assert down.cursor is None or down.cursor <= HOUR0, "the cursor never passes an unconfirmed window"

    world.fake.come_back()
    back = world.flush()
    assert back.ok and back.resent_pending == 1
    world.assert_stripe_matches_ledger()


def test_stripe_down_mid_flush_resumes_at_the_window_it_stopped(world: World, billed: tuple[str, str]) -> None:
    sender = MeterEventSender(API_KEY, api_base=world.fake.url, policy=FAST)
    sends = 0

    class FailsAfterEight:
        def send(self, event: MeterSend) -> SendOutcome:
            nonlocal sends
            sends += 1
            if sends == 9:
                world.fake.go_down()
            return sender.send(event)

    settings = world.settings()
    ledger, state = SQLiteLedger(world.db_path), SQLiteMeterState(world.db_path)
    tenants = dict(zip(billed, ("cus_Acme", "cus_Globex"), strict=True))
    try:
        report = run_flush(
            ledger,
            state,
            tenants.get,
            FailsAfterEight(),
            meters_from_settings(settings),
            window_s=3600,
            grace_s=300,
            now=NOW,
            show_progress=False,
        )
    finally:
        ledger.close()
        state.close()
        sender.close()
    assert not report.ok and report.events_sent == 8
    assert report.failed_window == HOUR0 + timedelta(hours=1)
    assert world.cursor() == HOUR0 + timedelta(hours=1), "the first window is complete, the second is not"
    world.fake.come_back()
    assert world.flush().ok
    world.assert_stripe_matches_ledger()


def test_rate_limits_and_server_errors_are_retried_within_one_flush(world: World, billed: tuple[str, str]) -> None:
    world.fake.fail_next(2, 429)
    first = world.flush()
    assert first.ok
    assert [r.status for r in world.fake.requests][:3] == [429, 429, 200]
    world.usage(billed[0], HOUR0 + timedelta(hours=3, minutes=1), prompt=9, cached=4)
    world.fake.fail_next(3, 500)
    second = world.flush()
    assert second.ok and second.events_sent == 3
    assert [r.status for r in world.fake.requests][-6:-3] == [500, 500, 500]
    world.assert_stripe_matches_ledger()


def test_a_response_lost_after_stripe_accepted_is_not_billed_twice(world: World, billed: tuple[str, str]) -> None:
    world.fake.accept_then_drop(2)
    report = world.flush()
    assert report.ok and report.already_there == 2
    world.assert_stripe_matches_ledger()


def test_a_late_ledger_entry_becomes_a_correction_with_the_next_sequence(world: World, billed: tuple[str, str]) -> None:
    acme, _ = billed
    world.flush()
    world.usage(acme, HOUR0 + timedelta(hours=1, minutes=59), prompt=5, completion=8)
    report = world.flush()
    assert report.ok and (report.events_sent, report.corrections) == (2, 2)  # input and output; no cached tokens
    stamp = (HOUR0 + timedelta(hours=1)).strftime("%Y%m%dT%H%MZ")
    assert {e.identifier for e in world.fake.events[-2:]} == {f"fc-{acme}-in-{stamp}-1", f"fc-{acme}-out-{stamp}-1"}
    assert [e.value for e in world.fake.events[-2:]] == [5, 8]
    world.assert_stripe_matches_ledger()


def test_since_rechecks_windows_further_back_than_the_usual_revisit(world: World, billed: tuple[str, str]) -> None:
    acme, _ = billed
    later = NOW + timedelta(days=2)  # the cursor moves two days on: HOUR0 is further back than a run re-checks
    world.flush(now=later)
    world.usage(acme, HOUR0 + timedelta(minutes=1), prompt=0, completion=4)
    assert world.flush(now=later).events_sent == 0
    report = world.flush(now=later, since=HOUR0)
    assert report.ok and report.corrections == 1
    world.assert_stripe_matches_ledger()


def test_a_tenant_without_a_stripe_customer_is_skipped_and_reported(world: World, billed: tuple[str, str]) -> None:
    internal = world.tenant("internal", None)
    world.usage(internal, HOUR0 + timedelta(minutes=3), prompt=999)
    report = world.flush()
    assert report.ok and report.skipped_tenants == [internal]
    assert all(internal not in event.identifier for event in world.fake.events)
    world.assert_stripe_matches_ledger()


def test_without_a_stripe_key_the_ledger_is_all(
    world: World, billed: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        report = flush_from_settings(
            world.settings(
                stripe={"api_key": None},
            ),
            NOW,
            show_progress=False,
        )
    assert report == FlushReport(stripe_enabled=False) and report.ok
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [LEDGER_ONLY_WARNING]
    assert world.fake.requests_received == 0
    assert world.outbox() == [] and world.cursor() is None


def test_windows_older_than_stripe_accepts_are_reported_never_sent(world: World) -> None:
    acme = world.tenant("acme", "cus_Acme")
    world.usage(acme, NOW - timedelta(days=40), prompt=10, completion=1)
    world.usage(acme, HOUR0, prompt=3, completion=2)
    report = world.flush(since=NOW - timedelta(days=41))
    assert report.ok and report.not_exportable_units == 11
    assert report.not_exportable_windows > 0
    sent = {("cus_Acme", "fleetchat_input_tokens"): 3, ("cus_Acme", "fleetchat_output_tokens"): 2}
    assert world.fake.totals() == sent


def test_more_sent_than_the_ledger_is_reported_not_fixed(world: World, billed: tuple[str, str]) -> None:
    acme, _ = billed
    world.flush()
    state = SQLiteMeterState(world.db_path)
    extra = MeterSend(
        identifier="manual-1",
        tenant_id=acme,
        customer_id="cus_Acme",
        meter="fleetchat_output_tokens",
        window_start=HOUR0 + timedelta(hours=2),
        value=50,
    )
    state.add_pending(extra)
    state.mark_sent("manual-1", NOW)
    state.close()
    report = world.flush()
    assert report.ok and report.events_sent == 0
    [over] = report.over_billed
    assert (over.tenant_id, over.meter, over.ledger, over.sent) == (acme, "fleetchat_output_tokens", 23, 73)


def test_concurrent_flushes_send_each_unit_once(world: World, billed: tuple[str, str]) -> None:
    reports: list[FlushReport] = []

    def flush() -> None:
        reports.append(world.flush())

    threads = [threading.Thread(target=flush) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reports) == 3 and all(r.ok for r in reports)
    assert sum(r.events_sent for r in reports) == len(world.fake.events)
    world.assert_stripe_matches_ledger()
