"""The share-link store on both backends (SQLite; the conversations table on DynamoDB via moto): kept by token
hash, listed per conversation for the owner, revoked, deleted with the conversation or the account, tenant-scoped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from shared.settings import Settings
from shared.storage import factory
from shared.storage.conversations import new_conversation_id
from shared.storage.shares import Share, SharedMessage, ShareStore, new_share_id, new_share_token, token_hash

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
CONV_A, CONV_B = new_conversation_id(), new_conversation_id()


@pytest.fixture
def shares(conversations_table_settings: Settings) -> Iterator[ShareStore]:
    settings = conversations_table_settings
    store = factory.open_share_store(settings)
    yield store
    store.close()


def make(store: ShareStore, conversation: str = CONV_A, tenant: str = "ten_a", minute: int = 0) -> tuple[Share, str]:
    share = Share(
        id=new_share_id(),
        tenant_id=tenant,
        conversation_id=conversation,
        title="Lisbon ✓",
        messages=[
            SharedMessage(role="user", content="Plan a trip to Lisbon", created_at=T0),
            SharedMessage(role="assistant", content="Day 1: Alfama…\n```\ncode\n```", created_at=T0),
        ],
        created_at=T0 + timedelta(minutes=minute),
        expires_at=T0 + timedelta(days=30),
    )
    token = new_share_token()
    store.create(share, token_hash(token))
    return share, token


def test_a_share_is_found_by_its_token_hash_only(shares: ShareStore) -> None:
    share, token = make(shares)
    assert shares.by_token(token_hash(token)) == share
    assert shares.by_token(token) is None and shares.by_token(token_hash(new_share_token())) is None


def test_listed_per_conversation_oldest_first_and_scoped_to_the_tenant(shares: ShareStore) -> None:
    first, _ = make(shares, minute=0)
    second, _ = make(shares, minute=1)
    make(shares, conversation=CONV_B)
    make(shares, tenant="ten_b")
    assert [s.id for s in shares.list_conversation("ten_a", CONV_A)] == [first.id, second.id]
    assert shares.list_conversation("ten_c", CONV_A) == []


def test_revoke_deletes_it_and_only_for_its_owner(shares: ShareStore) -> None:
    share, token = make(shares)
    assert not shares.revoke("ten_b", share.id)
    assert shares.by_token(token_hash(token)) == share
    assert shares.revoke("ten_a", share.id)
    assert shares.by_token(token_hash(token)) is None and shares.list_conversation("ten_a", CONV_A) == []
    assert not shares.revoke("ten_a", share.id)


def test_deleted_with_the_conversation_or_the_account(shares: ShareStore) -> None:
    _, a = make(shares)
    _, b = make(shares, conversation=CONV_B)
    _, theirs = make(shares, tenant="ten_b")
    assert shares.delete_conversation("ten_a", CONV_A) == 1
    assert shares.by_token(token_hash(a)) is None and shares.by_token(token_hash(b)) is not None
    assert shares.erase_tenant("ten_a") == 1
    assert shares.by_token(token_hash(b)) is None and shares.by_token(token_hash(theirs)) is not None
