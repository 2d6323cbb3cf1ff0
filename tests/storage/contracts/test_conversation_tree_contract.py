"""The message tree on both conversation stores: edits and regenerates add siblings, nothing is removed, the active
branch is kept and switched, and older (linear) data reads as one chain."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.errors import InvalidRequestError
from shared.storage.conversations import ConversationMeta, ConversationStore, StoredMessage, VersionConflictError
from shared.storage.message_tree import ROOT
from tests.storage.contracts.test_conversation_contract import OTHER, T0, TENANT, audit, create, msgs

LATER = T0 + timedelta(minutes=1)


def turn(
    store: ConversationStore, conv_id: str, version: int, *pairs: tuple[str, str], parent: int | None = None
) -> ConversationMeta:
    return store.append_turn(
        TENANT,
        conv_id,
        expected_version=version,
        messages=msgs(*pairs, at=LATER),
        expires_at=None,
        render_version=1,
        now=LATER,
        parent=parent,
    )


def branched(store: ConversationStore) -> str:
    """hello(0) → hi there(1) → q2(2) → a2(3); an edit of q2: q2'(4) → a2'(5); a regenerate of q2': a2''(6)."""
    conv_id = create(store).id
    turn(store, conv_id, 1, ("user", "q2"), ("assistant", "a2"))
    turn(store, conv_id, 2, ("user", "q2'"), ("assistant", "a2'"), parent=1)
    turn(store, conv_id, 3, ("assistant", "a2''"), parent=4)
    return conv_id


def contents(messages: list[StoredMessage]) -> list[str]:
    return [m.content for m in messages]


def test_siblings_are_added_and_nothing_is_removed(conversation_store: ConversationStore) -> None:
    conv_id = branched(conversation_store)
    got = conversation_store.get(TENANT, conv_id, now=LATER)
    assert got is not None and got.complete and (got.version, got.message_count) == (4, 7)
    assert contents(got.messages) == ["hello", "hi there", "q2", "a2", "q2'", "a2'", "a2''"]
    # Parents are stored only at branch points.
    assert [m.parent for m in got.messages] == [None, None, None, None, 1, None, 4]
    tree = got.tree()
    assert tree.sibling_ids(4) == [2, 4] and tree.sibling_ids(6) == [5, 6] and tree.sibling_ids(0) == [0]
    # The last turn is the active branch.
    assert got.current_node is None and contents(got.path()) == ["hello", "hi there", "q2'", "a2''"]
    assert contents(got.path(3)) == ["hello", "hi there", "q2", "a2"]


def test_switching_branches_is_kept_and_reset_by_the_next_turn(conversation_store: ConversationStore) -> None:
    conv_id = branched(conversation_store)
    switched = conversation_store.set_current_node(TENANT, conv_id, 3, now=LATER + timedelta(minutes=1))
    assert switched is not None and switched.current_node == 3
    assert (switched.version, switched.updated_at) == (4, LATER)  # not a turn: nothing moves in the listing
    got = conversation_store.get(TENANT, conv_id, now=LATER)
    assert got is not None and got.current_node == 3 and contents(got.path()) == ["hello", "hi there", "q2", "a2"]
    # A turn with no parent named continues the active branch, and becomes the active one.
    after = turn(conversation_store, conv_id, 4, ("user", "q3"), ("assistant", "a3"))
    assert after.current_node is None
    got = conversation_store.get(TENANT, conv_id, now=LATER)
    assert got is not None and got.current_node is None
    assert [m.parent for m in got.messages[7:]] == [3, None]
    assert contents(got.path()) == ["hello", "hi there", "q2", "a2", "q3", "a3"]


def test_a_sibling_of_the_first_message(conversation_store: ConversationStore) -> None:
    conv_id = create(conversation_store).id
    turn(conversation_store, conv_id, 1, ("user", "hello again"), ("assistant", "hi"), parent=ROOT)
    got = conversation_store.get(TENANT, conv_id, now=LATER)
    assert got is not None and got.tree().sibling_ids(0) == [0, 2]
    assert contents(got.path()) == ["hello again", "hi"]


@pytest.mark.parametrize("parent", [-2, 2, 9])
def test_a_parent_that_is_not_stored_is_refused_and_changes_nothing(
    conversation_store: ConversationStore, parent: int
) -> None:
    conv_id = create(conversation_store).id
    with pytest.raises(InvalidRequestError):
        turn(conversation_store, conv_id, 1, ("user", "x"), ("assistant", "y"), parent=parent)
    got = conversation_store.get(TENANT, conv_id, now=LATER)
    assert got is not None and (got.version, contents(got.messages)) == (1, ["hello", "hi there"])


@pytest.mark.parametrize("node", [-1, 7, 100])
def test_switching_to_a_message_that_is_not_stored_is_refused(conversation_store: ConversationStore, node: int) -> None:
    conv_id = branched(conversation_store)
    with pytest.raises(InvalidRequestError):
        conversation_store.set_current_node(TENANT, conv_id, node, now=LATER)
    got = conversation_store.get(TENANT, conv_id, now=LATER)
    assert got is not None and got.current_node is None


def test_another_tenant_cannot_switch_and_a_deleted_conversation_is_gone(conversation_store: ConversationStore) -> None:
    conv_id = branched(conversation_store)
    assert conversation_store.set_current_node(OTHER, conv_id, 3, now=LATER) is None
    conversation_store.soft_delete(TENANT, conv_id, now=LATER)
    assert conversation_store.set_current_node(TENANT, conv_id, 3, now=LATER) is None


def test_a_tail_rewrite_keeps_parents_and_the_active_branch(conversation_store: ConversationStore) -> None:
    """The Responses API forgets a record by rewriting the tail with `keep`: positions, parents and the switch stay."""
    conv_id = branched(conversation_store)
    conversation_store.set_current_node(TENANT, conv_id, 3, now=LATER)
    got = conversation_store.get(TENANT, conv_id, now=LATER)
    assert got is not None
    tail = [m.model_copy(update={"content": m.content + "!"}) for m in got.messages[4:]]
    conversation_store.append_turn(
        TENANT, conv_id, expected_version=4, messages=tail, expires_at=None, render_version=1, now=LATER, keep=4
    )
    again = conversation_store.get(TENANT, conv_id, now=LATER)
    assert again is not None and again.complete and again.current_node == 3
    assert [m.parent for m in again.messages] == [m.parent for m in got.messages]
    assert contents(again.messages)[4:] == ["q2'!", "a2'!", "a2''!"]


def test_two_writers_under_one_message_are_both_kept_as_siblings(conversation_store: ConversationStore) -> None:
    """Two tabs edit the same message: the loser of the version race retries on top and is kept as a sibling."""
    conv_id = create(conversation_store).id
    turn(conversation_store, conv_id, 1, ("user", "q2"), ("assistant", "a2"))
    turn(conversation_store, conv_id, 2, ("user", "tab one"), ("assistant", "one"), parent=1)
    with pytest.raises(VersionConflictError):
        turn(conversation_store, conv_id, 2, ("user", "tab two"), ("assistant", "two"), parent=1)
    turn(conversation_store, conv_id, 3, ("user", "tab two"), ("assistant", "two"), parent=1)
    got = conversation_store.get(TENANT, conv_id, now=LATER)
    assert got is not None and got.tree().sibling_ids(2) == [2, 4, 6]
    assert contents(got.path()) == ["hello", "hi there", "tab two", "two"]


def test_branches_are_exported_and_erased_with_their_conversation(conversation_store: ConversationStore) -> None:
    conv_id = branched(conversation_store)
    (exported,) = list(conversation_store.export_tenant(TENANT, now=LATER))
    assert exported.id == conv_id and exported.complete and len(exported.messages) == 7
    assert conversation_store.hard_delete(TENANT, conv_id, audit(TENANT, conv_id, "delete"))
    assert conversation_store.get(TENANT, conv_id, now=LATER) is None
    other = branched(conversation_store)
    assert conversation_store.erase_tenant(TENANT, audit(TENANT, None, "erase")) == 1
    assert conversation_store.get(TENANT, other, now=LATER) is None
