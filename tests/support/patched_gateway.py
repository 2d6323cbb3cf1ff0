"""Run the real gateway CLI with a named fault patched into its process, for tests that must see a check catch it.

    python -m tests.support.patched_gateway FAULT gateway --port P --data-dir D

Faults: `free_to_flagship` (a tier table that routes the free tier to the flagship pool), `timestamp_in_prompt` (a
rendering change that puts the current time into the rendered system prompt, which breaks the prefix cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from tests.support.processes import REPO, ProcessGroup, wait_http_ok


def free_to_flagship() -> None:
    from shared.fleet.tables import install_tables, tables
    from shared.fleet.tiers import Tier

    live = tables()
    free = live.tiers[Tier.FREE].model_copy(update={"pools": ("flagship",), "default_pool": "flagship"})
    install_tables(live.replaced(tiers={**live.tiers, Tier.FREE: free}))


def timestamp_in_prompt() -> None:
    from shared import rendering

    original = rendering.RENDERERS[1]

    def stamped(history, new):  # type: ignore[no-untyped-def]
        rendered = original(history, new)
        first = rendered[0]
        rendered[0] = {**first, "content": f"Current time: {datetime.now(UTC).isoformat()}\n{first['content']}"}
        return rendered

    rendering.RENDERERS[1] = stamped


FAULTS: dict[str, Callable[[], None]] = {
    "free_to_flagship": free_to_flagship,
    "timestamp_in_prompt": timestamp_in_prompt,
}


def start_patched_gateway(
    group: ProcessGroup, fault: str, data_dir: Path, worker_urls: dict[str, list[str]], port: int
) -> str:
    """Like processes.start_gateway, with `fault` applied in the gateway process before it starts."""
    name = f"gateway-{fault}-{port}"
    group.logs.mkdir(parents=True, exist_ok=True)
    log = open(group.logs / f"{name}.log", "wb")  # noqa: SIM115 - handed to the child
    env = {
        **os.environ,
        "FLEETCHAT_WORKER_URLS": json.dumps(worker_urls),
        "FLEETCHAT_POOLS": json.dumps(list(worker_urls)),
    }
    args = ["gateway", "--port", str(port), "--data-dir", str(data_dir)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.patched_gateway", fault, *args],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    group.procs.append(proc)
    url = f"http://127.0.0.1:{port}"
    wait_http_ok(f"{url}/metrics", proc, group.logs / f"{name}.log", timeout_s=60)
    return url


def main() -> None:
    fault, *args = sys.argv[1:]
    FAULTS[fault]()
    from functions.cli import app

    app(args, prog_name="fleetchat")


if __name__ == "__main__":
    main()
