"""Deployed store checks: the DynamoDB tables, the S3 bucket and the KMS key exist with the attributes
infra/terraform gives them (keys, indexes, TTL, point-in-time recovery, versioning, KMS encryption).

The service role may read and write items but not describe resources (infra/terraform/iam.tf grants exactly the
adapters' calls): where a describe call is denied, the check falls back to an item read, reports the resource
reachable and its attributes unchecked (a warning), and says which permission would let it look.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict

from functions.local_stack.doctor.results import CheckResult, fail, ok, warn
from shared.settings import Settings
from shared.storage.aws.accounts_layout import LEDGER_INDEX
from shared.storage.aws.layout import LIST_INDEX, SWEEP_INDEX, TTL_ATTRIBUTE

APPLY = "run `terraform apply` in infra/terraform"
DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "403"}


class TableSpec(BaseModel):
    """What a table must look like: its name, the setting naming it, and its indexes' (hash, range) keys."""

    model_config = ConfigDict(frozen=True)

    name: str
    setting: str
    indexes: dict[str, tuple[str, str]]


def table_specs(settings: Settings) -> list[TableSpec]:
    specs = []
    if settings.conversation_store == "aws":
        indexes = {LIST_INDEX: ("pk", "updated_key"), SWEEP_INDEX: ("sweep_pk", "sweep_sk")}
        specs.append(TableSpec(name=settings.conversations_table, setting="conversations_table", indexes=indexes))
    if settings.accounts_store == "aws":
        indexes = {LEDGER_INDEX: ("hour_pk", "sk")}
        specs.append(TableSpec(name=settings.accounts_table, setting="accounts_table", indexes=indexes))
    return specs


def aws_client(settings: Settings, service: str, timeout_s: float) -> Any:
    """A client that fails fast: one attempt, short timeouts (the doctor reports, the adapters retry)."""
    config = Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 1, "mode": "standard"})
    where = {"region_name": settings.aws_region, "endpoint_url": settings.aws_endpoint_url, "config": config}
    return boto3.session.Session().client(service, **where)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _keys(schema: list[dict[str, str]]) -> tuple[str, str | None]:
    by_type = {part["KeyType"]: part["AttributeName"] for part in schema}
    return by_type.get("HASH", ""), by_type.get("RANGE")


def check_table(settings: Settings, spec: TableSpec, timeout_s: float) -> list[CheckResult]:
    ddb, label = aws_client(settings, "dynamodb", timeout_s), f"table {spec.name}"
    try:
        table = ddb.describe_table(TableName=spec.name)["Table"]
    except ClientError as exc:
        if _code(exc) == "ResourceNotFoundException":
            hint = f"{APPLY}, or set FLEETCHAT_{spec.setting.upper()} to the table's name"
            return [fail("stores", label, f"does not exist in {settings.aws_region}", hint)]
        if _code(exc) in DENIED:
            return [_reachable_only(ddb, spec.name, label)]
        raise
    results = [_table_shape(table, spec, label)]
    for name, judge in ((f"{label} TTL", _ttl), (f"{label} point-in-time recovery", _pitr)):
        try:
            results.append(judge(ddb, spec.name, name))
        except ClientError as exc:
            if _code(exc) not in DENIED:
                raise
            hint = "run doctor with an operator's credentials (a role that may describe the table)"
            results.append(warn("stores", name, "unchecked (describe denied)", hint))
    return results


def _ttl(ddb: Any, table: str, name: str) -> CheckResult:
    ttl = ddb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    if ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") and ttl.get("AttributeName") == TTL_ATTRIBUTE:
        return ok("stores", name, f"on {TTL_ATTRIBUTE}")
    found = f"{ttl.get('TimeToLiveStatus', 'DISABLED')} on {ttl.get('AttributeName', '-')}"
    hint = f'{APPLY} (ttl {{ attribute_name = "{TTL_ATTRIBUTE}" }}): expired items would stay forever'
    return fail("stores", name, f"{found}, expected {TTL_ATTRIBUTE}", hint)


def _pitr(ddb: Any, table: str, name: str) -> CheckResult:
    backups = ddb.describe_continuous_backups(TableName=table)["ContinuousBackupsDescription"]
    pitr = backups.get("PointInTimeRecoveryDescription", {}).get("PointInTimeRecoveryStatus", "DISABLED")
    if pitr == "ENABLED":
        return ok("stores", name, "enabled")
    hint = f"{APPLY} (point_in_time_recovery {{ enabled = true }}): without it a bad write cannot be undone"
    return fail("stores", name, pitr.lower(), hint)


def _table_shape(table: dict[str, Any], spec: TableSpec, label: str) -> CheckResult:
    if _keys(table["KeySchema"]) != ("pk", "sk"):
        hint = f"the table must be keyed (pk, sk) as infra/terraform makes it: {APPLY} on a new table"
        return fail("stores", label, f"keys {_keys(table['KeySchema'])}, expected ('pk', 'sk')", hint)
    found = {index["IndexName"]: _keys(index["KeySchema"]) for index in table.get("GlobalSecondaryIndexes", [])}
    wrong = sorted(name for name, keys in spec.indexes.items() if found.get(name) != keys)
    if wrong:
        hint = f"{APPLY}: listing, the retention sweep and the meter totals query these indexes"
        return fail("stores", label, f"index(es) {wrong} missing or keyed otherwise", hint)
    if table.get("TableStatus") != "ACTIVE":
        return warn("stores", label, f"status {table.get('TableStatus')}", "wait for ACTIVE, then run doctor again")
    shape = f"keys (pk, sk), indexes {', '.join(spec.indexes)}"
    sse = table.get("SSEDescription", {})
    if sse.get("Status") != "ENABLED" or sse.get("SSEType") != "KMS":
        hint = f"{APPLY} (server_side_encryption with the storage key)"
        return warn("stores", label, f"{shape}; encrypted with an AWS-owned key, not the deployment's KMS key", hint)
    return ok("stores", label, f"{shape}, KMS-encrypted")


def _reachable_only(ddb: Any, table: str, label: str) -> CheckResult:
    ddb.get_item(TableName=table, Key={"pk": {"S": "DOCTOR#probe"}, "sk": {"S": "DOCTOR"}})
    hint = "run doctor with an operator's credentials, or grant dynamodb:DescribeTable, DescribeTimeToLive, "
    hint += "DescribeContinuousBackups"
    return warn("stores", label, "reachable; attributes unchecked (describe denied)", hint)


def check_bucket(settings: Settings, timeout_s: float) -> list[CheckResult]:
    s3, bucket = aws_client(settings, "s3", timeout_s), settings.conversations_bucket
    label = f"bucket {bucket}"
    try:
        s3.list_objects_v2(Bucket=bucket, MaxKeys=1)  # the adapter's own bucket-level call (s3:ListBucket)
    except ClientError as exc:
        if _code(exc) in ("404", "NoSuchBucket"):
            hint = f"{APPLY}, or set FLEETCHAT_CONVERSATIONS_BUCKET to the bucket's name"
            return [fail("stores", label, "does not exist", hint)]
        if _code(exc) in DENIED:
            return [fail("stores", label, "access denied", "grant the service role s3:ListBucket on it (iam.tf)")]
        raise
    try:
        return [_versioning(s3, bucket, label), _encryption(s3, bucket, settings, label)]
    except ClientError as exc:
        if _code(exc) not in DENIED:
            raise
        hint = (
            "run doctor with an operator's credentials, or grant s3:GetBucketVersioning, s3:GetEncryptionConfiguration"
        )
        return [warn("stores", label, "reachable; attributes unchecked (read denied)", hint)]


def _versioning(s3: Any, bucket: str, label: str) -> CheckResult:
    status = s3.get_bucket_versioning(Bucket=bucket).get("Status", "Disabled")
    if status != "Enabled":
        hint = f"{APPLY} (aws_s3_bucket_versioning): without it a deleted body cannot be recovered"
        return fail("stores", f"{label} versioning", status.lower(), hint)
    return ok("stores", f"{label} versioning", "enabled")


def _encryption(s3: Any, bucket: str, settings: Settings, label: str) -> CheckResult:
    name, key = f"{label} encryption", settings.conversations_kms_key_id
    try:
        rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    except ClientError as exc:
        if _code(exc) != "ServerSideEncryptionConfigurationNotFoundError":
            raise
        rules = []
    default = rules[0].get("ApplyServerSideEncryptionByDefault", {}) if rules else {}
    algorithm = default.get("SSEAlgorithm", "none")
    if algorithm != "aws:kms":
        hint = f"{APPLY} (aws_s3_bucket_server_side_encryption_configuration with the storage key)"
        return fail("stores", name, f"default {algorithm}, expected aws:kms", hint)
    if key is None:
        # The bucket policy refuses a put naming AES256, which is what the adapter sends without a key id.
        hint = f"set FLEETCHAT_CONVERSATIONS_KMS_KEY_ID to {default.get('KMSMasterKeyID', 'the storage key')}"
        return fail("stores", name, "bucket uses KMS but no key is configured: every write would be refused", hint)
    return ok("stores", name, f"aws:kms ({default.get('KMSMasterKeyID', 'default key')})")


def check_key(settings: Settings, timeout_s: float) -> list[CheckResult]:
    key = settings.conversations_kms_key_id
    if key is None:
        return []  # the bucket check says what a KMS bucket without a configured key means
    kms, label = aws_client(settings, "kms", timeout_s), f"KMS key {key}"
    try:
        meta = kms.describe_key(KeyId=key)["KeyMetadata"]
    except ClientError as exc:
        if _code(exc) == "NotFoundException":
            return [fail("stores", label, "does not exist", "set FLEETCHAT_CONVERSATIONS_KMS_KEY_ID to the key's ARN")]
        if _code(exc) in DENIED:
            hint = "the role may use the key only through S3/DynamoDB: run doctor with an operator's credentials"
            return [warn("stores", label, "describe denied; state unchecked", hint)]
        raise
    usage = meta.get("KeyUsage", "ENCRYPT_DECRYPT")  # AWS always sends it; some stand-ins (moto) leave it out
    if meta.get("KeyState") != "Enabled" or usage != "ENCRYPT_DECRYPT":
        hint = "enable the key (or cancel its deletion): every stored conversation is unreadable without it"
        return [fail("stores", label, f"state {meta.get('KeyState')}, usage {usage}", hint)]
    try:
        rotating = kms.get_key_rotation_status(KeyId=meta["KeyId"]).get("KeyRotationEnabled", False)
    except ClientError as exc:
        if _code(exc) not in DENIED:
            raise
        rotating = None
    if rotating is False:
        return [warn("stores", label, "enabled, rotation off", f"{APPLY} (enable_key_rotation = true)")]
    return [ok("stores", label, "enabled" + (", rotating" if rotating else ""))]


def unreachable(label: str, exc: BotoCoreError) -> list[CheckResult]:
    """No endpoint, no credentials, a timeout: the store cannot be asked at all."""
    hint = "check the AWS credentials (AWS_ROLE_ARN in the secret, or a profile), FLEETCHAT_AWS_REGION and the endpoint"
    return [fail("stores", label, f"{type(exc).__name__}: {str(exc)[:200]}", hint)]


def guarded(label: str, check: Callable[[], list[CheckResult]]) -> Callable[[], list[CheckResult]]:
    def run() -> list[CheckResult]:
        try:
            return check()
        except BotoCoreError as exc:
            return unreachable(label, exc)

    return run
