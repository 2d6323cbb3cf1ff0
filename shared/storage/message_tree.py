"""The message tree of a conversation: which stored message answers or follows which, and the paths through it.

A message's id is its position in the conversation's stored list, which is append-only: an edit or a regenerate adds a
sibling instead of deleting anything, so an id is stable for the conversation's life. Parents are implicit: a stored
`parent` of None means the message stored just before it (the root for the first one); writers store a parent only at
a branch point. So a conversation that never branched is one chain, stored exactly as before trees existed, and the
list is always a topological order (a parent's id is below its child's: no cycles).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

ROOT = -1  # the parent of a conversation's first message(s)


def implicit_parents(stored: Sequence[int | None]) -> list[int]:
    """Each message's parent id, the implicit ones resolved (None: the message before it)."""
    return [index - 1 if parent is None else parent for index, parent in enumerate(stored)]


def stored_parent(parent: int, index: int) -> int | None:
    """What a writer stores as the parent of the message at `index`: None where it is implicit."""
    return None if parent == index - 1 else parent


@dataclass(frozen=True)
class MessageTree:
    """The tree over `parents` (message id -> its parent's id, ROOT for a first message)."""

    parents: tuple[int, ...]
    _children: dict[int, list[int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        children: dict[int, list[int]] = {}
        for index, parent in enumerate(self.parents):
            children.setdefault(parent, []).append(index)
        object.__setattr__(self, "_children", children)

    @classmethod
    def of(cls, stored: Sequence[int | None]) -> MessageTree:
        return cls(tuple(implicit_parents(stored)))

    def __len__(self) -> int:
        return len(self.parents)

    @property
    def well_formed(self) -> bool:
        """Whether every parent is an earlier message or the root (anything else is a torn or corrupt read)."""
        return all(ROOT <= parent < index for index, parent in enumerate(self.parents))

    def contains(self, node: int) -> bool:
        return 0 <= node < len(self.parents)

    def parent_of(self, node: int) -> int:
        return self.parents[node]

    def children(self, node: int) -> list[int]:
        """The messages under `node` (ROOT: the first messages), in id order."""
        return list(self._children.get(node, ()))

    def sibling_ids(self, node: int) -> list[int]:
        """The children of `node`'s parent, `node` included, in id order: its versions."""
        return self.children(self.parents[node])

    def newest_leaf_under(self, node: int) -> int:
        """The highest-id leaf at or below `node`: where that branch was last written."""
        leaves, stack = [], [node]
        while stack:
            below = self._children.get(current := stack.pop())
            if below:
                stack.extend(below)
            else:
                leaves.append(current)
        return max(leaves)

    def path_ids(self, leaf: int) -> list[int]:
        """The ids from the first message down to `leaf` (ROOT: none)."""
        path: list[int] = []
        while leaf != ROOT:
            path.append(leaf)
            leaf = self.parents[leaf]
        return path[::-1]

    def leaves(self) -> list[int]:
        return [index for index in range(len(self.parents)) if index not in self._children]
