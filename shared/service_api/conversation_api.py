"""Wire models of the conversation endpoints (`/v1/conversations`, `/v1/account`); times are Unix seconds."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.storage.conversation_search import MessageHit
from shared.storage.conversations import (
    MAX_INSTRUCTIONS_CHARS,
    MAX_TITLE_CHARS,
    Conversation,
    ConversationMeta,
    StoredMessage,
    StoreUnavailableError,
)
from shared.storage.message_tree import ROOT
from shared.wire.retrieval_api import Citation
from shared.wire.schemas import ContentPart
from shared.wire.server_tool_runs import ServerToolRunView
from shared.wire.tools_api import ToolCall


def _unix(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp())


class MessageObject(BaseModel):
    id: int = Field(description="The message's id in its conversation: its place in the stored list (never reused).")
    parent_id: int | None = Field(description="The message it follows; null: a first message.")
    sibling_ids: list[int] = Field(
        description="Its versions: every message that follows the same parent, itself included, oldest first (an "
        "edit or a regenerate adds one; docs/conversations.md, 'Branches')."
    )
    role: str
    content: str
    content_parts: list[ContentPart] | None = Field(
        default=None,
        description="A user message with images: its parts as sent, in order (text, and each image as the checked data "
        "URI the model saw); null: text only (`content` is the message).",
    )
    created_at: int
    tool_calls: list[ToolCall] | None = Field(default=None, description="An assistant message's tool calls.")
    tool_call_id: str | None = Field(default=None, description="The tool call a `tool` message answers.")
    finish_reason: str | None = Field(
        default=None, description='How an answer ended: "stop", "length", "content_filter", or "stopped" by the user.'
    )
    model: str | None = Field(
        default=None,
        description="The model that answered (an assistant message); null for other roles and older answers.",
    )
    model_version: str | None = Field(
        default=None,
        description="The model version that answered (a canary's when the pool's canary did); null for other roles "
        "and older answers.",
    )
    citations: list[Citation] | None = Field(
        default=None, description="An answer given with retrieval: the passages it was given (docs/files.md)."
    )
    server_tool_runs: list[ServerToolRunView] | None = Field(
        default=None,
        description="An answer the gateway's own tools helped give: each call as the client saw it "
        "(docs/server-tools.md).",
    )
    response_id: str | None = Field(
        default=None,
        description="An answer stored through the Responses API: its response id (GET /v1/responses/{id}); null "
        "otherwise (docs/responses.md).",
    )


class TextSpan(BaseModel):
    start: int = Field(description="The first character (an offset into `snippet`).")
    end: int = Field(description="One past the last character.")


class ConversationSearchHit(BaseModel):
    object: Literal["conversation.search_hit"] = "conversation.search_hit"
    conversation_id: str
    title: str | None = Field(description="The conversation's title.")
    message_id: int = Field(
        description='The message the words were found in (any branch: `PATCH {"current_node": id}` shows it).'
    )
    role: Literal["user", "assistant"]
    created_at: int = Field(description="When the message was written.")
    updated_at: int = Field(description="When the conversation last changed.")
    snippet: str = Field(description="About 180 characters of the message around its first match, on one line.")
    highlights: list[TextSpan] = Field(description="Where the searched words are in `snippet`, in order.")
    score: float = Field(description="BM25 relevance: hits come best first.")

    @classmethod
    def of(
        cls, meta: ConversationMeta, hit: MessageHit, snippet: str, highlights: list[TextSpan]
    ) -> ConversationSearchHit:
        return cls(
            conversation_id=meta.id,
            title=meta.title,
            message_id=hit.message_id,
            role="user" if hit.role == "user" else "assistant",
            created_at=int(hit.created_at.timestamp()),
            updated_at=int(meta.updated_at.timestamp()),
            snippet=snippet,
            highlights=highlights,
            score=hit.score,
        )


class ConversationSearchResults(BaseModel):
    object: Literal["list"] = "list"
    query: str
    data: list[ConversationSearchHit]


class ConversationObject(BaseModel):
    id: str
    object: Literal["conversation"] = "conversation"
    title: str | None
    created_at: int
    updated_at: int
    version: int
    message_count: int
    expires_at: int | None = Field(description="When it is deleted for inactivity; null: kept until deleted.")
    instructions: str | None = Field(
        default=None, description="The user's instructions for this conversation (docs/conversations.md)."
    )
    current_node: int | None = Field(
        default=None, description="The last message of the active branch (null: no messages yet)."
    )

    @classmethod
    def of(cls, meta: ConversationMeta) -> ConversationObject:
        leaf = meta.current_node if meta.current_node is not None else meta.message_count - 1
        return cls(
            current_node=leaf if leaf >= 0 else None,
            id=meta.id,
            title=meta.title,
            instructions=meta.instructions,
            created_at=int(meta.created_at.timestamp()),
            updated_at=int(meta.updated_at.timestamp()),
            version=meta.version,
            message_count=meta.message_count,
            expires_at=_unix(meta.expires_at),
        )


class ConversationDetail(ConversationObject):
    messages: list[MessageObject] = Field(description="The active branch: from the first message to `current_node`.")
    branches: list[MessageObject] = Field(
        default_factory=list, description="Every other stored message (other versions and what follows them), by id."
    )
    # Stored messages (after the system prompt) the last answer's prompt left out: the conversation outgrew its
    # model's context (docs/conversations.md, "Long conversations"). 0: the model saw them all.
    out_of_context: int = 0

    @classmethod
    def of(cls, meta: ConversationMeta) -> ConversationDetail:
        assert isinstance(meta, Conversation)
        tree = meta.tree()
        if not tree.well_formed:
            raise StoreUnavailableError("The stored conversation is inconsistent right now; try again shortly.")
        active = set(tree.path_ids(meta.leaf()))

        def message(index: int, m: StoredMessage) -> MessageObject:
            parent = tree.parent_of(index)
            return MessageObject(
                id=index,
                parent_id=None if parent == ROOT else parent,
                sibling_ids=tree.sibling_ids(index),
                role=m.role,
                content=m.content,
                content_parts=m.content_parts,
                created_at=int(m.created_at.timestamp()),
                finish_reason=m.finish_reason,
                model=m.model,
                model_version=m.model_version,
                tool_calls=m.tool_calls,
                tool_call_id=m.tool_call_id,
                citations=m.citations,
                server_tool_runs=m.server_tool_runs,
                response_id=m.response.id if m.response is not None else None,
            )

        every = [message(i, m) for i, m in enumerate(meta.messages)]
        on_path = [o for o in every if o.id in active]  # ids grow down a path: id order is path order
        branches = [o for o in every if o.id not in active]
        return cls(**ConversationObject.of(meta).model_dump(), messages=on_path, branches=branches)


class ConversationList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ConversationObject]
    has_more: bool
    next_cursor: str | None = Field(description="Pass as `after` to get the next page.")


class ConversationUpdate(BaseModel):
    """A rename, new instructions (null or "" clears them), a switch of the active branch; at least one."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, min_length=1, max_length=MAX_TITLE_CHARS)
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS_CHARS)
    current_node: int | None = Field(
        default=None,
        ge=0,
        description="Make the branch through this message the active one (its newest message becomes "
        "`current_node`); docs/conversations.md, 'Branches'.",
    )

    @field_validator("title")
    @classmethod
    def _not_blank(cls, title: str | None) -> str | None:
        if title is None:
            raise ValueError("title cannot be null")
        title = " ".join(title.split())
        if not title:
            raise ValueError("title must not be blank")
        return title

    @model_validator(mode="after")
    def _something(self) -> ConversationUpdate:
        if not self.model_fields_set & {"title", "instructions", "current_node"}:
            raise ValueError("send `title`, `instructions` or `current_node` (at least one)")
        if "current_node" in self.model_fields_set and self.current_node is None:
            raise ValueError("current_node cannot be null")
        return self


class InstructionsObject(BaseModel):
    """The account's custom instructions: they end the system prompt of every conversation it stores."""

    object: Literal["account.instructions"] = "account.instructions"
    instructions: str | None


class InstructionsUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instructions: str | None = Field(max_length=MAX_INSTRUCTIONS_CHARS, description='null or "" clears them')


class ConversationDeleted(BaseModel):
    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


class AccountDataDeleted(BaseModel):
    object: Literal["account.data.deleted"] = "account.data.deleted"
    deleted_conversations: int
    deleted_feedback: int = 0  # ratings of the tenant's answers
