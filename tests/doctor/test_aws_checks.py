"""The deployed-store checks against moto's server mode over HTTP, with the tables and bucket the adapters create
(shared/storage) given the attributes infra/terraform adds: the good layout passes; each missing attribute fails with
its fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from functions.local_stack.doctor.results import CheckResult, Status
from shared.storage.aws.accounts_layout import AwsAccountsConfig, ensure_accounts_table
from shared.storage.aws.layout import AwsStoreConfig, ensure_resources
from tests.doctor.conftest import only, run
from tests.support.moto_server import DUMMY_CREDENTIALS, moto_server, unique_names

OTHERS = ("config", "stripe", "workers", "web")


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def client(endpoint: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


def deploy(endpoint: str) -> dict[str, Any]:
    """The layout Terraform gives a deployment: the adapters' tables and bucket, plus PITR, versioning and the key.
    Returns the settings that point at it."""
    table, bucket = unique_names()
    accounts = f"{table}-accounts"
    ensure_resources(AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=endpoint))
    ensure_accounts_table(AwsAccountsConfig(table_name=accounts, endpoint_url=endpoint))
    ddb, s3, kms = (client(endpoint, service) for service in ("dynamodb", "s3", "kms"))
    for name in (table, accounts):
        spec = {"PointInTimeRecoveryEnabled": True}
        ddb.update_continuous_backups(TableName=name, PointInTimeRecoverySpecification=spec)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    key = kms.create_key(Description="fleetchat storage")["KeyMetadata"]["Arn"]
    kms.enable_key_rotation(KeyId=key)
    rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}}
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [rule]})
    return {
        "conversation_store": "aws",
        "accounts_store": "aws",
        "aws_endpoint_url": endpoint,
        "conversations_table": table,
        "accounts_table": accounts,
        "conversations_bucket": bucket,
        "conversations_kms_key_id": key,
    }


def by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


def test_the_terraform_layout_passes(endpoint: str, tmp_path: Path) -> None:
    layout = deploy(endpoint)
    report = run(skip=OTHERS, data_dir=tmp_path, **layout)
    stores = by_name(only(report, "stores"))
    assert not report.failed, report.results
    table, accounts = layout["conversations_table"], layout["accounts_table"]
    for name in (table, accounts):
        assert stores[f"table {name} TTL"].status is Status.OK
        assert stores[f"table {name} point-in-time recovery"].status is Status.OK
    assert "by_updated, by_sweep" in stores[f"table {table}"].detail
    # Tables made by the adapters carry DynamoDB's own encryption, not the deployment key: a warning, said so.
    assert stores[f"table {accounts}"].status is Status.WARN and "KMS" in stores[f"table {accounts}"].detail
    assert stores[f"bucket {layout['conversations_bucket']} versioning"].status is Status.OK
    assert stores[f"bucket {layout['conversations_bucket']} encryption"].status is Status.OK
    assert stores[f"KMS key {layout['conversations_kms_key_id']}"].detail == "enabled, rotating"
    assert not only(report, "stores", "sqlite")  # deployed stores only: no SQLite file is touched


def test_a_table_without_its_ttl_fails_with_the_fix(endpoint: str, tmp_path: Path) -> None:
    layout = deploy(endpoint)
    spec = {"Enabled": False, "AttributeName": "expires_at"}
    client(endpoint, "dynamodb").update_time_to_live(TableName=layout["accounts_table"], TimeToLiveSpecification=spec)
    report = run(skip=OTHERS, data_dir=tmp_path, **layout)
    ttl = by_name(only(report, "stores"))[f"table {layout['accounts_table']} TTL"]
    assert ttl.status is Status.FAIL and "expected expires_at" in ttl.detail
    assert "terraform apply" in (ttl.hint or "") and 'attribute_name = "expires_at"' in (ttl.hint or "")
    assert report.failed


def test_a_bucket_without_versioning_fails_with_the_fix(endpoint: str, tmp_path: Path) -> None:
    layout = deploy(endpoint)
    suspended = {"Status": "Suspended"}
    client(endpoint, "s3").put_bucket_versioning(
        Bucket=layout["conversations_bucket"], VersioningConfiguration=suspended
    )
    report = run(skip=OTHERS, data_dir=tmp_path, **layout)
    versioning = by_name(only(report, "stores"))[f"bucket {layout['conversations_bucket']} versioning"]
    assert versioning.status is Status.FAIL and versioning.detail == "suspended"
    assert "aws_s3_bucket_versioning" in (versioning.hint or "")


def test_missing_pitr_and_a_missing_table_fail(endpoint: str, tmp_path: Path) -> None:
    layout = deploy(endpoint)
    spec = {"PointInTimeRecoveryEnabled": False}
    ddb = client(endpoint, "dynamodb")
    ddb.update_continuous_backups(TableName=layout["conversations_table"], PointInTimeRecoverySpecification=spec)
    report = run(skip=OTHERS, data_dir=tmp_path, **{**layout, "accounts_table": "fleetchat-no-such-table"})
    stores = by_name(only(report, "stores"))
    assert stores[f"table {layout['conversations_table']} point-in-time recovery"].status is Status.FAIL
    missing = stores["table fleetchat-no-such-table"]
    assert missing.status is Status.FAIL and "FLEETCHAT_ACCOUNTS_TABLE" in (missing.hint or "")


def test_a_kms_bucket_without_a_configured_key_fails(endpoint: str, tmp_path: Path) -> None:
    """The bucket policy refuses the adapter's AES256 puts: every write would be a 503."""
    layout = {**deploy(endpoint), "conversations_kms_key_id": None}
    report = run(skip=OTHERS, data_dir=tmp_path, **layout)
    encryption = by_name(only(report, "stores"))[f"bucket {layout['conversations_bucket']} encryption"]
    assert encryption.status is Status.FAIL and "FLEETCHAT_CONVERSATIONS_KMS_KEY_ID" in (encryption.hint or "")


def test_a_disabled_key_and_an_unencrypted_bucket_fail(endpoint: str, tmp_path: Path) -> None:
    layout = deploy(endpoint)
    client(endpoint, "kms").disable_key(KeyId=layout["conversations_kms_key_id"].split("/")[-1])
    client(endpoint, "s3").delete_bucket_encryption(Bucket=layout["conversations_bucket"])
    stores = by_name(only(run(skip=OTHERS, data_dir=tmp_path, **layout), "stores"))
    key = stores[f"KMS key {layout['conversations_kms_key_id']}"]
    assert key.status is Status.FAIL and "Disabled" in key.detail
    encryption = stores[f"bucket {layout['conversations_bucket']} encryption"]
    assert encryption.status is Status.FAIL and "expected aws:kms" in encryption.detail


def test_no_aws_endpoint_answering_fails_every_store_in_bounded_time(tmp_path: Path) -> None:
    from tests.support.processes import free_port

    layout = {
        "conversation_store": "aws",
        "accounts_store": "aws",
        "aws_endpoint_url": f"http://127.0.0.1:{free_port()}",
    }
    stores = only(run(skip=OTHERS, timeout_s=1.0, data_dir=tmp_path, **layout), "stores")
    stores = [r for r in stores if r.name != "control state"]  # the data dir's SQLite file: not on AWS
    assert {r.status for r in stores} == {Status.FAIL}
    assert any("credentials" in (r.hint or "") for r in stores)


def test_a_table_missing_its_indexes_fails(endpoint: str, tmp_path: Path) -> None:
    layout = deploy(endpoint)
    bare = f"{layout['conversations_table']}-bare"
    client(endpoint, "dynamodb").create_table(
        TableName=bare,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    )
    stores = by_name(only(run(skip=OTHERS, data_dir=tmp_path, **{**layout, "conversations_table": bare}), "stores"))
    table = stores[f"table {bare}"]
    assert table.status is Status.FAIL and "['by_sweep', 'by_updated'] missing" in table.detail
    assert stores[f"table {bare} TTL"].status is Status.FAIL  # made without one


def test_a_missing_bucket_fails_with_the_fix(endpoint: str, tmp_path: Path) -> None:
    layout = {**deploy(endpoint), "conversations_bucket": "fleetchat-no-such-bucket"}
    stores = by_name(only(run(skip=OTHERS, data_dir=tmp_path, **layout), "stores"))
    missing = stores["bucket fleetchat-no-such-bucket"]
    assert missing.status is Status.FAIL and "FLEETCHAT_CONVERSATIONS_BUCKET" in (missing.hint or "")
