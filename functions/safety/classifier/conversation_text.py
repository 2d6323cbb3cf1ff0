"""What the safety classifier reads of a conversation: the user-side text as a whole and the latest user turn."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

from pydantic import BaseModel

from functions.safety.deobfuscate import deobfuscate
from shared.wire.schemas import ChatMessage

# Roles whose text states the user's (or the integrating developer's) intent. Assistant turns are model output, which
# the post-filter already judged when it was generated.
JUDGED_ROLES = frozenset({"system", "developer", "user"})


class ConversationText(BaseModel):
    turns: list[str]  # judged turns, oldest first
    last: str  # the latest user turn ("" if none)

    @property
    def whole(self) -> str:
        return "\n".join(self.turns)

    def map(self, transform: Callable[[str], str]) -> ConversationText:
        """The same conversation with every turn rewritten by `transform`."""
        return ConversationText(turns=[transform(t) for t in self.turns], last=transform(self.last))

    @cached_property
    def plain(self) -> ConversationText:
        """The conversation with obfuscation undone (`deobfuscate`), worked out once: the regions, the turn reads and
        the sentence reads each read it."""
        return self.map(deobfuscate)

    @classmethod
    def of(cls, messages: Sequence[ChatMessage]) -> ConversationText:
        turns = [m.text() for m in messages if m.role in JUDGED_ROLES and m.text().strip()]
        last = next((m.text() for m in reversed(messages) if m.role == "user"), "")
        return cls(turns=turns, last=last)

    @classmethod
    def of_dicts(cls, messages: Sequence[dict[str, str]]) -> ConversationText:
        """From plain {"role", "content"} dicts (the labelled data files)."""
        return cls.of([ChatMessage(role=m["role"], content=m["content"]) for m in messages])
