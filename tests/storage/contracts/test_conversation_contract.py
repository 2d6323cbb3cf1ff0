"""The ConversationStore contract, run against both adapters (SQLite file; DynamoDB + S3 on moto over HTTP)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from shared.errors import InvalidRequestError
from shared.storage.conversations import (
    PURGE_AFTER,
    AuditRecord,
    ConversationMeta,
    ConversationNotFoundError,
    ConversationStore,
    StoredMessage,
    SweepReason,
    VersionConflictError,
    new_conversation_id,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
TENANT = "ten_alice"
OTHER = "ten_mallory"


def msgs(*pairs: tuple[str, str], at: datetime = T0) -> list[StoredMessage]:
    return [StoredMessage(role=role, content=content, created_at=at) for role, content in pairs]  # type: ignore[arg-type]


def create(store: ConversationStore, tenant: str = TENANT, *, at: datetime = T0, expires_in: timedelta | None = None):
    conv_id = new_conversation_id()
    expires_at = None if expires_in is None else at + expires_in
    meta = store.append_turn(
        tenant,
        conv_id,
        expected_version=0,
        messages=msgs(("user", "hello"), ("assistant", "hi there"), at=at),
        expires_at=expires_at,
        render_version=1,
        title="greeting",
        now=at,
    )
    return meta


def audit(tenant: str, conv: str | None, action: str = "test") -> AuditRecord:
    return AuditRecord(at=T0, actor="test", action=action, tenant_id=tenant, conversation_id=conv)


def test_create_then_read_back(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store)
    assert (meta.version, meta.message_count, meta.title, meta.render_version) == (1, 2, "greeting", 1)
    got = conversation_store.get(TENANT, meta.id, now=T0)
    assert got is not None and got.complete
    assert [(m.role, m.content) for m in got.messages] == [("user", "hello"), ("assistant", "hi there")]
    assert got.created_at == T0 and got.updated_at == T0


def test_append_moves_version_and_keeps_order(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store)
    later = T0 + timedelta(minutes=5)
    new = conversation_store.append_turn(
        TENANT,
        meta.id,
        expected_version=1,
        messages=msgs(("user", "again"), ("assistant", "sure"), at=later),
        expires_at=later + timedelta(days=30),
        render_version=1,
        now=later,
    )
    assert (new.version, new.message_count, new.updated_at, new.title) == (2, 4, later, "greeting")
    got = conversation_store.get(TENANT, meta.id, now=later)
    assert got is not None
    assert [m.content for m in got.messages] == ["hello", "hi there", "again", "sure"]
    assert got.expires_at == later + timedelta(days=30)


def append(
    store: ConversationStore, conv_id: str, version: int, *pairs: tuple[str, str], at: datetime, keep: int | None = None
) -> ConversationMeta:
    return store.append_turn(
        TENANT,
        conv_id,
        expected_version=version,
        messages=msgs(*pairs),
        expires_at=None,
        render_version=1,
        now=at,
        keep=keep,
    )


def test_keep_replaces_the_tail_of_the_history(conversation_store: ConversationStore) -> None:
    """Edit-and-resend: the stored messages after the edited one are replaced, in one conditional write."""
    meta = create(conversation_store)
    later = T0 + timedelta(minutes=1)
    append(conversation_store, meta.id, 1, ("user", "q2"), ("assistant", "a2"), at=later)
    edited = append(conversation_store, meta.id, 2, ("user", "q2 edited"), ("assistant", "a2 new"), at=later, keep=2)
    assert (edited.version, edited.message_count) == (3, 4)
    got = conversation_store.get(TENANT, meta.id, now=later)
    assert got is not None and got.complete
    assert [m.content for m in got.messages] == ["hello", "hi there", "q2 edited", "a2 new"]
    # Replacing from the very first message keeps nothing of the old history.
    append(conversation_store, meta.id, 3, ("user", "fresh"), ("assistant", "start"), at=later, keep=0)
    got = conversation_store.get(TENANT, meta.id, now=later)
    assert got is not None and [m.content for m in got.messages] == ["fresh", "start"] and got.message_count == 2


def test_keep_beyond_the_history_is_refused_and_changes_nothing(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store)
    with pytest.raises(InvalidRequestError):
        append(conversation_store, meta.id, 1, ("user", "x"), ("assistant", "y"), at=T0, keep=3)
    got = conversation_store.get(TENANT, meta.id, now=T0)
    assert got is not None and (got.version, [m.content for m in got.messages]) == (1, ["hello", "hi there"])


def test_finish_reason_round_trips(conversation_store: ConversationStore) -> None:
    conv_id = new_conversation_id()
    stopped = StoredMessage(role="assistant", content="partial ans", created_at=T0, finish_reason="stopped")
    conversation_store.append_turn(
        TENANT,
        conv_id,
        expected_version=0,
        messages=[*msgs(("user", "q")), stopped],
        expires_at=None,
        render_version=1,
        now=T0,
    )
    got = conversation_store.get(TENANT, conv_id, now=T0)
    assert got is not None and [m.finish_reason for m in got.messages] == [None, "stopped"]


def test_who_answered_round_trips_and_survives_later_turns(conversation_store: ConversationStore) -> None:
    """The model and the safety policies of an answer are kept with it (metadata: rendering never sees them), through
    later appends and an edit that keeps it; messages without them read back None."""
    conv_id = new_conversation_id()
    answered = StoredMessage(
        role="assistant",
        content="Lisbon",
        created_at=T0,
        finish_reason="stop",
        model="flagship",
        pre_policy_version="rules-3+clf-2",
        post_policy_version="rules-3+out-1",
        model_version="Qwen/Qwen2.5-14B-Instruct@canary-sha",  # the version that answered (a canary here)
    )
    conversation_store.append_turn(
        TENANT, conv_id, expected_version=0, messages=[*msgs(("user", "q")), answered], expires_at=None,
        render_version=1, now=T0,
    )  # fmt: skip
    conversation_store.append_turn(
        TENANT, conv_id, expected_version=1, messages=msgs(("user", "again"), ("assistant", "old answer")),
        expires_at=None, render_version=1, now=T0,
    )  # fmt: skip
    got = conversation_store.get(TENANT, conv_id, now=T0)
    assert got is not None
    assert got.messages[1] == answered
    assert [(m.model, m.pre_policy_version, m.post_policy_version, m.model_version) for m in got.messages[2:]] == [
        (None,) * 4
    ] * 2
    regenerated = answered.model_copy(update={"content": "Lisbon, surely", "model": "mini"})
    conversation_store.append_turn(
        TENANT, conv_id, expected_version=2, messages=[*msgs(("user", "again")), regenerated], expires_at=None,
        render_version=1, now=T0, keep=2,
    )  # fmt: skip
    got = conversation_store.get(TENANT, conv_id, now=T0)
    assert got is not None and [m.model for m in got.messages] == [None, "flagship", None, "mini"]
    assert got.messages[1] == answered


def test_stale_version_is_a_conflict_and_changes_nothing(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store)
    conversation_store.append_turn(
        TENANT, meta.id, expected_version=1, messages=msgs(("user", "a")), expires_at=None, render_version=1, now=T0
    )
    with pytest.raises(VersionConflictError):
        conversation_store.append_turn(
            TENANT, meta.id, expected_version=1, messages=msgs(("user", "b")), expires_at=None, render_version=1
        )
    got = conversation_store.get(TENANT, meta.id, now=T0)
    assert got is not None and [m.content for m in got.messages][-1] == "a" and got.version == 2


def test_creating_an_existing_id_is_a_conflict(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store)
    with pytest.raises(VersionConflictError):
        conversation_store.append_turn(
            TENANT, meta.id, expected_version=0, messages=msgs(("user", "x")), expires_at=None, render_version=1
        )
    got = conversation_store.get(TENANT, meta.id, now=T0)
    assert got is not None and got.message_count == 2


def test_append_to_unknown_conversation_is_not_found(conversation_store: ConversationStore) -> None:
    with pytest.raises(ConversationNotFoundError):
        conversation_store.append_turn(
            TENANT,
            new_conversation_id(),
            expected_version=1,
            messages=msgs(("user", "x")),
            expires_at=None,
            render_version=1,
        )


def test_another_tenant_sees_nothing_and_changes_nothing(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store)
    assert conversation_store.get(OTHER, meta.id, now=T0) is None
    assert conversation_store.list(OTHER, now=T0).items == []
    assert conversation_store.rename(OTHER, meta.id, "pwned", now=T0) is None
    assert conversation_store.soft_delete(OTHER, meta.id, now=T0) is False
    with pytest.raises(ConversationNotFoundError):
        conversation_store.append_turn(
            OTHER, meta.id, expected_version=1, messages=msgs(("user", "x")), expires_at=None, render_version=1
        )
    assert conversation_store.erase_tenant(OTHER, audit(OTHER, None, "erase")) == 0
    got = conversation_store.get(TENANT, meta.id, now=T0)
    assert got is not None and got.title == "greeting" and got.message_count == 2


def test_list_is_newest_first_and_pages(conversation_store: ConversationStore) -> None:
    ids = [create(conversation_store, at=T0 + timedelta(minutes=i)).id for i in range(5)]
    now = T0 + timedelta(hours=1)
    first = conversation_store.list(TENANT, limit=2, now=now)
    assert [c.id for c in first.items] == [ids[4], ids[3]] and first.next_cursor
    second = conversation_store.list(TENANT, limit=2, cursor=first.next_cursor, now=now)
    assert [c.id for c in second.items] == [ids[2], ids[1]] and second.next_cursor
    third = conversation_store.list(TENANT, limit=2, cursor=second.next_cursor, now=now)
    assert [c.id for c in third.items] == [ids[0]] and third.next_cursor is None
    # A new turn moves a conversation to the top.
    conversation_store.append_turn(
        TENANT,
        ids[0],
        expected_version=1,
        messages=msgs(("user", "bump"), at=now),
        expires_at=None,
        render_version=1,
        now=now,
    )
    assert conversation_store.list(TENANT, limit=1, now=now).items[0].id == ids[0]


def test_rename_and_soft_delete(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store)
    renamed = conversation_store.rename(TENANT, meta.id, "Trip plans ✈️", now=T0)
    assert renamed is not None and renamed.title == "Trip plans ✈️" and renamed.version == 1
    assert conversation_store.soft_delete(TENANT, meta.id, now=T0) is True
    assert conversation_store.get(TENANT, meta.id, now=T0) is None
    assert conversation_store.list(TENANT, now=T0).items == []
    assert conversation_store.soft_delete(TENANT, meta.id, now=T0) is False
    assert conversation_store.rename(TENANT, meta.id, "again", now=T0) is None
    with pytest.raises(ConversationNotFoundError):
        conversation_store.append_turn(
            TENANT, meta.id, expected_version=1, messages=msgs(("user", "x")), expires_at=None, render_version=1
        )


def test_instructions_are_set_cleared_kept_through_turns_and_tenant_scoped(
    conversation_store: ConversationStore,
) -> None:
    meta = create(conversation_store)
    assert meta.instructions is None
    set_ = conversation_store.set_instructions(TENANT, meta.id, "Reply in French.", now=T0)
    assert set_ is not None and set_.instructions == "Reply in French." and set_.version == meta.version
    # A turn appended after it leaves it alone (it is not a turn's to write), and a read returns it.
    conversation_store.append_turn(
        TENANT, meta.id, expected_version=meta.version, messages=msgs(("user", "Salut")), expires_at=None,
        render_version=1, now=T0,
    )  # fmt: skip
    read = conversation_store.get(TENANT, meta.id, now=T0)
    assert read is not None and read.instructions == "Reply in French."
    assert conversation_store.list(TENANT, now=T0).items[0].instructions == "Reply in French."
    assert conversation_store.set_instructions(OTHER, meta.id, "steal", now=T0) is None
    cleared = conversation_store.set_instructions(TENANT, meta.id, None, now=T0)
    assert cleared is not None and cleared.instructions is None
    assert conversation_store.get(TENANT, meta.id, now=T0).instructions is None  # type: ignore[union-attr]
    assert conversation_store.soft_delete(TENANT, meta.id, now=T0)
    assert conversation_store.set_instructions(TENANT, meta.id, "late", now=T0) is None


def test_expired_records_are_hidden_before_the_sweep_runs(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store, expires_in=timedelta(days=30))
    assert conversation_store.get(TENANT, meta.id, now=T0 + timedelta(days=29)) is not None
    late = T0 + timedelta(days=31)
    assert conversation_store.get(TENANT, meta.id, now=late) is None
    assert conversation_store.list(TENANT, now=late).items == []
    with pytest.raises(ConversationNotFoundError):
        conversation_store.append_turn(
            TENANT,
            meta.id,
            expected_version=1,
            messages=msgs(("user", "x")),
            expires_at=None,
            render_version=1,
            now=late,
        )


def test_sweep_candidates_are_exactly_the_due_records(conversation_store: ConversationStore) -> None:
    expiring = create(conversation_store, expires_in=timedelta(days=30))
    forever = create(conversation_store)
    deleted_recently = create(conversation_store, expires_in=timedelta(days=90))
    deleted_long_ago = create(conversation_store, tenant=OTHER, expires_in=timedelta(days=90))
    conversation_store.soft_delete(TENANT, deleted_recently.id, now=T0 + timedelta(days=20))
    conversation_store.soft_delete(OTHER, deleted_long_ago.id, now=T0)
    now = T0 + PURGE_AFTER + timedelta(days=1)
    due = {c.conversation_id: c for c in conversation_store.sweep_candidates(now)}
    assert set(due) == {expiring.id, deleted_long_ago.id}
    assert due[expiring.id].reason(now) is SweepReason.EXPIRED
    assert due[deleted_long_ago.id].reason(now) is SweepReason.PURGED
    assert due[deleted_long_ago.id].tenant_id == OTHER
    assert forever.id not in due


def test_reschedule_moves_a_record_out_of_the_sweep(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store, expires_in=timedelta(days=30))
    now = T0 + timedelta(days=40)
    assert [c.conversation_id for c in conversation_store.sweep_candidates(now)] == [meta.id]
    conversation_store.reschedule(TENANT, meta.id, T0 + timedelta(days=90))
    assert list(conversation_store.sweep_candidates(now)) == []
    assert conversation_store.get(TENANT, meta.id, now=now) is not None


def test_hard_delete_is_idempotent_and_audited(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store, expires_in=timedelta(days=1))
    record = audit(TENANT, meta.id, "expire")
    assert conversation_store.hard_delete(TENANT, meta.id, record) is True
    assert conversation_store.hard_delete(TENANT, meta.id, record) is False
    assert list(conversation_store.sweep_candidates(T0 + timedelta(days=400))) == []
    assert conversation_store.get(TENANT, meta.id, now=T0) is None
    log = conversation_store.audit_log()
    assert [(a.action, a.conversation_id) for a in log].count(("expire", meta.id)) == 1


def test_is_stored_until_the_record_is_removed(conversation_store: ConversationStore) -> None:
    """Deleted and expired records are still stored (the sweep has not run); another tenant's id is not."""
    expiring = create(conversation_store, expires_in=timedelta(days=1))
    deleted = create(conversation_store)
    conversation_store.soft_delete(TENANT, deleted.id, now=T0)
    assert conversation_store.is_stored(TENANT, expiring.id) and conversation_store.is_stored(TENANT, deleted.id)
    assert not conversation_store.is_stored(OTHER, expiring.id)
    assert not conversation_store.is_stored(TENANT, new_conversation_id())
    conversation_store.hard_delete(TENANT, expiring.id, audit(TENANT, expiring.id, "expire"))
    assert not conversation_store.is_stored(TENANT, expiring.id)


def test_erase_tenant_removes_everything_of_that_tenant_only(conversation_store: ConversationStore) -> None:
    kept = create(conversation_store, tenant=OTHER)
    live = create(conversation_store)
    deleted = create(conversation_store)
    conversation_store.soft_delete(TENANT, deleted.id, now=T0)
    assert conversation_store.erase_tenant(TENANT, audit(TENANT, None, "erase")) == 2
    assert conversation_store.get(TENANT, live.id, now=T0) is None
    assert list(conversation_store.export_tenant(TENANT, now=T0)) == []
    assert list(conversation_store.sweep_candidates(T0 + timedelta(days=400))) == []
    assert conversation_store.get(OTHER, kept.id, now=T0) is not None
    assert any(a.action == "erase" and a.tenant_id == TENANT for a in conversation_store.audit_log())


def test_export_lists_live_conversations_with_messages(conversation_store: ConversationStore) -> None:
    a = create(conversation_store, at=T0)
    b = create(conversation_store, at=T0 + timedelta(minutes=1))
    gone = create(conversation_store, at=T0 + timedelta(minutes=2))
    conversation_store.soft_delete(TENANT, gone.id, now=T0)
    exported = list(conversation_store.export_tenant(TENANT, now=T0 + timedelta(hours=1)))
    assert [c.id for c in exported] == [b.id, a.id]
    assert all(c.complete and c.messages[0].content == "hello" for c in exported)


def test_content_round_trips_byte_for_byte(conversation_store: ConversationStore) -> None:
    tricky = '  leading and trailing  \n\ttabs\r\nCRLF — ünïcødé 🚀 {"json": [1,2]} \\ backslash \u0000nul'
    conv_id = new_conversation_id()
    conversation_store.append_turn(
        TENANT,
        conv_id,
        expected_version=0,
        messages=msgs(("system", "be brief"), ("user", tricky)),
        expires_at=None,
        render_version=1,
        now=T0,
    )
    got = conversation_store.get(TENANT, conv_id, now=T0)
    assert got is not None and got.messages[1].content == tricky and got.messages[0].role == "system"


def test_concurrent_writers_never_lose_a_turn(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store)
    writers, turns_each = 4, 5
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(turns_each):
                while True:
                    current = conversation_store.get(TENANT, meta.id, now=T0)
                    assert current is not None
                    try:
                        conversation_store.append_turn(
                            TENANT,
                            meta.id,
                            expected_version=current.version,
                            messages=msgs(("user", f"w{n}-{i}")),
                            expires_at=None,
                            render_version=1,
                            now=T0,
                        )
                        break
                    except VersionConflictError:
                        continue
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = conversation_store.get(TENANT, meta.id, now=T0)
    assert got is not None and got.complete
    assert got.version == 1 + writers * turns_each
    written = [m.content for m in got.messages[2:]]
    assert sorted(written) == sorted(f"w{n}-{i}" for n in range(writers) for i in range(turns_each))
    for n in range(writers):  # each writer's own turns stay in its order
        mine = [c for c in written if c.startswith(f"w{n}-")]
        assert mine == [f"w{n}-{i}" for i in range(turns_each)]


def test_the_record_alone_is_read_as_the_conversation_would_be(conversation_store: ConversationStore) -> None:
    meta = create(conversation_store, expires_in=timedelta(days=30))
    got = conversation_store.get_meta(TENANT, meta.id, now=T0)
    assert got == meta and not hasattr(got, "messages")
    assert conversation_store.get_meta("other-tenant", meta.id, now=T0) is None
    assert conversation_store.get_meta(TENANT, meta.id, now=T0 + timedelta(days=31)) is None  # expired
    assert conversation_store.soft_delete(TENANT, meta.id, now=T0)
    assert conversation_store.get_meta(TENANT, meta.id, now=T0) is None


def test_a_message_with_images_keeps_its_parts_in_order(conversation_store: ConversationStore) -> None:
    from shared.wire.schemas import ImageContentPart, ImageUrl, TextContentPart

    image = "data:image/png;base64,iVBORw0KGgo="
    parts = [
        ImageContentPart(type="image_url", image_url=ImageUrl(url=image, detail="low")),
        TextContentPart(type="text", text="What is this?"),
    ]
    question = StoredMessage(role="user", content="What is this?", content_parts=parts, created_at=T0)
    answer = StoredMessage(role="assistant", content="A cat.", created_at=T0)
    conv_id = new_conversation_id()
    conversation_store.append_turn(
        TENANT, conv_id, expected_version=0, messages=[question, answer], expires_at=None, render_version=1, now=T0
    )
    got = conversation_store.get(TENANT, conv_id, now=T0)
    assert got is not None and got.messages[0].content_parts == parts and got.messages[1].content_parts is None
