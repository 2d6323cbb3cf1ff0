"""The conversation storage contract: records, errors and the `ConversationStore` protocol both adapters implement.

Versioning: a conversation's `version` counts its appended turns. `append_turn(expected_version=0)` creates it;
every later append must name the version it read, so two concurrent writers can never lose a turn — the loser
gets `VersionConflictError` and retries on top of the winner.

Retention: each record carries `expires_at` (inactivity deadline, None = kept until deleted) and `deleted_at`
(soft delete). Reads hide both. `sweep_at` is when the retention sweep should look at the record: the earlier of
`expires_at` and `deleted_at + PURGE_AFTER`.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from shared.errors import FleetchatError, InvalidRequestError, ServiceUnavailableError
from shared.storage.message_tree import ROOT, MessageTree, stored_parent
from shared.wire.responses_api import ResponseRecord
from shared.wire.retrieval_api import Citation
from shared.wire.schemas import ContentPart
from shared.wire.server_tool_runs import ServerToolRunView
from shared.wire.tools_api import ToolCall

PURGE_AFTER = timedelta(days=30)
CONVERSATION_ID_RE = re.compile(r"^conv_[0-9a-f]{32}$")
# A listing position: the last item's fixed-width updated_at and id (the order both adapters list in).
LIST_POSITION_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z#(conv_[0-9a-f]{32})$")
MAX_TITLE_CHARS = 200

StoredRole = Literal["system", "developer", "user", "assistant", "tool"]


def new_conversation_id() -> str:
    return f"conv_{uuid.uuid4().hex}"


def check_conversation_id(value: str, param: str = "conversation_id") -> str:
    """A well-formed id or a 400 — never a lookup with a malformed key."""
    if not CONVERSATION_ID_RE.fullmatch(value):
        message = f"'{value[:80]}' is not a valid conversation id (conv_ + 32 hex digits)."
        raise InvalidRequestError(message, param=param)
    return value


def check_keep(keep: int, stored: int) -> int:
    """How many stored messages a tail rewrite keeps: 0..stored, else a 400 (nothing is changed)."""
    if not 0 <= keep <= stored:
        raise InvalidRequestError(f"keep must be between 0 and the conversation's {stored} stored messages.")
    return keep


def anchored(messages: list[StoredMessage], parent: int, start: int) -> list[StoredMessage]:
    """A turn's messages as stored from id `start` on, its first one under `parent` (an earlier id or ROOT; anything
    else is a 400 and nothing is stored). Parents are explicit only at branch points (shared/storage/message_tree.py).
    """
    if not ROOT <= parent < start:
        raise InvalidRequestError(
            f"The turn must follow one of the conversation's {start} stored messages.", param="parent_message_id"
        )
    first = messages[0].model_copy(update={"parent": stored_parent(parent, start)})
    return [first, *(m.model_copy(update={"parent": None}) for m in messages[1:])]


def check_node(node: int, stored: int, param: str = "current_node") -> int:
    """A stored message's id (0..stored-1), else a 400 naming `param` (nothing is changed)."""
    if not 0 <= node < stored:
        raise InvalidRequestError(
            f"{param} must name one of the conversation's {stored} stored messages (ids 0 to {stored - 1}).",
            param=param,
        )
    return node


def encode_list_cursor(position: str) -> str:
    """An opaque `after` cursor for a listing position `{updated_at}#{conversation_id}`."""
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def decode_list_cursor(cursor: str) -> tuple[str, str]:
    """(position, conversation id) of a cursor this API returned; anything else is a 400."""
    try:
        position = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        position = ""
    if not (match := LIST_POSITION_RE.fullmatch(position)):
        raise InvalidRequestError("Invalid pagination cursor.", param="after")
    return position, match.group(1)


class StoredMessage(BaseModel):
    role: StoredRole
    content: str  # the text (a message with images: its text parts joined)
    # A user message with images: its content parts as sent, in order, each image a checked data URI
    # (functions/chat/images.py); rendered as parts. None: text only (`content` is the whole message).
    content_parts: list[ContentPart] | None = None
    created_at: datetime
    # The id (stored position) of the message this one follows, stored only at a branch point (an edit's or a
    # regenerate's first message; ROOT under the root); None: the message stored just before it
    # (shared/storage/message_tree.py).
    parent: int | None = Field(default=None, ge=ROOT)
    # Assistant messages: how the answer ended ("stop", "length", "content_filter", or "stopped" when the client
    # stopped it and the partial answer was kept); None for other roles and for turns stored before it was kept.
    finish_reason: str | None = None
    # Assistant messages: the model (pool) that answered (the fallback pool when one answered) and the safety
    # policies of the turn (the pre-filter's on the conversation, the post-filter's on the answer); None for other
    # roles and for answers stored before they were kept. Metadata: never rendered into a prompt.
    model: str | None = None
    pre_policy_version: str | None = None
    post_policy_version: str | None = None
    # Assistant messages: the model version that answered (`hf_repo@revision` deployed, the GGUF locally; a canary's
    # version when the pool's canary answered); None for other roles and for answers stored before it was kept.
    model_version: str | None = None
    # Tool turns (render version 2 on): an assistant message's tool calls (its content then may be ""), and the call a
    # `tool` message answers. Rendered, so kept byte for byte (arguments as the model wrote them).
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    # Assistant messages answered with the gateway's own tools: each call as the client saw it (its code, output and
    # files; docs/server-tools.md). Metadata: never rendered into a prompt.
    server_tool_runs: list[ServerToolRunView] | None = None
    # Assistant messages answered with retrieval: the passages the model was given (file, chunk, offsets, score; not
    # their text, which stays with the file). Metadata: never rendered into a prompt.
    citations: list[Citation] | None = None
    # Assistant messages answered through the Responses API with `store: true`: the response's id and what a
    # retrieved Response repeats of its request (functions/responses). Metadata: never rendered into a prompt.
    response: ResponseRecord | None = None


MAX_INSTRUCTIONS_CHARS = 1500  # custom instructions, the account's and a conversation's (as ChatGPT's fields)


class ConversationMeta(BaseModel):
    id: str
    tenant_id: str
    title: str | None = None
    # The user's instructions for this conversation, rendered into its prompt in a fixed place
    # (functions/chat/instructions.py); None: none.
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS_CHARS)
    created_at: datetime
    updated_at: datetime
    version: int = Field(ge=1)
    message_count: int = Field(ge=0)
    render_version: int = Field(ge=1)
    expires_at: datetime | None = None
    deleted_at: datetime | None = None
    # The active branch's last message (its id), set by switching branches; None: the newest stored message. Every
    # turn resets it (the branch just written is the active one).
    current_node: int | None = Field(default=None, ge=0)

    def visible_at(self, now: datetime) -> bool:
        return self.deleted_at is None and (self.expires_at is None or self.expires_at > now)


class Conversation(ConversationMeta):
    """A conversation with every stored message, in id order (all branches: `path()` is the active one)."""

    messages: list[StoredMessage]

    @property
    def complete(self) -> bool:
        """False when the stored body holds fewer messages than the record says, or a message names a parent that
        is not before it (a torn, stale or corrupt read)."""
        return len(self.messages) == self.message_count and self.tree().well_formed

    def tree(self) -> MessageTree:
        return MessageTree.of([m.parent for m in self.messages])

    def leaf(self) -> int:
        """The active branch's last message id (ROOT for an empty conversation)."""
        node = self.current_node
        return node if node is not None and node < len(self.messages) else len(self.messages) - 1

    def path(self, leaf: int | None = None) -> list[StoredMessage]:
        """The messages from the first down to `leaf` (default: the active branch); the history a prompt renders."""
        if self.current_node is None and leaf is None and all(m.parent is None for m in self.messages):
            return self.messages  # one chain: the common case, read without building the tree
        tree = self.tree()
        if not tree.well_formed:
            raise StoreUnavailableError("The stored conversation is inconsistent right now; try again shortly.")
        return [self.messages[i] for i in tree.path_ids(self.leaf() if leaf is None else leaf)]

    def check_node(self, node: int, param: str) -> int:
        """A stored message's id, or a 400 naming `param` (nothing is changed)."""
        return check_node(node, len(self.messages), param)


class ConversationPage(BaseModel):
    items: list[ConversationMeta]
    next_cursor: str | None = None


class SweepReason(StrEnum):
    EXPIRED = "expired"
    PURGED = "purged"


class SweepCandidate(BaseModel):
    tenant_id: str
    conversation_id: str
    updated_at: datetime
    expires_at: datetime | None
    deleted_at: datetime | None

    def reason(self, now: datetime) -> SweepReason:
        if self.deleted_at is not None and self.deleted_at + PURGE_AFTER <= now:
            return SweepReason.PURGED
        return SweepReason.EXPIRED


class AuditRecord(BaseModel):
    """Who removed what and when. Never content, never titles."""

    at: datetime
    actor: str
    action: str
    tenant_id: str
    conversation_id: str | None = None
    detail: str = ""


def sweep_time(expires_at: datetime | None, deleted_at: datetime | None) -> datetime | None:
    """When the sweep must next look at a record (None: never, until something changes)."""
    times = [t for t in (expires_at, None if deleted_at is None else deleted_at + PURGE_AFTER) if t is not None]
    return min(times) if times else None


class ConversationNotFoundError(FleetchatError):
    status_code = 404
    error_type = "invalid_request_error"
    default_code = "conversation_not_found"

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"No conversation found with id '{conversation_id}'.", param="conversation_id")


class VersionConflictError(FleetchatError):
    status_code = 409
    error_type = "invalid_request_error"
    default_code = "conversation_conflict"

    def __init__(self, conversation_id: str, expected_version: int) -> None:
        super().__init__(
            f"Conversation '{conversation_id}' changed since version {expected_version}; reload and retry.",
            param="conversation_id",
        )
        self.expected_version = expected_version


class StoreUnavailableError(ServiceUnavailableError):
    """The backing store cannot be reached (after retries). Never raised for a bad request."""

    def __init__(self, message: str = "Storage is unavailable right now.") -> None:
        super().__init__(message, retry_after_s=5, code="store_unavailable")


class ConversationStore(Protocol):
    """Tenant-scoped conversation storage. Every method takes the tenant id; another tenant's id finds nothing.

    `now` parameters exist so tests and the sweep can move time; they default to the wall clock.
    Adapters raise `StoreUnavailableError` when the backend is down and never for bad input.
    """

    def append_turn(
        self,
        tenant_id: str,
        conversation_id: str,
        *,
        expected_version: int,
        messages: list[StoredMessage],
        expires_at: datetime | None,
        render_version: int,
        title: str | None = None,
        now: datetime | None = None,
        loaded: Conversation | None = None,
        keep: int | None = None,
        parent: int | None = None,
    ) -> ConversationMeta:
        """Append `messages` durably and return the new record (version = expected_version + 1).

        `parent`: the id of the stored message the turn follows (ROOT: a new first message); None: the active
        branch's last message. An edit or a regenerate names an earlier one and so starts a sibling branch; nothing
        is ever removed. The new turn becomes the active branch (`current_node` is reset).

        `keep`: rewrite the stored list's tail instead: keep the first `keep` messages and store `messages` after
        them as given (parents and the active branch unchanged; the Responses API drops a record this way). More than
        the stored count is an InvalidRequestError.

        expected_version=0 creates the conversation (`title` and `render_version` are used only then).
        `loaded`: the conversation as the caller just read it at `expected_version`; an adapter that needs the
        stored messages may use it instead of reading them again (the write stays conditional on the version).
        Raises VersionConflictError when the stored version is not `expected_version` (or the id exists on create),
        ConversationNotFoundError when it does not exist, is deleted or has expired (expected_version > 0).
        """
        ...

    def get(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> Conversation | None:
        """The live conversation with its messages; None if unknown, another tenant's, deleted or expired."""
        ...

    def get_meta(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> ConversationMeta | None:
        """The live conversation's record without its messages (one small read); None as `get` would be."""
        ...

    def list(
        self, tenant_id: str, *, limit: int = 20, cursor: str | None = None, now: datetime | None = None
    ) -> ConversationPage:
        """Live conversations, most recently updated first; `next_cursor` continues the listing."""
        ...

    def rename(
        self, tenant_id: str, conversation_id: str, title: str, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        """Set the title of a live conversation; None if it is not visible to this tenant."""
        ...

    def set_instructions(
        self, tenant_id: str, conversation_id: str, instructions: str | None, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        """Set (None: clear) a live conversation's custom instructions; None if it is not visible to this tenant. Like
        a rename, not a turn: the version does not move."""
        ...

    def set_current_node(
        self, tenant_id: str, conversation_id: str, node: int, *, now: datetime | None = None
    ) -> ConversationMeta | None:
        """Make the branch ending at message `node` the active one; None if the conversation is not visible to this
        tenant. A stored id it does not hold is an InvalidRequestError. Like a rename, not a turn: the version and
        `updated_at` do not move (ids are never removed, so no version condition is needed: the last switch wins)."""
        ...

    def soft_delete(self, tenant_id: str, conversation_id: str, *, now: datetime | None = None) -> bool:
        """Hide a live conversation now; the sweep purges it PURGE_AFTER later. False if it was not visible."""
        ...

    def reschedule(self, tenant_id: str, conversation_id: str, expires_at: datetime | None) -> None:
        """Move a record's expiry (the sweep does this when a tenant's retention policy changed)."""
        ...

    def sweep_candidates(self, now: datetime) -> Iterator[SweepCandidate]:
        """Every record, of any tenant, whose sweep time has come (expired or due for purge)."""
        ...

    def is_stored(self, tenant_id: str, conversation_id: str) -> bool:
        """Whether the conversation's record is still kept, deleted or expired ones included (not yet swept or, on
        DynamoDB, removed by its TTL backstop); the sweep uses it to find feedback that outlived its conversation."""
        ...

    def hard_delete(self, tenant_id: str, conversation_id: str, audit: AuditRecord) -> bool:
        """Remove the record and every stored object of it, then keep `audit`. Idempotent: False if already gone."""
        ...

    def erase_tenant(self, tenant_id: str, audit: AuditRecord) -> int:
        """Remove every conversation of the tenant (live, deleted, expired) and all objects; returns how many."""
        ...

    def export_tenant(self, tenant_id: str, *, now: datetime | None = None) -> Iterator[Conversation]:
        """Every live conversation of the tenant with its messages, most recently updated first."""
        ...

    def audit_log(self, *, limit: int = 100) -> list[AuditRecord]:
        """The most recent audit records, newest first."""
        ...

    def close(self) -> None: ...
