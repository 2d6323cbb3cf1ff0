"""The message tree over stored parents: implicit chains, branch points, paths, versions and corrupt reads."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.storage.conversations import Conversation, StoredMessage
from shared.storage.message_tree import ROOT, MessageTree, stored_parent

T0 = datetime(2026, 12, 1, tzinfo=UTC)
# 0 → 1 → 2 → 3; 4 is an edit of 2 (under 1) → 5; 6 regenerates 4's answer; 7 is a new first message (under ROOT).
STORED = [None, None, None, None, 1, None, 4, ROOT]


def conversation(stored: list[int | None], current_node: int | None = None) -> Conversation:
    messages = [
        StoredMessage(role="user" if i % 2 == 0 else "assistant", content=str(i), created_at=T0, parent=p)
        for i, p in enumerate(stored)
    ]
    return Conversation(
        id="conv_" + "0" * 32, tenant_id="t", created_at=T0, updated_at=T0, version=1, message_count=len(stored),
        render_version=1, messages=messages, current_node=current_node,
    )  # fmt: skip


def test_a_conversation_without_parents_is_one_chain() -> None:
    tree = MessageTree.of([None] * 4)
    assert tree.parents == (ROOT, 0, 1, 2) and tree.well_formed
    assert tree.path_ids(3) == [0, 1, 2, 3] and tree.leaves() == [3]
    assert all(tree.sibling_ids(i) == [i] for i in range(4))


def test_branch_points_siblings_and_paths() -> None:
    tree = MessageTree.of(STORED)
    assert tree.children(ROOT) == [0, 7] and tree.children(1) == [2, 4] and tree.children(4) == [5, 6]
    assert tree.sibling_ids(6) == [5, 6] and tree.sibling_ids(7) == [0, 7]
    assert tree.path_ids(6) == [0, 1, 4, 6] and tree.path_ids(3) == [0, 1, 2, 3] and tree.path_ids(ROOT) == []
    assert tree.leaves() == [3, 5, 6, 7]


def test_newest_leaf_under_a_message_is_where_that_branch_was_last_written() -> None:
    tree = MessageTree.of(STORED)
    assert tree.newest_leaf_under(2) == 3 and tree.newest_leaf_under(4) == 6 and tree.newest_leaf_under(1) == 6
    assert tree.newest_leaf_under(0) == 6 and tree.newest_leaf_under(5) == 5


def test_writers_store_a_parent_only_at_a_branch_point() -> None:
    assert stored_parent(3, 4) is None and stored_parent(1, 4) == 1 and stored_parent(ROOT, 0) is None


def test_a_parent_not_before_its_child_is_a_corrupt_read() -> None:
    assert not MessageTree.of([None, 1]).well_formed and not MessageTree.of([None, 5]).well_formed
    assert not conversation([None, None, 3, None]).complete
    assert conversation(STORED).complete


def test_the_active_path_follows_current_node_or_the_newest_message() -> None:
    assert [m.content for m in conversation(STORED).path()] == ["7"]
    assert [m.content for m in conversation(STORED, current_node=6).path()] == ["0", "1", "4", "6"]
    linear = conversation([None] * 3)
    assert linear.path() is linear.messages and linear.leaf() == 2
    assert conversation([]).leaf() == ROOT and conversation([]).path() == []
