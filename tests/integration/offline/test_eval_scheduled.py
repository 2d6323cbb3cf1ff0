"""The nightly eval job's body against a real gateway (scripted workers): keys from the environment (the Modal
secret), reports, history and the metrics textfile in S3 (moto over HTTP)."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from functions.accounts.operations import create_tenant_with_key
from functions.offline.evals.reporting.history import RunBook
from functions.offline.evals.reporting.store import S3ReportStore
from functions.offline.evals.scheduled import run_scheduled
from functions.offline.evals.tenants import EvalKeyError
from shared.fleet.tiers import Tier
from shared.storage.accounts import TenantPurpose
from shared.storage.sqlite.accounts import SQLiteStore
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.moto_server import DUMMY_CREDENTIALS, moto_server, unique_names
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

ANSWER = "Ottawa is the capital of Canada, and this answer streams in small pieces."


@pytest.fixture
def deployment(gateway_for: GatewayFactory) -> Iterator[Gateway]:
    with serve(scripted_worker(ANSWER)) as mini, serve(scripted_worker(ANSWER)) as flagship:
        yield gateway_for({"mini": [mini], "flagship": [flagship]})


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    with moto_server() as endpoint:
        _, name = unique_names()
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
        yield endpoint, name


def eval_keys(gateway: Gateway) -> dict[Tier, str]:
    store = SQLiteStore(gateway.data_dir / "fleetchat.db")
    try:
        return {
            tier: create_tenant_with_key(store, f"eval-{tier.value}", tier, "eval", purpose=TenantPurpose.EVAL)[1].key
            for tier in (Tier.FREE, Tier.PLUS)
        }
    finally:
        store.close()


def test_the_nightly_job_keeps_its_report_and_metrics_in_s3(
    deployment: Gateway, bucket: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, name = bucket
    keys = eval_keys(deployment)
    monkeypatch.setenv("FLEETCHAT_EVAL_FREE_KEY", keys[Tier.FREE])
    monkeypatch.setenv("FLEETCHAT_EVAL_PLUS_KEY", keys[Tier.PLUS])
    monkeypatch.setenv("FLEETCHAT_EVAL_S3_BUCKET", name)
    monkeypatch.setenv("FLEETCHAT_EVAL_S3_ENDPOINT_URL", endpoint)
    summary = run_scheduled(deployment.url, suites=["latency"], limit=2)
    store = S3ReportStore(name, "evals/", endpoint_url=endpoint)
    run = RunBook(store).load_run("latest")
    assert run.run_id == summary.run_id and set(run.model_versions) == {"mini", "flagship"}
    assert summary.passed == (run.gate is not None and run.gate.passed)
    assert summary.report == f"s3://{name}/evals/runs/{run.run_id}.html"
    assert run.suites[0].error is None and len(run.suites[0].cases) == 4  # two streamed requests per tier
    prom = (store.get("latest.prom") or b"").decode()
    assert 'fleetchat_eval_metric{metric="latency.plus.ttft_p95_s",suite="latency",unit="s"}' in prom
    html = store.get(f"runs/{run.run_id}.html")
    assert html is not None and b"data:image/png;base64," in html


def test_the_nightly_job_refuses_to_run_without_eval_keys(
    deployment: Gateway, bucket: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEETCHAT_EVAL_S3_BUCKET", bucket[1])
    monkeypatch.setenv("FLEETCHAT_EVAL_S3_ENDPOINT_URL", bucket[0])
    monkeypatch.setenv("FLEETCHAT_EVAL_PLUS_KEY", "sk-only-plus")
    with pytest.raises(EvalKeyError, match="no eval key for free"):
        run_scheduled(deployment.url, suites=["latency"])
