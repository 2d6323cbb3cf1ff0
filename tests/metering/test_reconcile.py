"""Reconciliation of the ledger with the meter events sent, and the two commands as the CLI registers them."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import typer
from typer.testing import CliRunner

from functions.metering import stripe_sender
from functions.metering.commands import meter_flush, meter_reconcile
from functions.metering.reconcile import reconcile_from_settings
from tests.metering.conftest import FAST, HOUR0, NOW, World


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    app.command("meter-flush")(meter_flush)
    app.command("meter-reconcile")(meter_reconcile)
    return app


def test_reconcile_reports_unsent_usage_then_clean_after_the_flush(world: World, billed: tuple[str, str]) -> None:
    before = reconcile_from_settings(world.settings(), now=NOW)
    assert not before.ok
    assert len(before.rows) == 3 * (3 + 2)
    assert all(row.sent == 0 and row.ledger > 0 and row.settled for row in before.rows)
    assert {row.customer_id for row in before.rows} == {"cus_Acme", "cus_Globex"}

    world.flush()
    after = reconcile_from_settings(world.settings(), now=NOW)
    assert after.ok and after.rows == []
    totals = {total.meter: total for total in after.totals}
    assert totals["fleetchat_output_tokens"].ledger == totals["fleetchat_output_tokens"].sent == 3 * 23 + 66
    assert after.windows == 7 * 24


def test_reconcile_finds_a_late_entry_and_a_pending_event(world: World, billed: tuple[str, str]) -> None:
    acme, _ = billed
    world.flush()
    world.usage(acme, HOUR0 + timedelta(hours=2, minutes=30), prompt=0, completion=9)
    late = reconcile_from_settings(world.settings(), now=NOW)
    [row] = late.rows
    assert (row.tenant_id, row.meter, row.window_start, row.missing) == (
        acme,
        "fleetchat_output_tokens",
        HOUR0 + timedelta(hours=2),
        9,
    )
    assert not late.ok

    world.fake.go_down()
    assert not world.flush().ok
    [pending] = reconcile_from_settings(world.settings(), now=NOW).rows
    assert (pending.pending, pending.missing) == (9, 9)

    world.fake.come_back()
    world.flush()
    assert reconcile_from_settings(world.settings(), now=NOW).ok


def test_a_window_within_grace_is_reported_but_not_a_failure(world: World) -> None:
    acme = world.tenant("acme", "cus_Acme")
    world.usage(acme, HOUR0 + timedelta(minutes=1))
    report = reconcile_from_settings(world.settings(), now=HOUR0 + timedelta(hours=1, minutes=2))
    assert [row.settled for row in report.rows] == [False, False]
    assert report.ok


def test_tenants_without_a_customer_are_listed_as_not_billed(world: World, billed: tuple[str, str]) -> None:
    internal = world.tenant("internal", None)
    world.usage(internal, HOUR0, prompt=30, completion=4, cached=10)
    world.flush()
    report = reconcile_from_settings(world.settings(), now=NOW)
    assert report.ok
    [not_billed] = report.not_billed
    assert not_billed.tenant_id == internal
    assert not_billed.units == {
        "fleetchat_input_tokens": 20,
        "fleetchat_cached_input_tokens": 10,
        "fleetchat_output_tokens": 4,
        "fleetchat_embedding_tokens": 0,  # issue 22: every meter is listed
        "fleetchat_rerank_tokens": 0,
        "fleetchat_batch_input_tokens": 0,  # issue 48: the batch meters too
        "fleetchat_batch_cached_input_tokens": 0,
        "fleetchat_batch_output_tokens": 0,
        "fleetchat_batch_embedding_tokens": 0,
    }


def test_the_commands_exit_codes_and_json(
    world: World, billed: tuple[str, str], cli: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in world.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(stripe_sender, "RetryPolicy", lambda: FAST)  # the CLI's own policy backs off for seconds
    runner = CliRunner()
    as_of = ["--as-of", NOW.isoformat()]

    unsent = runner.invoke(cli, ["meter-reconcile", *as_of, "--json"])
    assert unsent.exit_code == 1
    assert json.loads(unsent.output)["ok"] is False

    world.fake.fail_next(100, 503)
    failed = runner.invoke(cli, ["meter-flush", *as_of])
    assert failed.exit_code == 1 and "re-run to resume" in failed.output
    world.fake.clear()

    flushed = runner.invoke(cli, ["meter-flush", *as_of])
    assert flushed.exit_code == 0, flushed.output
    assert "events sent" in flushed.output

    clean = runner.invoke(cli, ["meter-reconcile", *as_of])
    assert clean.exit_code == 0, clean.output
    assert "match the ledger" in clean.output
    assert json.loads(runner.invoke(cli, ["meter-reconcile", *as_of, "--json"]).output)["rows"] == []
    world.assert_stripe_matches_ledger()


def test_flush_without_a_key_exits_zero(world: World, billed: tuple[str, str], cli: typer.Typer) -> None:
    result = CliRunner().invoke(cli, ["meter-flush", "--data-dir", str(world.data_dir)])
    assert result.exit_code == 0
    assert world.fake.requests_received == 0
