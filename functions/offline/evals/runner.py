"""Run eval suites against a deployment: resolve the eval keys and model versions, run each suite (an error is a
result, never a crash), gate against the baseline of the same model versions, and store run, report and history."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import httpx
from pydantic import BaseModel

from functions.judging.client import JudgeEndpoint
from functions.offline.evals.gate import judge_run
from functions.offline.evals.reporting.history import RunBook, run_name
from functions.offline.evals.reporting.prom import render_prometheus
from functions.offline.evals.reporting.report import render_run
from functions.offline.evals.reporting.store import ReportStore
from functions.offline.evals.results import EvalRun, new_run_id
from functions.offline.evals.suite import NullProgress, Progress, SuiteResult
from functions.offline.evals.suites import SUITES, build_suite
from functions.offline.evals.target import EvalTarget
from shared.fleet.tiers import Tier
from shared.settings import EvalSettings

log = logging.getLogger(__name__)

LATEST_PROM = "latest.prom"


class RunConfig(BaseModel):
    base_url: str
    keys: dict[Tier, str]
    suites: list[str] = list(SUITES)
    limit: int | None = None
    # A local deployment (SmolLM2 everywhere, so the judge too); None: inferred from the model versions it reports.
    local: bool | None = None
    judge: JudgeEndpoint | None = None
    request_timeout_s: float = EvalSettings.model_fields["request_timeout_s"].default
    run_id: str | None = None


class RunOutcome(BaseModel):
    run: EvalRun
    json_location: str
    html_location: str
    prom_location: str


def fetch_model_versions(base_url: str, keys: dict[Tier, str], timeout_s: float = 30.0) -> dict[str, str]:
    """Pool -> model version, as the deployment reports it (`GET /v1/models` with each eval key): the chat pools only
    (the list also names embedding models and the guard; a gateway older than its `capabilities` lists pools only)."""
    versions: dict[str, str] = {}
    with httpx.Client(timeout=timeout_s) as http:
        for key in keys.values():
            response = http.get(f"{base_url}/v1/models", headers={"authorization": f"Bearer {key}"})
            response.raise_for_status()
            for card in response.json()["data"]:
                if (card.get("capabilities") or {"chat_completions": True}).get("chat_completions"):
                    versions[card["id"]] = card.get("model_version") or "unknown"
    return versions


def is_local(model_versions: dict[str, str]) -> bool:
    """Pools serving packaged GGUF files: the embedded stack (SmolLM2), whatever machine the eval runs on."""
    return any(version.endswith(".gguf") for version in model_versions.values())


async def run_suite(name: str, target: EvalTarget, progress: Progress, limit: int | None) -> SuiteResult:
    started = time.perf_counter()
    try:
        suite = build_suite(name, limit=limit)
        result = await suite.run(target, progress)
    except Exception as exc:  # a suite that cannot run is a failed result, the other suites still run
        log.exception("eval suite %s failed", name)
        result = SuiteResult(suite=name, error=f"{type(exc).__name__}: {exc}")
    result.duration_s = result.duration_s or time.perf_counter() - started
    return result


async def run_eval(config: RunConfig, store: ReportStore, progress: Progress | None = None) -> RunOutcome:
    unknown = [name for name in config.suites if name not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s): {', '.join(unknown)}; known: {', '.join(SUITES)}")
    base_url = config.base_url.rstrip("/").removesuffix("/v1")
    versions = fetch_model_versions(base_url, config.keys)
    local = is_local(versions) if config.local is None else config.local
    run = EvalRun(
        run_id=config.run_id or new_run_id(),
        started_at=datetime.now(UTC),
        base_url=base_url,
        local=local,
        model_versions=versions,
        options={"suites": config.suites, "limit": config.limit},
    )
    target = EvalTarget(
        base_url,
        run.run_id,
        config.keys,
        judge=config.judge,
        local=local,
        timeout_s=config.request_timeout_s,
    )
    try:
        for name in config.suites:
            run.suites.append(await run_suite(name, target, progress or NullProgress(), config.limit))
    finally:
        await target.aclose()
    run.finished_at = datetime.now(UTC)
    return finish_run(run, store)


def finish_run(run: EvalRun, store: ReportStore) -> RunOutcome:
    """Gate the run against its baseline, then store the run, the history line, the report and the metrics file."""
    book = RunBook(store)
    baseline = book.baseline_for(run.version_key)
    run.gate = judge_run(run, baseline)
    json_location = book.save_run(run)
    book.append_history(run)
    html = render_run(run, book.history(), baseline)
    store.put(run_name(run.run_id, "html"), html.encode(), "text/html; charset=utf-8")
    prom = render_prometheus(run).encode()
    store.put(run_name(run.run_id, "prom"), prom, "text/plain; version=0.0.4")
    store.put(LATEST_PROM, prom, "text/plain; version=0.0.4")
    return RunOutcome(
        run=run,
        json_location=json_location,
        html_location=store.location(run_name(run.run_id, "html")),
        prom_location=store.location(LATEST_PROM),
    )


def suite_names(selected: Sequence[str] | None) -> list[str]:
    return list(selected) if selected else list(SUITES)
