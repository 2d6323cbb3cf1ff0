"""The guidellm phase: guidellm's default request through the gateway (functions/offline/bench/guidellm_check.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.progress import Progress

from functions.offline.bench.aiperf_check import tokenizer_dir
from functions.offline.bench.guidellm_check import GuidellmRun, run_guidellm
from functions.offline.bench.results.guidellm_results import GuidellmStats


async def guidellm_phase(
    guidellm: str | None,
    url: str,
    api_key: str | None,
    model: str,
    out_dir: Path,
    progress: Progress,
    *,
    notes: list[str],
    streams: int,
    requests: int,
    quick: bool,
    timeout_s: float,
) -> GuidellmStats | None:
    """Run guidellm to the end and return its figures; skipped, with a note, without an executable or a key."""
    if guidellm is None:
        notes.append("guidellm phase skipped: no guidellm executable (`make bench` installs one in .venv-guidellm).")
        return None
    if api_key is None:
        notes.append("guidellm phase skipped: no API key.")
        return None
    run = GuidellmRun(
        url=url,
        api_key=api_key,
        model=model,
        tokenizer=await asyncio.to_thread(tokenizer_dir, out_dir / "tokenizer"),
        streams=min(streams, 2) if quick else streams,
        requests=min(requests, 4) if quick else requests,
        out_dir=out_dir / "guidellm",
        timeout_s=timeout_s,
    )
    task = progress.add_task(f"guidellm: {run.requests} of its default requests, {run.streams} streams", total=None)
    try:
        return await asyncio.to_thread(run_guidellm, guidellm, run)
    finally:
        progress.update(task, visible=False)
