"""Run guidellm (vLLM's LLM load generator, PyPI `guidellm`) against the gateway as its own quick start does, and read
what it measured from its JSON report.

guidellm is not a dependency of fleetchat (it pins its own torch, transformers and numpy stacks): `make bench` installs
it in a venv of its own from requirements/guidellm.txt and points `fleetchat bench --guidellm` at its executable
(or set `FLEETCHAT_GUIDELLM`).

What it sends is guidellm's own default request, untouched: streamed chat completions with `stream_options`
(`include_usage`, `continuous_usage_stats`), `max_completion_tokens` with `ignore_eos: true` (so every answer is the
synthetic data's output length), and its synthetic text (Faker prose cut to the prompt length). Only what has no
default that works here is given: the target and key, the model (the bench's pool, not the first listed), a local
tokenizer saved from the packaged GGUF (nothing is downloaded), and a bounded closed loop instead of the quick
start's 30-second sweep (the same request shape; a sweep takes minutes per rate on two cores).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from functions.offline.bench.results.guidellm_results import GuidellmStats

GUIDELLM_ENV = "FLEETCHAT_GUIDELLM"
REPORT = "benchmarks.json"
MAX_ERROR_CHARS = 400
# guidellm's quick-start data shape (its README: `--data kind=synthetic_text,prompt_tokens=256,output_tokens=128`).
PROMPT_TOKENS = 256
OUTPUT_TOKENS = 128


class GuidellmRun(BaseModel):
    """What the bench asks guidellm for."""

    url: str
    api_key: str
    model: str
    tokenizer: Path
    streams: int
    requests: int
    out_dir: Path
    timeout_s: float


def find_guidellm(configured: str | None) -> str | None:
    """The guidellm executable, as an absolute path (it runs in its output folder): the configured path, else
    $FLEETCHAT_GUIDELLM, else `guidellm` on PATH."""
    for candidate in (configured, os.environ.get(GUIDELLM_ENV), shutil.which("guidellm")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(Path(candidate).absolute())
    return None


def command(guidellm: str, run: GuidellmRun) -> list[str]:
    """`guidellm run` with the quick start's backend and data, a closed loop of `streams` for `requests`."""
    return [
        guidellm,
        "run",
        "--backend",
        f"kind=openai_http,target={run.url},model={run.model},api_key={run.api_key}",
        "--profile",
        f"kind=concurrent,streams={run.streams}",
        "--constraint",
        f"kind=max_requests,count={run.requests}",
        "--data",
        f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
        "--tokenizer",
        f"kind=hf_auto,model={run.tokenizer}",
        "--output",
        f"kind=json,path={run.out_dir / REPORT}",
        "--disable-console-interactive",
    ]


def run_guidellm(guidellm: str, run: GuidellmRun) -> GuidellmStats:
    """Run it to the end and read its report; a failed run raises with the tail of its output."""
    run.out_dir.mkdir(parents=True, exist_ok=True)
    (run.out_dir / REPORT).unlink(missing_ok=True)
    done = subprocess.run(
        command(guidellm, run),
        cwd=run.out_dir,
        capture_output=True,
        text=True,
        timeout=run.timeout_s,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    (run.out_dir / "guidellm.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0 or not (run.out_dir / REPORT).is_file():
        raise RuntimeError(f"guidellm exited {done.returncode}: {(done.stdout + done.stderr)[-MAX_ERROR_CHARS:]}")
    return read_report(run, json.loads((run.out_dir / REPORT).read_text(encoding="utf-8")))


def read_report(run: GuidellmRun, report: dict[str, Any]) -> GuidellmStats:
    """The figures of the report's single benchmark."""
    benchmark = report["benchmarks"][0]
    metrics = benchmark["metrics"]

    def successful(name: str, stat: str = "median") -> float | None:
        values = (metrics.get(name) or {}).get("successful") or {}
        if stat.startswith("p"):
            return (values.get("percentiles") or {}).get(stat)
        return values.get(stat)

    totals = metrics["requests_per_second"]
    errored = benchmark["requests"].get("errored") or []
    return GuidellmStats(
        model=run.model,
        streams=run.streams,
        prompt_tokens=PROMPT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        successful=int(totals["successful"]["count"]),
        errored=int(totals["errored"]["count"]),
        incomplete=int(totals["incomplete"]["count"]),
        output_tokens_per_request=successful("output_token_count"),
        ttft_ms_p50=successful("time_to_first_token_ms"),
        ttft_ms_p95=successful("time_to_first_token_ms", "p95"),
        itl_ms_p50=successful("inter_token_latency_ms"),
        output_tokens_per_s=successful("output_tokens_per_second", "mean"),
        first_error=str((errored[0].get("info") or {}).get("error") or errored[0])[:MAX_ERROR_CHARS]
        if errored
        else None,
    )
