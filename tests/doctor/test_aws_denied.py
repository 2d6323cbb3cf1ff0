"""The deployed doctor under the service role's permissions: items yes, describe calls no. Against a moto server in its
own process with IAM enforced (moto's auth switch is process-wide, so never in the test process): every store is
reported reachable with its attributes unchecked, as warnings, and nothing fails."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from functions.local_stack.doctor.results import Status
from tests.doctor.conftest import only, run
from tests.doctor.test_aws_checks import deploy
from tests.support.moto_server import DUMMY_CREDENTIALS
from tests.support.processes import free_port

OTHERS = ("config", "stripe", "workers", "web")
# What infra/terraform/iam.tf grants the service role, in short: item calls and bucket listing; the key only via S3 and
# DynamoDB (no direct DescribeKey), no describe calls at all.
SERVICE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"], "Resource": "*"},
        {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetObject", "s3:PutObject"], "Resource": "*"},
    ],
}


@pytest.fixture
def enforcing_moto(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "moto.log").open("wb")
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                httpx.get(f"{url}/moto-api/data.json", timeout=1.0)
                break
            except httpx.TransportError:
                assert process.poll() is None, (tmp_path / "moto.log").read_text()
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def test_describe_denied_reports_reachable_and_unchecked(
    enforcing_moto: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    layout = deploy(enforcing_moto)
    iam = boto3.client("iam", endpoint_url=enforcing_moto, region_name="us-east-1")
    iam.create_user(UserName="service")
    iam.put_user_policy(UserName="service", PolicyName="storage", PolicyDocument=json.dumps(SERVICE_POLICY))
    key = iam.create_access_key(UserName="service")["AccessKey"]
    httpx.post(f"{enforcing_moto}/moto-api/reset-auth", content=b"0").raise_for_status()  # enforce IAM from now on
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])

    report = run(skip=OTHERS, data_dir=tmp_path, **layout)
    stores = {r.name: r for r in only(report, "stores")}
    assert not report.failed, [r.line() for r in report.results]
    for table in (layout["conversations_table"], layout["accounts_table"]):
        assert stores[f"table {table}"].status is Status.WARN
        assert stores[f"table {table}"].detail == "reachable; attributes unchecked (describe denied)"
    bucket = stores[f"bucket {layout['conversations_bucket']}"]
    assert bucket.status is Status.WARN and "reachable" in bucket.detail
    key_check = stores[f"KMS key {layout['conversations_kms_key_id']}"]
    assert key_check.status is Status.WARN and "denied" in key_check.detail
