"""Run aiperf (NVIDIA's LLM benchmark client, PyPI `aiperf`) against the gateway as an independent check of the
benchmark's goodput figure, and read its goodput from its JSON export.

aiperf is not a dependency of fleetchat (it pins its own FastAPI, transformers and numpy stacks): install it in its
own virtual environment and point `FLEETCHAT_AIPERF` (or `fleetchat bench --aiperf`) at its `aiperf` executable:

    python -m venv .venv-aiperf && .venv-aiperf/bin/pip install aiperf==0.13.0

It gets the same prompts as our client (a custom single-turn dataset: its synthetic Shakespeare prompts trip the
safety gate), the same concurrency, request count and max_tokens, the tier's key, a local tokenizer saved from the
packaged GGUF (nothing is downloaded), and token counts from the server's usage (`--use-server-token-count`), so its
inter-token latency is (request latency - TTFT) / (output tokens - 1) over the same tokens ours counts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletionMessageParam

from functions.offline.bench.results.records import AiperfGoodput
from shared.fleet.pools import LocalModel
from shared.fleet.tiers import TierSlo

AIPERF_ENV = "FLEETCHAT_AIPERF"
EXPORT = "profile_export_aiperf.json"
MAX_ERROR_CHARS = 400


def find_aiperf(configured: str | None) -> str | None:
    """The aiperf executable: the configured path, else $FLEETCHAT_AIPERF, else `aiperf` on PATH."""
    for candidate in (configured, os.environ.get(AIPERF_ENV), shutil.which("aiperf")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def tokenizer_dir(cache: Path) -> Path:
    """A Hugging Face tokenizer directory for the packaged SmolLM2, saved once from its GGUF (aiperf loads it)."""
    if (cache / "tokenizer.json").is_file():
        return cache
    from transformers import AutoTokenizer  # heavy: only when aiperf runs

    spec = importlib.util.find_spec(LocalModel().package)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"the {LocalModel().package} package is not installed: no tokenizer for aiperf")
    package_dir = Path(spec.origin).parent
    tokenizer = AutoTokenizer.from_pretrained(str(package_dir), gguf_file=LocalModel().gguf_file)
    tokenizer.save_pretrained(str(cache))
    return cache


def write_dataset(path: Path, prompts: list[list[ChatCompletionMessageParam]]) -> Path:
    """aiperf's single-turn custom dataset: one {"text": ...} line per prompt (the user message)."""
    lines = [json.dumps({"text": str(messages[-1]["content"])}) for messages in prompts]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def streaming_profile(
    aiperf: str,
    *,
    url: str,
    api_key: str,
    model: str,
    dataset: Path,
    tokenizer: Path,
    concurrency: int,
    requests: int,
    max_tokens: int,
    artifact_dir: Path,
) -> list[str]:
    """`aiperf profile` of streamed chat completions: the custom single-turn dataset, `max_tokens`, usage from the
    server, a closed loop at `concurrency` for `requests`, no UI and no server or GPU telemetry."""
    return [
        aiperf, "profile", "--model", model, "--url", url.rstrip("/").removesuffix("/v1"),
        "--endpoint-type", "chat", "--streaming", "--api-key", api_key, "--tokenizer", str(tokenizer),
        "--input-file", str(dataset), "--custom-dataset-type", "single_turn",
        "--extra-inputs", f"max_tokens:{max_tokens}", "--use-server-token-count",
        "--concurrency", str(concurrency), "--request-count", str(requests),
        "--artifact-dir", str(artifact_dir), "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry",
    ]  # fmt: skip


def command(aiperf: str, *, slo: TierSlo, **profile: Any) -> list[str]:
    """The goodput check: the streaming profile (`profile`: its keywords) judged against the tier's SLO by aiperf's own
    goodput rule."""
    goodput = f"time_to_first_token:{slo.ttft_p95_s * 1000:g} inter_token_latency:{slo.inter_token_p95_s * 1000:g}"
    return [*streaming_profile(aiperf, **profile), "--goodput", goodput]


def _stat(export: dict[str, Any], name: str, key: str = "avg") -> float | None:
    value = (export.get(name) or {}).get(key)
    return None if value is None else float(value)


def parse_export(export: dict[str, Any]) -> AiperfGoodput:
    """aiperf's JSON export -> its goodput: good requests over every request it sent (errors are not good)."""
    completed = int(_stat(export, "request_count") or 0)
    errors = int(_stat(export, "error_request_count") or 0)
    good = int(_stat(export, "good_request_count") or 0)
    sent = completed + errors
    return AiperfGoodput(
        requests=completed,
        errors=errors,
        good=good,
        goodput=good / sent if sent else None,
        goodput_rps=_stat(export, "goodput"),
        ttft_p95_ms=_stat(export, "time_to_first_token", "p95"),
        itl_avg_ms=_stat(export, "inter_token_latency"),
    )


def failed(error: str) -> AiperfGoodput:
    return AiperfGoodput(
        requests=0, errors=0, good=0, goodput=None, goodput_rps=None, ttft_p95_ms=None, itl_avg_ms=None, error=error
    )


def run_aiperf(cmd: list[str], artifact_dir: Path, timeout_s: float) -> AiperfGoodput:
    """Run one aiperf profile; its result, or an AiperfGoodput carrying the error (never raises for aiperf's own
    failures: the rest of the benchmark stands)."""
    artifact_dir.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return failed(f"aiperf did not finish within {timeout_s:.0f} s")
    export = artifact_dir / EXPORT
    if not export.is_file():
        tail = (done.stdout + done.stderr)[-MAX_ERROR_CHARS:]
        return failed(f"aiperf exited {done.returncode} without {EXPORT}: {tail}")
    return parse_export(json.loads(export.read_text(encoding="utf-8")))
