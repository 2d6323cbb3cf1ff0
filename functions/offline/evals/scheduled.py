"""The nightly eval job (the Modal cron's body): every suite against the deployment, reports to the S3 store.

The eval tenants' keys come from the environment (the `fleetchat-eval` Modal secret): a container keeps no files,
so bootstrapping tenants here would create new ones every night.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from functions.offline.evals.launch import eval_judge_endpoint
from functions.offline.evals.reporting.store import ReportStore, S3ReportStore
from functions.offline.evals.runner import RunConfig, run_eval
from functions.offline.evals.suites import SUITES
from functions.offline.evals.tenants import EvalKeyError
from shared.fleet.tiers import Tier
from shared.settings import EvalSettings, Settings


class ScheduledSummary(BaseModel):
    run_id: str
    passed: bool
    findings: list[str]
    report: str
    metrics_file: str


def scheduled_config(
    eval_settings: EvalSettings, base_url: str, suites: list[str] | None = None, limit: int | None = None
) -> RunConfig:
    keys = {
        tier: secret.get_secret_value()
        for tier, secret in ((Tier.FREE, eval_settings.free_key), (Tier.PLUS, eval_settings.plus_key))
        if secret is not None
    }
    missing = [tier.value for tier in (Tier.FREE, Tier.PLUS) if tier not in keys]
    if missing:
        raise EvalKeyError(
            f"no eval key for {', '.join(missing)}: set FLEETCHAT_EVAL_FREE_KEY and FLEETCHAT_EVAL_PLUS_KEY (keys of "
            "tenants created with purpose `eval`, docs/evals.md) in the fleetchat-eval secret"
        )
    url = (eval_settings.base_url or base_url).rstrip("/").removesuffix("/v1")
    return RunConfig(
        base_url=url,
        keys=keys,
        suites=suites or list(SUITES),
        limit=limit,
        judge=eval_judge_endpoint(eval_settings, url, keys),
        request_timeout_s=eval_settings.request_timeout_s,
    )


def scheduled_store(eval_settings: EvalSettings) -> ReportStore:
    if not eval_settings.s3_bucket:
        raise ValueError("FLEETCHAT_EVAL_S3_BUCKET is not set: the nightly eval has nowhere to keep its reports")
    return S3ReportStore(eval_settings.s3_bucket, eval_settings.s3_prefix, endpoint_url=eval_settings.s3_endpoint_url)


def run_scheduled(base_url: str, *, suites: list[str] | None = None, limit: int | None = None) -> ScheduledSummary:
    """Every suite (or `suites`) against `base_url` (unless FLEETCHAT_EVAL_BASE_URL names another)."""
    eval_settings = Settings().eval  # the job's entry point: the environment read once, here
    store = scheduled_store(eval_settings)
    outcome = asyncio.run(run_eval(scheduled_config(eval_settings, base_url, suites, limit), store))
    gate = outcome.run.gate
    return ScheduledSummary(
        run_id=outcome.run.run_id,
        passed=bool(gate and gate.passed),
        findings=[] if gate is None else [finding.message for finding in gate.findings],
        report=outcome.html_location,
        metrics_file=outcome.prom_location,
    )
