"""Kill the exporter process mid-flush (SIGKILL, no cleanup), run it again: Stripe ends with exactly the ledger."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.metering.conftest import API_KEY, World, seed_billed
from tests.support.fake_stripe import FakeStripe, _Reply

REPO = Path(__file__).resolve().parents[2]
FLUSH = (
    "from functions.metering.exporter import flush_from_settings; from shared.settings import Settings;"
    " report = flush_from_settings(Settings(), show_progress=False); print(report.model_dump_json())"
)


class StallingStripe(FakeStripe):
    """Holds the Nth request until released: after recording its event (Stripe has it, the client never hears), or
    before (then drops it: Stripe never has it)."""

    def __init__(self, nth: int, accept_first: bool) -> None:
        super().__init__(api_key=API_KEY)
        self.nth, self.accept_first = nth, accept_first
        self.stalled, self.release = threading.Event(), threading.Event()
        self._seen = 0

    def _handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Any:
        with self._lock:
            self._seen += 1
            stall = self._seen == self.nth
        if stall and not self.accept_first:
            self._stall()
            return _Reply(0, b"", {}, drop=True)  # the client is gone: this event never reaches Stripe
        reply = super()._handle(method, raw_path, headers, body)
        if stall and self.accept_first:
            self._stall()
        return reply

    def _stall(self) -> None:
        self.stalled.set()
        self.release.wait(timeout=60)


@pytest.fixture(params=["accepted-unconfirmed", "pending-unsent"])
def stalling(request: pytest.FixtureRequest) -> Iterator[StallingStripe]:
    with StallingStripe(nth=7, accept_first=request.param == "accepted-unconfirmed") as fake:
        yield fake
        fake.release.set()


def test_killed_mid_flush_then_rerun_bills_exactly_the_ledger(tmp_path: Path, stalling: StallingStripe) -> None:
    world = World(tmp_path, stalling)
    seed_billed(world)
    proc = subprocess.Popen(
        [sys.executable, "-c", FLUSH],
        cwd=REPO,
        env={**os.environ, **world.env()},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert stalling.stalled.wait(timeout=30), proc.communicate(timeout=5)[0].decode()
        proc.kill()
        assert proc.wait(timeout=10) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
        accepted = len(stalling.events)
        stalling.release.set()
    assert accepted == (7 if stalling.accept_first else 6), "killed mid-flush, with events already at Stripe"
    [pending] = [send for send in world.outbox() if send.sent_at is None]

    report = world.flush()
    assert report.ok and report.resent_pending == 1
    assert report.already_there == (1 if stalling.accept_first else 0)
    assert pending.identifier in stalling.identifiers()
    world.assert_stripe_matches_ledger()
    assert world.flush().events_sent == 0
