"""How long the gateways of a real local fleet take to agree, read from each gateway's own gauges every `poll_s`.
The fleet is `fleetchat chaos`'s (2 gateways behind HAProxy, 2 SmolLM2 replicas, redis-server as the shared control
state).

- Brownout: a saturating load sent to one gateway only (the other gets none); from the first gateway to switch
  (`fleetchat_gateway_brownout_pool_active`) to the last, on and then off.
- The pools' shares, overflow's input (`fleetchat_gateway_pool_capacity`: the pool's places over the gateways alive):
  after `kill -9` of one gateway, when the survivor takes the whole pool; once the supervisor has it back, from the
  first gateway to show the half share to the last.

    python -m functions.offline.chaos.agreement [--streams 32] [--out bench-results/agreement.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from functions.metrics.control import BROWNOUT_POOL_ACTIVE, POOL_CAPACITY
from functions.offline.bench import prompts
from functions.offline.bench.phases.priority_phase import admitted_prompts
from functions.offline.bench.prom import sample_value
from functions.offline.chaos.fleet import ChaosFleet, local_fleet
from functions.offline.measure.load import make_client, run_level

MODEL = "mini"
SWITCH_TIMEOUT_S = 120.0


class Switch(BaseModel):
    to: str  # "on" / "off"
    at_s: dict[str, float]  # gateway URL -> seconds after the load started when it switched (absent: never)

    @property
    def spread_s(self) -> float | None:
        """From the first gateway's switch to the last's (None unless every gateway switched)."""
        return max(self.at_s.values()) - min(self.at_s.values()) if len(self.at_s) > 1 else None


class AgreementResult(BaseModel):
    gateways: list[str]
    loaded: str  # the one gateway the load went to
    streams: int
    poll_s: float
    sync_s: float
    switches: list[Switch]  # brownout on, brownout off
    share_after_kill_s: float | None = None  # kill -9 of the other gateway -> the survivor holds the whole pool
    shares: list[Switch] = []  # the killed gateway back: each gateway's half share


async def _state(http: httpx.AsyncClient, url: str, metric: str) -> float | None:
    try:
        text = (await http.get(f"{url}/metrics", timeout=5)).text
    except httpx.HTTPError:
        return None
    return sample_value(text, metric, {"pool": MODEL})


async def _watch(
    urls: list[str], to: float, t0: float, poll_s: float, metric: str = BROWNOUT_POOL_ACTIVE
) -> dict[str, float]:
    """Seconds after t0 at which each gateway's gauge `metric` first reads `to` (within SWITCH_TIMEOUT_S)."""
    seen: dict[str, float] = {}
    async with httpx.AsyncClient() as http:
        deadline = time.monotonic() + SWITCH_TIMEOUT_S
        while len(seen) < len(urls) and time.monotonic() < deadline:
            for url in urls:
                if url not in seen and await _state(http, url, metric) == to:
                    seen[url] = time.monotonic() - t0
            await asyncio.sleep(poll_s)
    return seen


async def _shares(fleet: ChaosFleet, poll_s: float) -> tuple[float | None, Switch]:
    """`kill -9` of the second gateway: when the first holds the pool's every place; then, the second restarted by
    the supervisor, when each shows half of them."""
    async with httpx.AsyncClient() as http:
        whole = await _state(http, fleet.gateway_urls[0], POOL_CAPACITY)
    assert whole is not None
    whole *= len(fleet.gateway_urls)  # each holds its share of the places while both are alive
    t0 = time.monotonic()
    os.kill(fleet.pid("gateway-1"), signal.SIGKILL)
    alone = await _watch(fleet.gateway_urls[:1], whole, t0, poll_s, POOL_CAPACITY)
    back = await _watch(fleet.gateway_urls, whole / len(fleet.gateway_urls), t0, poll_s, POOL_CAPACITY)
    return alone.get(fleet.gateway_urls[0]), Switch(to="half share", at_s=back)


async def measure(streams: int, max_tokens: int, poll_s: float, sync_s: float, hold_s: float) -> AgreementResult:
    env = {"FLEETCHAT_BROWNOUT_HOLD_S": str(hold_s), "FLEETCHAT_CONTROL_STATE_SYNC_S": str(sync_s)}
    with (
        tempfile.TemporaryDirectory(prefix="fleetchat-brownout-") as tmp,
        local_fleet(Path(tmp), model=MODEL, gateways=2, replicas=2, extra_env=env) as fleet,
    ):
        urls, loaded = fleet.gateway_urls, fleet.gateway_urls[0]
        messages = [prompts.generation_messages(i, "brownout") for i in admitted_prompts(streams, "brownout")]
        client = make_client(loaded, fleet.api_key, 600)
        t0 = time.monotonic()
        load = asyncio.create_task(run_level(client, MODEL, messages, streams, max_tokens))
        on = await _watch(urls, 1.0, t0, poll_s)
        await load
        await client.close()
        off = await _watch(urls, 0.0, t0, poll_s)
        alone, back = await _shares(fleet, poll_s)
    return AgreementResult(
        gateways=urls, loaded=loaded, streams=streams, poll_s=poll_s, sync_s=sync_s,
        switches=[Switch(to="on", at_s=on), Switch(to="off", at_s=off)], share_after_kill_s=alone, shares=[back],
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--poll-s", type=float, default=0.1)
    parser.add_argument("--sync-s", type=float, default=1.0)
    parser.add_argument("--hold-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/agreement.json"))
    args = parser.parse_args()
    result = asyncio.run(measure(args.streams, args.max_tokens, args.poll_s, args.sync_s, args.hold_s))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(result.model_dump_json(indent=2), encoding="utf-8")
    print(f"the survivor held the whole pool {result.share_after_kill_s} s after the other gateway's kill -9")
    for switch in [*result.switches, *result.shares]:
        spread = "n/a (not every gateway switched)" if switch.spread_s is None else f"{switch.spread_s:.2f} s"
        print(f"{switch.to}: {json.dumps(switch.at_s)}; first to last: {spread}")


if __name__ == "__main__":
    main()
