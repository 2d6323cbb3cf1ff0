"""infra/terraform's hardening, as checkov reads it and beyond: the service is an OIDC-federated role that only this
app's store functions can assume, the key has an explicit policy naming that role, the conversation bucket logs its
accesses to a hardened log bucket and sends its events to EventBridge, and every checkov skip is a known one with
its reason beside it. (`make scan-infra` runs checkov itself.)"""

from __future__ import annotations

import ast
import re
from typing import Any

import pytest

from tests.support.terraform_module import (
    MODULE,
    REPO_ROOT,
    checkov_skips,
    modal_sub,
    one_block,
    policy_statements,
    resource,
    trusted,
    variable_default,
)

MODAL_APP_SOURCE = REPO_ROOT / "gpu_workers" / "modal_app.py"
ROLE_ARN = "${aws_iam_role.service.arn}"
CONVERSATIONS_ARN = "${aws_s3_bucket.conversations.arn}"
LOGS_ARN = "${aws_s3_bucket.access_logs.arn}"

# Every skip, and why (the reason itself sits beside the skip in the .tf file). A new skip fails here until it is
# added on purpose; a skip whose finding was fixed fails here until it is removed.
EXPECTED_SKIPS = {
    ("aws_s3_bucket.conversations", "CKV_AWS_144"),  # no cross-region replica: DR is in-region, erasure must hold
    ("aws_s3_bucket.access_logs", "CKV_AWS_18"),  # the log bucket does not log itself
    ("aws_s3_bucket.access_logs", "CKV_AWS_145"),  # log delivery takes SSE-S3 only
    ("aws_s3_bucket.access_logs", "CKV_AWS_144"),  # logs stay in the region they describe
    ("aws_s3_bucket.access_logs", "CKV2_AWS_62"),  # nothing reacts to a log delivery
    ("data.aws_iam_policy_document.storage_key", "CKV_AWS_109"),  # a key policy's "*" is the key
    ("data.aws_iam_policy_document.storage_key", "CKV_AWS_111"),
    ("data.aws_iam_policy_document.storage_key", "CKV_AWS_356"),
}


def test_every_checkov_skip_is_expected_and_says_why() -> None:
    skips = checkov_skips()
    assert set(skips) == EXPECTED_SKIPS
    for (block, check), reason in skips.items():
        assert len(reason) >= 40, f"{block} skips {check} without a reason worth the name: {reason!r}"


# -- the service identity: Modal's OIDC tokens, this app's store functions only ------------------------------------


def store_functions() -> set[str]:
    """The Modal functions that open the AWS stores (their body uses DEPLOYED_STORES)."""
    tree = ast.parse(MODAL_APP_SOURCE.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(n, ast.Name) and n.id == "DEPLOYED_STORES" for n in ast.walk(node))
    }


def trust_statement() -> dict[str, Any]:
    (statement,) = policy_statements("aws_iam_policy_document.service_trust")
    return statement


def sub_patterns(workspace: str) -> list[str]:
    """The StringLike values on `sub`, as Terraform renders its `for` expression with the variables' defaults."""
    (condition,) = [c for c in trust_statement()["condition"] if c["variable"] == "oidc.modal.com:sub"]
    assert condition["test"] == "StringLike"
    match = re.fullmatch(r'\$\{\[for (\w+) in var\.modal_function_names : \\?"(.*?)\\?"\]\}', condition["values"])
    assert match, condition["values"]
    loop_variable, template = match.groups()
    defaults = {name: variable_default(name) for name in ("modal_environment", "modal_app_name")}
    values = {"modal_workspace_id": workspace, **defaults}

    def render(function: str) -> str:
        text = template.replace(f"${{{loop_variable}}}", function)
        return re.sub(r"\$\{var\.(\w+)\}", lambda m: values[m.group(1)], text)

    return [render(function) for function in variable_default("modal_function_names")]


def test_the_role_trusts_modal_tokens_for_this_app_only() -> None:
    statement = trust_statement()
    assert statement.get("effect", "Allow") == "Allow"
    assert statement["actions"] == ["sts:AssumeRoleWithWebIdentity"]
    (principal,) = statement["principals"]
    assert principal == {"type": "Federated", "identifiers": ["${local.modal_oidc_provider_arn}"]}
    # The provider is the one made here unless the account already has one for Modal's issuer.
    assert "aws_iam_openid_connect_provider.modal[0].arn" in MODULE["locals"]["modal_oidc_provider_arn"]
    provider = resource("aws_iam_openid_connect_provider.modal")
    assert provider["url"] == "https://oidc.modal.com" and provider["client_id_list"] == ["oidc.modal.com"]
    (aud,) = [c for c in statement["condition"] if c["variable"] == "oidc.modal.com:aud"]
    assert (aud["test"], aud["values"]) == ("StringEquals", ["oidc.modal.com"])
    assert "default" not in MODULE["variable"]["modal_workspace_id"], "the workspace must be given, never guessed"

    patterns = sub_patterns("ac-12345abcd")
    for function in store_functions():
        assert trusted(patterns, modal_sub(function=function)), function
    refused = [
        modal_sub(function="nightly_eval"),  # reads the secret, but is a client of the public API
        modal_sub(function="VllmServer"),
        modal_sub(workspace="ac-other"),
        modal_sub(environment="dev"),
        modal_sub(app="fleetchat-fork"),
        modal_sub(function="gateway_x"),
        "modal:workspace_id:ac-12345abcd:*",
    ]
    for sub in refused:
        assert not trusted(patterns, sub), sub


def test_the_trusted_functions_are_exactly_the_ones_that_open_the_stores() -> None:
    assert {"gateway", "retention_sweep", "meter_flush"} <= store_functions()
    assert set(variable_default("modal_function_names")) == store_functions()
    app_name = re.search(r'^APP_NAME = "([^"]+)"', MODAL_APP_SOURCE.read_text(), flags=re.MULTILINE)
    assert app_name and variable_default("modal_app_name") == app_name.group(1)


@pytest.mark.parametrize(
    ("variable", "valid", "invalid"),
    [
        ("modal_workspace_id", ["ac-12345abcd", "ac-X9"], ["ac-*", "ac-1:app_name:x", "", "12345", "ac-"]),
        ("modal_function_names", ["gateway", "meter_flush"], ["*", "gateway:*", "a?b", ""]),
    ],
)
def test_modal_names_cannot_widen_the_trust(variable: str, valid: list[str], invalid: list[str]) -> None:
    """The validations' regexes, run here with Python's re (same syntax for these classes): a wildcard, a colon or an
    empty value would match more subjects than one workspace or function."""
    (validation,) = MODULE["variable"][variable]["validation"]
    (pattern,) = re.findall(r'regex\(\\?"((?:[^"\\]|\\.)*)\\?",', validation["condition"])
    pattern = pattern.replace("\\\\", "\\")
    assert all(re.search(pattern, value) for value in valid), pattern
    assert not any(re.search(pattern, value) for value in invalid), pattern


# -- the key policy -------------------------------------------------------------------------------------------------


def test_the_key_has_an_explicit_policy_naming_the_service_role() -> None:
    assert resource("aws_kms_key.storage")["policy"] == "${data.aws_iam_policy_document.storage_key.json}"
    statements = {s["sid"]: s for s in policy_statements("aws_iam_policy_document.storage_key")}
    assert set(statements) == {"AccountAdministersTheKeyThroughIam", "ServiceRoleUsesTheKeyThroughStorage"}
    for statement in statements.values():
        assert statement.get("effect", "Allow") == "Allow" and statement["resources"] == ["*"]
        for principal in statement["principals"]:
            assert principal["type"] == "AWS" and "*" not in principal["identifiers"], "no wildcard principal"
    root = statements["AccountAdministersTheKeyThroughIam"]
    assert root["principals"][0]["identifiers"] == ["${local.account_root}"]
    assert MODULE["locals"]["account_root"].endswith(":iam::${data.aws_caller_identity.current.account_id}:root")

    service = statements["ServiceRoleUsesTheKeyThroughStorage"]
    assert service["principals"][0]["identifiers"] == [ROLE_ARN]
    # The same use the role's IAM policy grants: the same actions under the same condition.
    (granted,) = [s for s in policy_statements("aws_iam_policy_document.service") if s.get("sid") == "StorageKey"]
    assert sorted(service["actions"]) == sorted(granted["actions"])
    assert not any(a in service["actions"] for a in ("kms:*", "kms:CreateGrant", "kms:ReEncrypt*", "kms:PutKeyPolicy"))
    assert one_block(service, "condition") == one_block(granted, "condition")


# -- access logs and events -----------------------------------------------------------------------------------------


def test_conversation_bucket_logs_its_accesses_to_the_log_bucket() -> None:
    logging = resource("aws_s3_bucket_logging.conversations")
    assert logging["bucket"] == "${aws_s3_bucket.conversations.id}"
    assert logging["target_bucket"] == "${aws_s3_bucket.access_logs.id}"
    assert logging["target_prefix"] == "conversations/"
    assert "${aws_s3_bucket_policy.access_logs}" in logging["depends_on"]

    # S3's log delivery may write there, only under that prefix, only for this bucket of this account.
    (delivery,) = [s for s in policy_statements("aws_iam_policy_document.access_logs") if s.get("effect") != "Deny"]
    assert delivery["actions"] == ["s3:PutObject"]
    assert delivery["resources"] == [f"{LOGS_ARN}/conversations/*"]
    assert delivery["principals"] == [{"type": "Service", "identifiers": ["logging.s3.amazonaws.com"]}]
    conditions = {c["variable"]: (c["test"], c["values"]) for c in delivery["condition"]}
    assert conditions == {
        "aws:SourceArn": ("ArnEquals", [CONVERSATIONS_ARN]),
        "aws:SourceAccount": ("StringEquals", ["${data.aws_caller_identity.current.account_id}"]),
    }
    assert resource("aws_s3_bucket_policy.access_logs")["policy"] == "${data.aws_iam_policy_document.access_logs.json}"


def test_log_bucket_is_private_encrypted_tls_only_and_expires_logs() -> None:
    block = resource("aws_s3_bucket_public_access_block.access_logs")
    flags = ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets")
    assert all(block[flag] is True for flag in flags)
    ownership = one_block(resource("aws_s3_bucket_ownership_controls.access_logs"), "rule")
    assert ownership["object_ownership"] == "BucketOwnerEnforced"
    rule = one_block(resource("aws_s3_bucket_server_side_encryption_configuration.access_logs"), "rule")
    assert one_block(rule, "apply_server_side_encryption_by_default") == {"sse_algorithm": "AES256"}
    versioning = one_block(resource("aws_s3_bucket_versioning.access_logs"), "versioning_configuration")
    assert versioning["status"] == "Enabled"
    (lifecycle,) = resource("aws_s3_bucket_lifecycle_configuration.access_logs")["rule"]
    assert lifecycle["status"] == "Enabled" and lifecycle["filter"] == [{}]
    assert one_block(lifecycle, "expiration")["days"] == "${var.access_log_days}"
    assert one_block(lifecycle, "noncurrent_version_expiration")["noncurrent_days"] <= 30
    (deny,) = [s for s in policy_statements("aws_iam_policy_document.access_logs") if s.get("effect") == "Deny"]
    assert deny["actions"] == ["s3:*"] and set(deny["resources"]) == {LOGS_ARN, f"{LOGS_ARN}/*"}
    assert one_block(deny, "condition") == {"test": "Bool", "variable": "aws:SecureTransport", "values": ["false"]}


def test_conversation_bucket_events_go_to_eventbridge() -> None:
    notification = resource("aws_s3_bucket_notification.conversations")
    assert notification == {"bucket": "${aws_s3_bucket.conversations.id}", "eventbridge": True}
