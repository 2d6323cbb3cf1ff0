"""Both adapters of each store contract behind one fixture: SQLite on a temp file, AWS against moto over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from shared.settings import Settings
from shared.storage import factory
from shared.storage.accounts import TenantStore
from shared.storage.conversations import ConversationStore
from shared.storage.ledger import LedgerStore, MeterStateStore
from shared.storage.limits import RateLimitStore
from shared.storage.safety_audit import SafetyAuditStore
from shared.storage.tool_audit import ToolAuditStore
from tests.support.moto_server import DUMMY_CREDENTIALS, moto_server, unique_names

if TYPE_CHECKING:
    from shared.storage.aws.accounts_layout import AwsAccountsConfig


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def open_aws_store(endpoint: str) -> ConversationStore:
    from shared.storage.aws.conversations import AwsConversationStore, AwsStoreConfig, ensure_resources

    table, bucket = unique_names()
    config = AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=endpoint)
    ensure_resources(config)
    return AwsConversationStore(config)


def open_sqlite_store(path: Path) -> ConversationStore:
    from shared.storage.sqlite.conversations import SQLiteConversationStore

    return SQLiteConversationStore(path)


@pytest.fixture(params=["sqlite", "aws"])
def conversation_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConversationStore]:
    if request.param == "sqlite":
        store = open_sqlite_store(tmp_path / "fleetchat.db")
    else:
        request.getfixturevalue("aws_env")
        store = open_aws_store(request.getfixturevalue("moto_endpoint"))
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=["sqlite", "aws"])
def conversations_table_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings whose conversation-side stores (feedback, shares) live on the parametrised backend: on AWS in a
    conversations table made the way the conversation store makes it."""
    if request.param == "sqlite":
        return Settings(data_dir=tmp_path)
    from shared.storage.aws.layout import AwsStoreConfig, ensure_resources

    request.getfixturevalue("aws_env")
    endpoint = request.getfixturevalue("moto_endpoint")
    table, bucket = unique_names()
    ensure_resources(AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=endpoint))
    return Settings(data_dir=tmp_path, conversation_store="aws", conversations_table=table, aws_endpoint_url=endpoint)


def aws_accounts_config(endpoint: str) -> AwsAccountsConfig:
    from shared.storage.aws.accounts_layout import AwsAccountsConfig, ensure_accounts_table

    table, _ = unique_names()
    config = AwsAccountsConfig(table_name=table, endpoint_url=endpoint)
    ensure_accounts_table(config)
    return config


@pytest.fixture(params=["sqlite", "aws"])
def accounts_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings whose account stores (tenants, limits, ledger, meter state, safety audit) live on the parametrised
    backend."""
    if request.param == "sqlite":
        return Settings(data_dir=tmp_path)
    request.getfixturevalue("aws_env")
    config = aws_accounts_config(request.getfixturevalue("moto_endpoint"))
    return Settings(
        data_dir=tmp_path, accounts_store="aws", accounts_table=config.table_name, aws_endpoint_url=config.endpoint_url
    )


@pytest.fixture
def tenant_store(accounts_settings: Settings) -> Iterator[TenantStore]:
    store = factory.open_tenant_store(accounts_settings)
    yield store
    store.close()


@pytest.fixture
def rate_limits(accounts_settings: Settings) -> Iterator[RateLimitStore]:
    store = factory.open_rate_limits(accounts_settings)
    yield store
    store.close()


@pytest.fixture
def ledger(accounts_settings: Settings) -> Iterator[LedgerStore]:
    store = factory.open_ledger(accounts_settings)
    yield store
    store.close()


@pytest.fixture
def meter_state(accounts_settings: Settings) -> Iterator[MeterStateStore]:
    store = factory.open_meter_state(accounts_settings)
    yield store
    store.close()


@pytest.fixture
def safety_audit(accounts_settings: Settings) -> Iterator[SafetyAuditStore]:
    store = factory.open_safety_audit(accounts_settings)
    yield store
    store.close()


@pytest.fixture
def tool_audit(accounts_settings: Settings) -> Iterator[ToolAuditStore]:
    store = factory.open_tool_audit(accounts_settings)
    yield store
    store.close()
