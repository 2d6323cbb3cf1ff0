"""How long the gateways of a real local fleet take to agree on brownout: a saturating load sent to one gateway only
(the other gets none), each gateway's `fleetchat_gateway_brownout_pool_active` read every `poll_s`, and the time from
the first gateway to switch to the last, on and then off. The fleet is `fleetchat chaos`'s (2 gateways behind HAProxy,
2 SmolLM2 replicas, redis-server as the shared control state).

    python -m functions.offline.chaos.brownout_agreement [--streams 32] [--out bench-results/brownout-agreement.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from functions.metrics.control import BROWNOUT_POOL_ACTIVE
from functions.offline.bench import prompts
from functions.offline.bench.phases.priority_phase import admitted_prompts
from functions.offline.bench.prom import sample_value
from functions.offline.chaos.fleet import local_fleet
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
    switches: list[Switch]


async def _state(http: httpx.AsyncClient, url: str) -> float | None:
    try:
        text = (await http.get(f"{url}/metrics", timeout=5)).text
    except httpx.HTTPError:
        return None
    return sample_value(text, BROWNOUT_POOL_ACTIVE, {"pool": MODEL})


async def _watch(urls: list[str], to: float, t0: float, poll_s: float) -> dict[str, float]:
    """Seconds after t0 at which each gateway's gauge first reads `to` (within SWITCH_TIMEOUT_S)."""
    seen: dict[str, float] = {}
    async with httpx.AsyncClient() as http:
        deadline = time.monotonic() + SWITCH_TIMEOUT_S
        while len(seen) < len(urls) and time.monotonic() < deadline:
            for url in urls:
                if url not in seen and await _state(http, url) == to:
                    seen[url] = time.monotonic() - t0
            await asyncio.sleep(poll_s)
    return seen


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
    return AgreementResult(
        gateways=urls, loaded=loaded, streams=streams, poll_s=poll_s, sync_s=sync_s,
        switches=[Switch(to="on", at_s=on), Switch(to="off", at_s=off)],
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--poll-s", type=float, default=0.1)
    parser.add_argument("--sync-s", type=float, default=1.0)
    parser.add_argument("--hold-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("bench-results/brownout-agreement.json"))
    args = parser.parse_args()
    result = asyncio.run(measure(args.streams, args.max_tokens, args.poll_s, args.sync_s, args.hold_s))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(result.model_dump_json(indent=2), encoding="utf-8")
    for switch in result.switches:
        spread = "n/a (not every gateway switched)" if switch.spread_s is None else f"{switch.spread_s:.2f} s"
        print(f"brownout {switch.to}: {json.dumps(switch.at_s)}; first to last: {spread}")


if __name__ == "__main__":
    main()
