"""Both conversation-store adapters behind one fixture: SQLite on a temp file, AWS against moto over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.storage.conversations import ConversationStore
from tests.support.moto_server import DUMMY_CREDENTIALS, moto_server, unique_names


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def open_aws_store(endpoint: str) -> ConversationStore:
    from shared.storage.aws_conversations import AwsConversationStore, AwsStoreConfig, ensure_resources

    table, bucket = unique_names()
    config = AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=endpoint)
    ensure_resources(config)
    return AwsConversationStore(config)


def open_sqlite_store(path: Path) -> ConversationStore:
    from shared.storage.sqlite_conversations import SQLiteConversationStore

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
