"""infra/terraform matches the AWS stores: table layouts, IAM for exactly the calls they make, bucket crypto.

Offline: the .tf files are parsed with python-hcl2 and compared with what `shared.storage.aws.layout` and
`shared.storage.aws.conversations` (conversations), and `shared.storage.aws.accounts_layout` and the account adapters
(accounts, limits, ledger, safety audit) really do (their calls are captured on mock clients, or read from their
source).
Where a `terraform` binary and a local provider mirror exist, the module is also validated and planned offline.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock, patch

import pytest

from shared.settings import Settings
from shared.storage.aws import accounts_layout as aws_accounts_layout
from shared.storage.aws import layout as aws_layout
from shared.storage.aws.accounts_layout import LEDGER_INDEX, AwsAccountsConfig
from shared.storage.aws.conversations import AwsConversationStore
from shared.storage.aws.layout import LIST_INDEX, SWEEP_INDEX, TTL_ATTRIBUTE, AwsStoreConfig
from shared.storage.conversations import StoredMessage
from tests.support.moto_server import moto_server
from tests.support.terraform_module import (
    MODULE,
    REPO_ROOT,
    TF_DIR,
    modal_sub,
    one_block,
    policy_statements,
    resource,
    trusted,
    variable_default,
)

ADAPTER_SOURCE = REPO_ROOT / "shared" / "storage" / "aws" / "conversations.py"
ACCOUNT_SOURCES = [
    REPO_ROOT / "shared" / "storage" / "aws" / name
    for name in ("accounts_layout.py", "accounts.py", "limits.py", "ledger.py", "safety_audit.py")
]
MODAL_APP_SOURCE = REPO_ROOT / "gpu_workers" / "modal_app.py"

TABLE_ARN = "${aws_dynamodb_table.conversations.arn}"
INDEX_ARN = "${aws_dynamodb_table.conversations.arn}/index/*"
BUCKET_ARN = "${aws_s3_bucket.conversations.arn}"
OBJECT_ARN = "${aws_s3_bucket.conversations.arn}/*"
KEY_ARN = "${aws_kms_key.storage.arn}"
ACCOUNTS_TABLE_ARN = "${aws_dynamodb_table.accounts.arn}"
ACCOUNTS_INDEX_ARN = f"${{aws_dynamodb_table.accounts.arn}}/index/{LEDGER_INDEX}"
VECTOR_COMMITS_ARN = "${aws_dynamodb_table.vector_commits.arn}"
# LanceDB's S3 + DynamoDB commit store (Rust, so no boto3 calls to read): lance's io/commit/dynamodb.rs builds GetItem,
# PutItem and Query requests and checks the table with DescribeTable; dropping a table deletes its items (DeleteItem).
# The same five were the calls seen on moto's server by the vector index's contract tests.
LANCE_COMMIT_ACTIONS = {f"dynamodb:{a}" for a in ("DeleteItem", "DescribeTable", "GetItem", "PutItem", "Query")}

# boto3 method of the adapter -> the IAM actions it needs. A method missing here fails the test: map it first.
DYNAMODB_ACTIONS: dict[str, set[str]] = {
    "get_item": {"GetItem"},
    "batch_get_item": {"BatchGetItem"},
    "put_item": {"PutItem"},
    "update_item": {"UpdateItem"},
    "delete_item": {"DeleteItem"},
    "query": {"Query"},
    "batch_write_item": {"BatchWriteItem"},
    "transact_write_items": set(),  # no IAM action of its own: see TRANSACTION_ACTIONS
    "close": set(),
}
# Each operation inside TransactWriteItems is authorized as the single-item action.
TRANSACTION_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
S3_ACTIONS: dict[str, set[str]] = {
    "get_object": {"GetObject"},
    "head_object": {"GetObject"},
    "put_object": {"PutObject"},
    "delete_object": {"DeleteObject", "GetObject"},  # If-Match with an ETag needs GetObject too
    "delete_objects": {"DeleteObject"},
    "list_objects_v2": {"ListBucket"},
    "close": set(),
}
# What ensure_resources' calls would need (plus the table_exists waiter's DescribeTable): never the service's.
RESOURCE_ADMIN_ACTIONS = {"get_waiter": "dynamodb:DescribeTable"}


# -- the tables are the ones ensure_resources and ensure_accounts_table create -------------------------------------


@pytest.fixture(scope="module")
def created() -> dict[str, Any]:
    """What ensure_resources asks AWS for, captured on mock clients: the table, its TTL, the bucket."""
    ddb, s3 = MagicMock(name="dynamodb"), MagicMock(name="s3")
    ddb.describe_time_to_live.return_value = {"TimeToLiveDescription": {"TimeToLiveStatus": "DISABLED"}}
    with patch.object(aws_layout, "clients", return_value=(ddb, s3)):
        aws_layout.ensure_resources(AwsStoreConfig(table_name="t", bucket="b", vector_commit_table="v"))
    tables = {call.kwargs["TableName"]: call.kwargs for call in ddb.create_table.call_args_list}
    return {
        "table": tables["t"],
        "vector_commits": tables["v"],
        "ttl": ddb.update_time_to_live.call_args.kwargs["TimeToLiveSpecification"],
        "ddb_calls": {call[0].split(".")[0] for call in ddb.method_calls},
        "s3_calls": {call[0].split(".")[0] for call in s3.method_calls},
    }


@pytest.fixture(scope="module")
def created_accounts() -> dict[str, Any]:
    """What ensure_accounts_table asks AWS for, captured on a mock client: the table and its TTL."""
    ddb, s3 = MagicMock(name="dynamodb"), MagicMock(name="s3")
    ddb.describe_time_to_live.return_value = {"TimeToLiveDescription": {"TimeToLiveStatus": "DISABLED"}}
    with patch.object(aws_accounts_layout, "clients", return_value=(ddb, s3)):
        aws_accounts_layout.ensure_accounts_table(AwsAccountsConfig(table_name="t"))
    return {
        "table": ddb.create_table.call_args.kwargs,
        "ttl": ddb.update_time_to_live.call_args.kwargs["TimeToLiveSpecification"],
        "ddb_calls": {call[0].split(".")[0] for call in ddb.method_calls},
        "s3_calls": {call[0].split(".")[0] for call in s3.method_calls} - {"close"},
    }


# Terraform resource -> (the fixture capturing what the adapter creates, its index names, its Settings field).
TABLES = {
    "conversations": ("created", {LIST_INDEX, SWEEP_INDEX}, "conversations_table"),
    "accounts": ("created_accounts", {LEDGER_INDEX}, "accounts_table"),
}


@pytest.fixture(params=sorted(TABLES))
def table_case(request: pytest.FixtureRequest) -> tuple[dict[str, Any], dict[str, Any], set[str]]:
    """(the table resource, what its adapter creates, the adapter's index names), for each table."""
    fixture, indexes, _ = TABLES[request.param]
    return resource(f"aws_dynamodb_table.{request.param}"), request.getfixturevalue(fixture), indexes


def test_table_keys_and_billing_match_the_adapter(table_case) -> None:
    table, created, _ = table_case
    keys = {entry["KeyType"]: entry["AttributeName"] for entry in created["table"]["KeySchema"]}
    assert (table["hash_key"], table["range_key"]) == (keys["HASH"], keys["RANGE"]) == ("pk", "sk")
    assert table["billing_mode"] == created["table"]["BillingMode"]
    expected = sorted((d["AttributeName"], d["AttributeType"]) for d in created["table"]["AttributeDefinitions"])
    assert sorted((a["name"], a["type"]) for a in table["attribute"]) == expected


def test_indexes_match_the_adapter(table_case) -> None:
    table, created, index_names = table_case

    def from_adapter(index: dict[str, Any]) -> dict[str, Any]:
        keys = {entry["KeyType"]: entry["AttributeName"] for entry in index["KeySchema"]}
        projection = index["Projection"]
        return {
            "name": index["IndexName"],
            "hash_key": keys["HASH"],
            "range_key": keys.get("RANGE"),
            "projection_type": projection["ProjectionType"],
            "non_key_attributes": projection.get("NonKeyAttributes"),
        }

    def from_terraform(index: dict[str, Any]) -> dict[str, Any]:
        fields = ("name", "hash_key", "range_key", "projection_type", "non_key_attributes")
        return {field: index.get(field) for field in fields}

    expected = sorted((from_adapter(i) for i in created["table"]["GlobalSecondaryIndexes"]), key=lambda i: i["name"])
    actual = sorted((from_terraform(i) for i in table["global_secondary_index"]), key=lambda i: i["name"])
    assert actual == expected
    assert {index["name"] for index in actual} == index_names
    assert "local_secondary_index" not in table


def test_ttl_is_the_adapter_attribute(table_case) -> None:
    table, created, _ = table_case
    assert one_block(table, "ttl") == {"attribute_name": TTL_ATTRIBUTE, "enabled": True}
    assert created["ttl"] == {"Enabled": True, "AttributeName": TTL_ATTRIBUTE}


def test_the_vector_commit_table_matches_the_adapter(created: dict[str, Any]) -> None:
    """LanceDB's commit store: the keys Lance reads and writes, the table the settings name."""
    table, made = resource("aws_dynamodb_table.vector_commits"), created["vector_commits"]
    keys = {entry["KeyType"]: entry["AttributeName"] for entry in made["KeySchema"]}
    assert (table["hash_key"], table["range_key"]) == (keys["HASH"], keys["RANGE"]) == ("base_uri", "version")
    assert table["billing_mode"] == made["BillingMode"]
    expected = sorted((d["AttributeName"], d["AttributeType"]) for d in made["AttributeDefinitions"])
    assert sorted((a["name"], a["type"]) for a in table["attribute"]) == expected
    assert variable_default("vector_commit_table_name") == Settings().vectors.commit_table
    config = AwsStoreConfig(table_name="t", bucket="b")
    assert variable_default("vector_commit_table_name") == config.vector_commit_table
    assert one_block(table, "server_side_encryption") == {"enabled": True, "kms_key_arn": KEY_ARN}
    assert one_block(table, "point_in_time_recovery")["enabled"] is True
    assert table["deletion_protection_enabled"] == "${var.deletion_protection}"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_table_is_protected_and_encrypted_with_the_key(name: str) -> None:
    table = resource(f"aws_dynamodb_table.{name}")
    variable = table["name"].removeprefix("${var.").removesuffix("}")
    assert variable_default(variable) == Settings.model_fields[TABLES[name][2]].default
    assert one_block(table, "point_in_time_recovery")["enabled"] is True
    assert table["deletion_protection_enabled"] == "${var.deletion_protection}"
    assert variable_default("deletion_protection") is True
    assert one_block(table, "server_side_encryption") == {"enabled": True, "kms_key_arn": KEY_ARN}
    assert resource("aws_kms_key.storage")["enable_key_rotation"] is True
    assert resource("aws_kms_alias.storage")["target_key_id"] == "${aws_kms_key.storage.key_id}"


# -- the bucket ----------------------------------------------------------------------------------------------------


def test_bucket_blocks_public_access_and_enforces_ownership() -> None:
    block = resource("aws_s3_bucket_public_access_block.conversations")
    assert block["bucket"] == "${aws_s3_bucket.conversations.id}"
    flags = ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets")
    assert all(block[flag] is True for flag in flags)
    ownership = one_block(resource("aws_s3_bucket_ownership_controls.conversations"), "rule")
    assert ownership["object_ownership"] == "BucketOwnerEnforced"


def test_bucket_defaults_to_the_kms_key() -> None:
    rule = one_block(resource("aws_s3_bucket_server_side_encryption_configuration.conversations"), "rule")
    default = one_block(rule, "apply_server_side_encryption_by_default")
    assert default == {"sse_algorithm": "aws:kms", "kms_master_key_id": KEY_ARN}
    assert rule["bucket_key_enabled"] is True


def test_deleted_bodies_do_not_outlive_the_short_undo_window() -> None:
    versioning = one_block(resource("aws_s3_bucket_versioning.conversations"), "versioning_configuration")
    if versioning["status"] != "Enabled":
        return  # without versions a delete is final at once
    rules = resource("aws_s3_bucket_lifecycle_configuration.conversations")["rule"]
    whole_bucket = [rule for rule in rules if rule["status"] == "Enabled" and rule.get("filter") in ([{}], None)]
    assert len(whole_bucket) == 1, "one enabled lifecycle rule must cover the whole bucket"
    rule = whole_bucket[0]
    assert one_block(rule, "noncurrent_version_expiration")["noncurrent_days"] == "${var.noncurrent_version_days}"
    assert 1 <= variable_default("noncurrent_version_days") <= 7
    assert one_block(rule, "expiration")["expired_object_delete_marker"] is True
    assert one_block(rule, "abort_incomplete_multipart_upload")["days_after_initiation"] <= 7


def _put_object_args(kms_key_id: str | None) -> dict[str, Any]:
    """The PutObject arguments of a first turn, as the adapter sends them."""
    ddb, s3 = MagicMock(name="dynamodb"), MagicMock(name="s3")
    config = AwsStoreConfig(table_name="t", bucket="b", kms_key_id=kms_key_id)
    with patch("shared.storage.aws.conversations.clients", return_value=(ddb, s3)):
        store = AwsConversationStore(config)
    now = datetime(2025, 1, 1, tzinfo=UTC)
    message = StoredMessage(role="user", content="hi", created_at=now)
    store.append_turn(
        "tenant", "conv_" + "0" * 32, expected_version=0, messages=[message], expires_at=None, render_version=1, now=now
    )
    return s3.put_object.call_args.kwargs


def _condition_holds(condition: dict[str, Any], context: dict[str, str]) -> bool:
    """One condition block, by IAM's rules: an absent key fails a match but passes a negated match or an IfExists."""
    test, values, value = condition["test"], condition["values"], context.get(condition["variable"])
    if test == "Null":
        return (value is None) == (values == ["true"])
    operator = test.removesuffix("IfExists")
    if value is None:
        return test.endswith("IfExists") or "Not" in operator
    if operator == "NumericLessThan":
        return any(float(value) < float(v) for v in values)
    matched = value in values
    return {"StringEquals": matched, "Bool": matched, "StringNotEquals": not matched}[operator]


def _bucket_policy_denies(action: str, headers: dict[str, Any], *, tls: bool = True) -> bool:
    """Whether a Deny statement of the bucket policy refuses this request to an object."""
    context = {"aws:SecureTransport": "true", "s3:TlsVersion": "1.3"} if tls else {"aws:SecureTransport": "false"}
    if headers.get("ServerSideEncryption"):
        context["s3:x-amz-server-side-encryption"] = headers["ServerSideEncryption"]
    if headers.get("SSEKMSKeyId"):
        context["s3:x-amz-server-side-encryption-aws-kms-key-id"] = headers["SSEKMSKeyId"]
    for statement in policy_statements("aws_iam_policy_document.bucket"):
        assert statement.get("effect") == "Deny", "the bucket policy only denies; IAM grants"
        applies = {action, "s3:*"} & set(statement["actions"]) and OBJECT_ARN in statement["resources"]
        if applies and all(_condition_holds(condition, context) for condition in statement.get("condition", [])):
            return True
    return False


def test_bucket_policy_accepts_the_adapter_puts_and_refuses_plain_http() -> None:
    assert resource("aws_s3_bucket_policy.conversations")["policy"] == "${data.aws_iam_policy_document.bucket.json}"
    args = _put_object_args("arn:aws:kms:us-east-1:123456789012:key/0000")
    assert args["ServerSideEncryption"] == "aws:kms"
    assert not _bucket_policy_denies("s3:PutObject", args)
    assert not _bucket_policy_denies("s3:PutObject", {})  # no header: the bucket default (the key) applies
    # Without FLEETCHAT_CONVERSATIONS_KMS_KEY_ID the adapter asks for AES256, overriding the bucket default: refused.
    assert _put_object_args(None)["ServerSideEncryption"] == "AES256"
    assert _bucket_policy_denies("s3:PutObject", _put_object_args(None))
    assert not _bucket_policy_denies("s3:GetObject", {})
    assert _bucket_policy_denies("s3:GetObject", {}, tls=False)
    assert _bucket_policy_denies("s3:PutObject", args, tls=False)


def test_bucket_name_validation_follows_s3_rules() -> None:
    conditions = " ".join(v["condition"] for v in MODULE["variable"]["bucket_name"]["validation"])
    patterns = re.findall(r'regex\(\\?"((?:[^"\\]|\\.)*)\\?", var\.bucket_name\)', conditions)
    assert patterns, "bucket_name needs a regex validation"
    assert "length(var.bucket_name) >= 3" in conditions and "length(var.bucket_name) <= 63" in conditions
    for name in ("fleetchat-conversations", "acme-prod-42", "abc"):
        assert all(re.search(p, name) for p in patterns), name
    for name in ("Fleetchat", "a.b.c", "-abc", "abc-", "a_b", "my..bucket"):
        assert not all(re.search(p, name) for p in patterns), name


# -- IAM: exactly what the adapter calls ---------------------------------------------------------------------------


def adapter_calls(sources: list[Path]) -> tuple[set[str], set[str], set[str]]:
    """(DynamoDB methods, S3 methods, TransactWriteItems operations) that the adapter in `sources` uses."""
    methods: dict[str, set[str]] = {"_ddb": set(), "_s3": set()}
    operations: set[str] = set()
    for node in ast.walk(ast.Module(body=[n for p in sources for n in ast.parse(p.read_text()).body], type_ignores=[])):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "self"
            and node.value.attr in methods
        ):
            methods[node.value.attr].add(node.attr)
        if isinstance(node, ast.Dict):
            operations |= {k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in TRANSACTION_ACTIONS}
    return methods["_ddb"], methods["_s3"], operations


def required_actions(sources: list[Path]) -> set[str]:
    ddb_methods, s3_methods, operations = adapter_calls(sources)
    assert ddb_methods, "found no boto3 calls in the adapter: did the client attributes move?"
    unknown = (ddb_methods - DYNAMODB_ACTIONS.keys()) | (s3_methods - S3_ACTIONS.keys())
    assert not unknown, f"map {sorted(unknown)} to IAM actions here and grant them in infra/terraform/iam.tf"
    actions = {f"dynamodb:{a}" for m in ddb_methods for a in DYNAMODB_ACTIONS[m]}
    if "transact_write_items" in ddb_methods:
        actions |= {f"dynamodb:{TRANSACTION_ACTIONS[op]}" for op in operations}
    return actions | {f"s3:{a}" for m in s3_methods for a in S3_ACTIONS[m]}


def granted() -> dict[str, set[str]]:
    """Service policy: action -> the resources it is allowed on."""
    grants: dict[str, set[str]] = {}
    for statement in policy_statements("aws_iam_policy_document.service"):
        assert statement.get("effect", "Allow") == "Allow"
        assert "not_actions" not in statement and "not_resources" not in statement
        for action in statement["actions"]:
            grants.setdefault(action, set()).update(statement["resources"])
    return grants


def granted_on(*resources: str) -> set[str]:
    return {action for action, on in granted().items() if on & set(resources)}


def test_service_policy_allows_exactly_the_adapter_calls() -> None:
    conversations, accounts = required_actions([ADAPTER_SOURCE]), required_actions(ACCOUNT_SOURCES)
    assert {"s3:PutObject", "dynamodb:UpdateItem"} <= conversations and "dynamodb:BatchGetItem" in accounts
    storage_actions = {action for action in granted() if not action.startswith("kms:")}
    assert storage_actions == conversations | accounts | LANCE_COMMIT_ACTIONS
    # Each table gets exactly its own adapter's calls.
    assert granted_on(TABLE_ARN, INDEX_ARN) == {a for a in conversations if a.startswith("dynamodb:")}
    assert granted_on(ACCOUNTS_TABLE_ARN, ACCOUNTS_INDEX_ARN) == accounts
    assert granted_on(VECTOR_COMMITS_ARN) == LANCE_COMMIT_ACTIONS


def test_account_adapters_never_scan() -> None:
    ddb_methods, s3_methods, _ = adapter_calls(ACCOUNT_SOURCES)
    assert "scan" not in ddb_methods and not s3_methods


def test_service_policy_is_scoped_to_the_tables_indexes_bucket_and_key() -> None:
    for action, resources in granted().items():
        assert "*" not in action, action
        service = action.split(":")[0]
        if action == "dynamodb:Query":
            assert resources == {TABLE_ARN, INDEX_ARN, ACCOUNTS_TABLE_ARN, ACCOUNTS_INDEX_ARN, VECTOR_COMMITS_ARN}
        elif action == "dynamodb:DescribeTable":
            assert resources == {VECTOR_COMMITS_ARN}  # Lance's check of its commit store, nothing else
        elif service == "dynamodb":
            assert resources and resources <= {TABLE_ARN, ACCOUNTS_TABLE_ARN, VECTOR_COMMITS_ARN}, action
        elif action == "s3:ListBucket":
            assert resources == {BUCKET_ARN}
        elif service == "s3":
            assert resources == {OBJECT_ARN}, action
        else:
            assert service == "kms" and resources == {KEY_ARN}, action
    kms = [s for s in policy_statements("aws_iam_policy_document.service") if s["resources"] == [KEY_ARN]]
    assert len(kms) == 1
    assert set(kms[0]["actions"]) <= {"kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey"}
    via = one_block(kms[0], "condition")
    assert (via["test"], via["variable"]) == ("StringEquals", "kms:ViaService")
    assert set(via["values"]) == {"s3.${var.region}.amazonaws.com", "dynamodb.${var.region}.amazonaws.com"}


def test_service_cannot_create_reconfigure_or_drop_resources(
    created: dict[str, Any], created_accounts: dict[str, Any]
) -> None:
    def iam_action(service: str, method: str) -> str:
        return RESOURCE_ADMIN_ACTIONS.get(method) or f"{service}:{''.join(p.title() for p in method.split('_'))}"

    local_only = {
        iam_action(service, method)
        for calls in (created, created_accounts)
        for service, methods in (("dynamodb", calls["ddb_calls"]), ("s3", calls["s3_calls"]))
        for method in methods
    }
    assert {"dynamodb:CreateTable", "dynamodb:UpdateTimeToLive", "s3:CreateBucket"} <= local_only
    # DescribeTable (the creation waiter's) is granted on the vector commit table alone: Lance reads it at start.
    actions = set(granted())
    assert not actions & (local_only - {"dynamodb:DescribeTable"})
    assert granted()["dynamodb:DescribeTable"] == {VECTOR_COMMITS_ARN}
    admin = re.compile(
        r":(Create|Delete|Update|Put)(Table|Bucket|TimeToLive|Backup|Key|Alias)|:PutBucket|ObjectVersion|Grant"
    )
    assert not [action for action in actions if admin.search(action)]


def test_service_identity_is_a_role_with_that_policy_and_no_user_or_key() -> None:
    policy = resource("aws_iam_role_policy.service")
    assert policy["role"] == "${aws_iam_role.service.id}"
    assert policy["policy"] == "${data.aws_iam_policy_document.service.json}"
    trust = resource("aws_iam_role.service")["assume_role_policy"]
    assert trust == "${data.aws_iam_policy_document.service_trust.json}"
    long_lived = ("aws_iam_user", "aws_iam_access_key", "aws_iam_user_policy", "aws_iam_policy_attachment")
    assert [a for a in MODULE["resource"] if a.startswith(long_lived)] == []
    assert [a for a in MODULE["resource"] if a.startswith("aws_iam_role_policy")] == ["aws_iam_role_policy.service"]


# -- outputs and references ----------------------------------------------------------------------------------------


def test_outputs_feed_the_modal_secret() -> None:
    outputs = MODULE["output"]
    names = ("table_name", "accounts_table_name", "bucket_name", "kms_key_arn", "service_role_arn")
    for name in names:
        assert name in outputs, name
    assert outputs["service_role_arn"]["value"] == "${aws_iam_role.service.arn}"
    command = outputs["modal_secret_command"]["value"]
    created_secret = re.search(r"modal secret create (\S+) ", command)
    read_by_the_app = re.findall(r'modal\.Secret\.from_name\("([^"]+)"\)', MODAL_APP_SOURCE.read_text())
    assert created_secret and created_secret.group(1) in read_by_the_app
    prefix = Settings.model_config["env_prefix"]
    fields = ("aws_region", "conversations_table", "conversations_bucket", "conversations_kms_key_id", "accounts_table")
    for field in fields:
        assert field in Settings.model_fields
        assert f"{prefix}{field.upper()}=" in command, field
    assert "FLEETCHAT_CONVERSATIONS_KMS_KEY_ID=${aws_kms_key.storage.arn}" in command
    # boto3's web-identity provider: the role to assume, and the region of its STS call (botocore reads
    # AWS_DEFAULT_REGION, not AWS_REGION). No static key: boto3 would prefer it over the role.
    assert "AWS_ROLE_ARN=${aws_iam_role.service.arn}" in command
    assert "AWS_DEFAULT_REGION=${var.region}" in command
    assert "AWS_ACCESS_KEY_ID" not in command and "AWS_SECRET_ACCESS_KEY" not in command


def test_terraform_and_provider_versions_are_pinned() -> None:
    (settings,) = MODULE["other"]["terraform"]
    assert settings["required_version"] == ">= 1.6"
    assert settings["required_providers"] == [{"aws": {"source": "hashicorp/aws", "version": "~> 5.0"}}]
    (provider,) = MODULE["other"]["provider"]
    assert provider["aws"]["region"] == "${var.region}"


def test_every_reference_is_declared() -> None:
    text = json.dumps(MODULE)
    used_variables = set(re.findall(r"\bvar\.([A-Za-z_][\w-]*)", text))
    assert used_variables == set(MODULE["variable"]), "undeclared or unused variables"
    assert set(re.findall(r"\blocal\.([A-Za-z_][\w-]*)", text)) <= set(MODULE["locals"])
    data = set(re.findall(r"\bdata\.(aws_\w+\.\w+)", text))
    assert data <= set(MODULE["data"]), data - set(MODULE["data"])
    resources = {ref for ref in re.findall(r"(?<![\w.])(aws_\w+\.\w+)", text) if ref not in MODULE["data"]}
    assert resources <= set(MODULE["resource"]), resources - set(MODULE["resource"])


# -- the real terraform, where one is installed --------------------------------------------------------------------

PROVIDER_MIRROR = Path(os.environ.get("FLEETCHAT_TF_PROVIDER_MIRROR", "/opt/tf-plugins"))
# No credentials and no AWS: creating resources makes no call at plan time, and the account id
# (data.aws_caller_identity) comes from moto's STS on loopback.
OFFLINE_PROVIDER = """
provider "aws" {{
  access_key                  = "AKIAOFFLINEPLAN00000"
  secret_key                  = "offline"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true

  endpoints {{
    sts = "{sts}"
  }}
}}
"""
WORKSPACE = "ac-12345abcd"
EXISTING_PROVIDER = "arn:aws:iam::123456789012:oidc-provider/oidc.modal.com"


def _terraform(cwd: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_CLI_CONFIG_FILE": str(config)}
    return subprocess.run(
        ["terraform", *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary")
def test_terraform_fmt_is_clean(tmp_path: Path) -> None:
    (tmp_path / "cli.tfrc").write_text("")
    result = _terraform(TF_DIR, tmp_path / "cli.tfrc", "fmt", "-check", "-diff", "-recursive")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(
    shutil.which("terraform") is None or not (PROVIDER_MIRROR / "registry.terraform.io/hashicorp/aws").is_dir(),
    reason="no terraform binary or no local aws provider mirror (offline: nothing to download it from)",
)
def test_terraform_plans_offline(tmp_path: Path) -> None:
    for path in TF_DIR.glob("*.tf"):
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "cli.tfrc").write_text(
        f'provider_installation {{\n  filesystem_mirror {{\n    path = "{PROVIDER_MIRROR}"\n  }}\n}}\n'
    )
    config = tmp_path / "cli.tfrc"
    init = _terraform(tmp_path, config, "init", "-backend=false", "-input=false")
    assert init.returncode == 0, init.stdout + init.stderr
    variables = ["-var", "bucket_name=acme-fleetchat-conversations", "-var", f"modal_workspace_id={WORKSPACE}"]
    with moto_server() as sts:
        (tmp_path / "offline_override.tf").write_text(OFFLINE_PROVIDER.format(sts=sts))
        # plan validates the configuration and evaluates every expression and variable validation with real values
        plan = _terraform(tmp_path, config, "plan", "-input=false", *variables)
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert "Warning" not in plan.stdout + plan.stderr
        assert re.search(r"Plan: \d+ to add, 0 to change, 0 to destroy", plan.stdout)
        assert "aws_iam_openid_connect_provider.modal[0] will be created" in plan.stdout
        # With the account's existing Modal provider the trust policy is known at plan time: read it as IAM will.
        given = ["-var", f"modal_oidc_provider_arn={EXISTING_PROVIDER}", "-out", "tfplan"]
        plan = _terraform(tmp_path, config, "plan", "-input=false", *variables, *given)
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert "aws_iam_openid_connect_provider.modal" not in plan.stdout
    shown = _terraform(tmp_path, config, "show", "-json", "tfplan")
    assert shown.returncode == 0, shown.stderr
    (role,) = [
        r["values"]
        for r in json.loads(shown.stdout)["planned_values"]["root_module"]["resources"]
        if r["address"] == "aws_iam_role.service"
    ]
    (statement,) = json.loads(role["assume_role_policy"])["Statement"]
    assert statement["Principal"] == {"Federated": EXISTING_PROVIDER}
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"]["StringEquals"] == {"oidc.modal.com:aud": "oidc.modal.com"}
    patterns = statement["Condition"]["StringLike"]["oidc.modal.com:sub"]
    for function in variable_default("modal_function_names"):
        assert trusted(patterns, modal_sub(function=function))
    for other in (
        modal_sub(function="nightly_eval"),
        modal_sub(workspace="ac-someoneelse"),
        modal_sub(environment="dev"),
        modal_sub(app="fleetchat-fork"),
    ):
        assert not trusted(patterns, other), other
