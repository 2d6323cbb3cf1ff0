"""Does a canary rollback survive a restart of every gateway? On a real local fleet (`fleetchat chaos`'s: 2 gateways
behind HAProxy, 2 SmolLM2 replicas, redis-server as the shared control state) with a canary whose only replica is
down: requests through the balancer until a gateway rolls the canary back, then `kill -9` of every gateway; once the
supervisor has them back, each gateway's own `GET /admin/v1/canaries` and the version of every answer say whether the
rollback held.

    python -m functions.offline.chaos.canary_restart [--out bench-results/canary-restart.json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from functions.control.canary import MODEL_VERSION_HEADER
from functions.offline.chaos.fleet import ChaosFleet, free_port_run, local_fleet

MODEL = "mini"
CANARY_VERSION = "canary-with-no-live-replica"
ROLLBACK_TIMEOUT_S = 300.0
RESTART_TIMEOUT_S = 600.0


class CanaryRestartResult(BaseModel):
    requests_to_rollback: int
    rolled_back_by: str  # the reason the gateway gave
    states_before_restart: dict[str, str]  # gateway URL -> state
    states_after_restart: dict[str, str]
    restarted_pids: dict[str, tuple[int, int]]  # gateway name -> (pid before, pid after)
    versions_after_restart: dict[str, int]  # answer version -> count
    held: bool


def _ask(http: httpx.Client, fleet: ChaosFleet, session: str) -> str:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 4}
    headers = {"Authorization": f"Bearer {fleet.api_key}", "x-session-id": session, "cache-control": "no-cache"}
    response = http.post(f"{fleet.url}/v1/chat/completions", json=body, headers=headers, timeout=120)
    response.raise_for_status()
    return response.headers.get(MODEL_VERSION_HEADER, "")


def _states(http: httpx.Client, urls: list[str], admin_key: str) -> dict[str, dict[str, object]]:
    out = {}
    for url in urls:
        response = http.get(f"{url}/admin/v1/canaries", headers={"Authorization": f"Bearer {admin_key}"}, timeout=30)
        response.raise_for_status()
        out[url] = next(c for c in response.json()["data"] if c["pool"] == MODEL)
    return out


def measure(min_requests: int) -> CanaryRestartResult:
    dead = f"http://127.0.0.1:{free_port_run(1, start=41000)}"  # nothing listens: every canary answer is an error
    canary = {"version": CANARY_VERSION, "weight": 0.5, "worker_urls": [dead], "min_requests": min_requests}
    env = {"FLEETCHAT_CANARIES": json.dumps({MODEL: canary})}
    with (
        tempfile.TemporaryDirectory(prefix="fleetchat-canary-") as tmp,
        local_fleet(Path(tmp), model=MODEL, gateways=2, replicas=2, extra_env=env) as fleet,
        httpx.Client() as http,
    ):
        admin_key = (fleet.data_dir / "admin_api_key").read_text().strip()
        urls = fleet.gateway_urls
        sent, deadline = 0, time.monotonic() + ROLLBACK_TIMEOUT_S
        while not any(s["state"] == "rolled_back" for s in _states(http, urls, admin_key).values()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no rollback after {sent} requests")
            _ask(http, fleet, f"before-{sent}")
            sent += 1
        time.sleep(2.5)  # two sync rounds: the other gateway follows
        before = _states(http, urls, admin_key)
        reason = next(str(s["rolled_back_reason"]) for s in before.values() if s["state"] == "rolled_back")
        names = [f"gateway-{i}" for i in range(len(urls))]
        old = {name: fleet.pid(name) for name in names}
        for pid in old.values():
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while any(_pid_or_none(fleet, n) in (None, old[n]) for n in names) or not fleet.healthy():
            if time.monotonic() > deadline:
                raise TimeoutError("the gateways did not come back")
            time.sleep(1.0)
        fleet.wait_healthy(60)
        after = _states(http, urls, admin_key)
        versions: dict[str, int] = {}
        for i in range(20):
            version = _ask(http, fleet, f"after-{i}")
            versions[version] = versions.get(version, 0) + 1
        restarted = {n: (old[n], fleet.pid(n)) for n in names}
    states_after = {url: str(s["state"]) for url, s in after.items()}
    return CanaryRestartResult(
        requests_to_rollback=sent,
        rolled_back_by=reason,
        states_before_restart={url: str(s["state"]) for url, s in before.items()},
        states_after_restart=states_after,
        restarted_pids=restarted,
        versions_after_restart=versions,
        held=all(s == "rolled_back" for s in states_after.values()) and CANARY_VERSION not in versions,
    )


def _pid_or_none(fleet: ChaosFleet, name: str) -> int | None:
    try:
        return fleet.pid(name)
    except KeyError:  # not in up.json yet: the supervisor is restarting it
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--min-requests", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-results/canary-restart.json"))
    args = parser.parse_args()
    result = measure(args.min_requests)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(result.model_dump_json(indent=2), encoding="utf-8")
    print(result.model_dump_json(indent=2))
    raise SystemExit(0 if result.held else 1)


if __name__ == "__main__":
    main()
