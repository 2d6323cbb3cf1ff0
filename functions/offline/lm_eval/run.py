"""Run lm-evaluation-harness (EleutherAI's `lm_eval`, unmodified, from its own venv) against a fleetchat gateway: the
log-likelihood task through `/v1/completions` (`local-completions`, `echo` + `logprobs`) and the generation task
through chat completions (`local-chat-completions`), both on public data read from files (tasks/README.md). lm-eval
tokenizes with the gateway's own `/tokenize` (vLLM's remote tokenizer), so nothing is downloaded.

    fleetchat lm-eval --lm-eval .venv-lmeval/bin/lm_eval [--limit 5]

Writes lm-eval's own results JSON per task and `lm-eval.md` (the key is never written: lm-eval's log is redacted).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

TASKS_DIR = Path(__file__).with_name("tasks")
LOG_TAIL_CHARS = 2000


@dataclass(frozen=True)
class LmEvalTask:
    name: str
    backend: str  # lm-eval's model type
    path: str  # the gateway endpoint it calls
    chat: bool  # applies the model's chat template (`--apply_chat_template`)


TASKS = (
    LmEvalTask("fleetchat_gsm8k_answer_loglik", "local-completions", "/v1/completions", chat=False),
    LmEvalTask("fleetchat_gsm8k_chat_gen", "local-chat-completions", "/v1/chat/completions", chat=True),
)


class LmEvalConfig(BaseModel):
    lm_eval: str  # the lm_eval executable
    base_url: str
    api_key: str
    model: str = "mini"
    limit: int | None = None  # documents per task; None: all 50
    concurrency: int = 2
    out_dir: Path = Path("bench-results/lm-eval")
    timeout_s: float = 3600.0


class TaskResult(BaseModel):
    task: str
    backend: str
    documents: int
    metrics: dict[str, float | None]  # "metric,filter" -> value, as lm-eval reports them
    seconds: float | None = None


def command(cfg: LmEvalConfig, task: LmEvalTask) -> list[str]:
    model_args = ",".join(
        [
            f"model={cfg.model}",
            f"base_url={cfg.base_url.rstrip('/')}{task.path}",
            f"num_concurrent={cfg.concurrency}",
            "max_retries=1",
            f"auth_token={cfg.api_key}",
        ]
    )
    argv = [
        str(Path(cfg.lm_eval).absolute()),
        "--model",
        task.backend,
        "--model_args",
        model_args,
        "--tasks",
        task.name,
    ]
    argv += ["--include_path", str(TASKS_DIR), "--output_path", str(cfg.out_dir / task.name)]
    if task.chat:
        argv.append("--apply_chat_template")
    if cfg.limit is not None:
        argv += ["--limit", str(cfg.limit)]
    return argv


def run_task(cfg: LmEvalConfig, task: LmEvalTask) -> TaskResult:
    """Run one task to the end; a failure raises with the tail of lm-eval's (redacted) output."""
    out = cfg.out_dir / task.name
    out.mkdir(parents=True, exist_ok=True)
    cwd = TASKS_DIR.parents[3]  # the repository root: the task files name their data relative to it
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OPENAI_API_KEY": cfg.api_key}
    done = subprocess.run(
        command(cfg, task), cwd=cwd, capture_output=True, text=True, timeout=cfg.timeout_s, env=env, check=False
    )
    log = (done.stdout + done.stderr).replace(cfg.api_key, "<key>")
    (out / "lm-eval.log").write_text(log, encoding="utf-8")
    results = sorted(out.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    for written in results:  # lm-eval records its model arguments, the key among them
        written.write_text(written.read_text(encoding="utf-8").replace(cfg.api_key, "<key>"), encoding="utf-8")
    if done.returncode != 0 or not results:
        raise RuntimeError(f"lm_eval exited {done.returncode} on {task.name}: {log[-LOG_TAIL_CHARS:]}")
    return read_results(task, json.loads(results[-1].read_text(encoding="utf-8")))


def read_results(task: LmEvalTask, report: dict[str, Any]) -> TaskResult:
    scores = report["results"][task.name]
    metrics = {
        key: (float(value) if isinstance(value, int | float) else None)
        for key, value in scores.items()
        if "," in key and "_stderr" not in key  # "metric,filter": lm-eval's scores (not its alias or sample count)
    }
    samples = report.get("n-samples", {}).get(task.name, {})
    seconds = report.get("total_evaluation_time_seconds")
    return TaskResult(
        task=task.name,
        backend=task.backend,
        documents=int(samples.get("effective") or 0),
        metrics=metrics,
        seconds=float(seconds) if seconds is not None else None,
    )


def report_lines(cfg: LmEvalConfig, results: list[TaskResult]) -> list[str]:
    lines = [
        "# lm-evaluation-harness against fleetchat",
        "",
        f"lm-eval 0.4.13, unmodified, against `{cfg.base_url}` (model `{cfg.model}`, {cfg.concurrency} requests at a "
        "time); tasks and data in functions/offline/lm_eval/tasks (GSM8K test, first 50 problems, MIT).",
        "",
        "| task | lm-eval model | documents | metric (filter) | value | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        for metric, value in result.metrics.items():
            shown = "—" if value is None else f"{value:.4g}"
            took = "—" if result.seconds is None else f"{result.seconds:.0f}"
            lines.append(f"| {result.task} | {result.backend} | {result.documents} | {metric} | {shown} | {took} |")
    return lines


def run_all(cfg: LmEvalConfig) -> list[TaskResult]:
    results = [run_task(cfg, task) for task in TASKS]
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    (cfg.out_dir / "lm-eval.md").write_text("\n".join(report_lines(cfg, results)) + "\n", encoding="utf-8")
    return results
