"""The deployed functions' AWS credentials: Modal's OIDC token, traded by boto3's own web-identity provider for the
service role's short-lived credentials (shared/storage/aws/identity.py), over real HTTP to moto's STS."""

from __future__ import annotations

import ast
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from shared.storage.aws.identity import SESSION_NAME, SESSION_NAME_ENV, TOKEN_FILE_ENV, use_modal_identity_token
from tests.support.moto_server import moto_server

MODAL_APP_SOURCE = Path(__file__).resolve().parents[3] / "gpu_workers" / "modal_app.py"
ROLE_ARN = "arn:aws:iam::123456789012:role/fleetchat/fleetchat-prod-modal"
# The shape of Modal's tokens (a JWT); STS only sees it as an opaque string here, moto does not verify signatures.
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtb2RhbDp3b3Jrc3BhY2VfaWQ6YWMtMSJ9.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    "environ",
    [
        {},  # outside Modal
        {"MODAL_IDENTITY_TOKEN": TOKEN},  # a Modal container without the role in its secret (GPU workers)
        {"AWS_ROLE_ARN": ROLE_ARN},  # the secret, outside a container
        {"MODAL_IDENTITY_TOKEN": TOKEN, "AWS_ROLE_ARN": ROLE_ARN, TOKEN_FILE_ENV: "/var/run/operator-token"},
    ],
)
def test_nothing_to_do_leaves_the_environment_alone(environ: dict[str, str], tmp_path: Path) -> None:
    before = dict(environ)
    assert use_modal_identity_token(environ, tmp_path) is None
    assert environ == before
    assert list(tmp_path.iterdir()) == []


def test_the_token_goes_to_an_owner_only_file_named_for_boto3(tmp_path: Path) -> None:
    stale = tmp_path / "fleetchat-modal-identity-token"
    stale.write_text("an older, longer token from before")
    stale.chmod(0o644)
    environ = {"MODAL_IDENTITY_TOKEN": TOKEN, "AWS_ROLE_ARN": ROLE_ARN}
    path = use_modal_identity_token(environ, tmp_path)
    assert path == stale and path.read_text() == TOKEN
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert environ[TOKEN_FILE_ENV] == str(path)
    assert environ["AWS_ROLE_SESSION_NAME"] == SESSION_NAME
    # A second call (the next scheduled run in a warm container) finds it done.
    assert use_modal_identity_token(environ, tmp_path) is None


def test_a_leftover_static_key_is_left_in_charge_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    environ = {"MODAL_IDENTITY_TOKEN": TOKEN, "AWS_ROLE_ARN": ROLE_ARN, "AWS_ACCESS_KEY_ID": "AKIAOLDUSERKEY000000"}
    with caplog.at_level(logging.WARNING, logger="shared.storage.aws.identity"):
        assert use_modal_identity_token(environ, tmp_path) is None
    assert TOKEN_FILE_ENV not in environ
    assert "remove AWS_ACCESS_KEY_ID" in caplog.text
    assert "AKIA" not in caplog.text  # never the key itself


@pytest.fixture
def container_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """os.environ as a Modal container with the `fleetchat-secrets` secret sees it: no static key, no AWS profile."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    # use_modal_identity_token sets these on os.environ itself; monkeypatch restores the originals after this fixture.
    for name in (TOKEN_FILE_ENV, SESSION_NAME_ENV):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")  # botocore reads this name, not AWS_REGION
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE_ARN)
    monkeypatch.setenv("MODAL_IDENTITY_TOKEN", TOKEN)
    yield


def test_boto3_assumes_the_role_with_the_token_and_signs_with_its_credentials(
    container_environment: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with moto_server() as url:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", url)  # boto3's own STS call for the credentials goes to moto
        assert boto3.session.Session().get_credentials() is None  # without the token file: no credentials at all
        use_modal_identity_token(os.environ, tmp_path)
        session = boto3.session.Session()
        credentials = session.get_credentials()
        assert credentials is not None and credentials.method == "assume-role-with-web-identity"
        frozen = credentials.get_frozen_credentials()
        assert frozen.access_key and frozen.token, "short-lived credentials carry a session token"
        identity = session.client("sts", endpoint_url=url).get_caller_identity()
        assert identity["Arn"] == f"arn:aws:sts::123456789012:assumed-role/fleetchat-prod-modal/{SESSION_NAME}"
        # The stores' clients sign with them too.
        ddb = session.client("dynamodb", endpoint_url=url)
        ddb.create_table(
            TableName="t",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        )
        # Described, not listed: the moto server is shared with other tests' tables (a listing is paged).
        assert ddb.describe_table(TableName="t")["Table"]["TableName"] == "t"


def _store_functions() -> dict[str, ast.FunctionDef]:
    """The Modal functions that open the AWS stores (their body uses DEPLOYED_STORES)."""
    tree = ast.parse(MODAL_APP_SOURCE.read_text())
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(isinstance(n, ast.Name) and n.id == "DEPLOYED_STORES" for n in ast.walk(node))
    }


def test_every_store_function_hands_the_token_to_boto3_before_opening_a_store() -> None:
    functions = _store_functions()
    assert {"gateway", "retention_sweep", "meter_flush"} <= set(functions)
    for name, node in functions.items():
        calls = [
            n.lineno
            for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "use_modal_identity_token"
        ]
        stores = [n.lineno for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == "DEPLOYED_STORES"]
        assert calls and min(calls) < min(stores), f"{name} opens the stores without the Modal identity token"
