"""One chat turn against a stored conversation: load and render the history, then persist the turn durably.

A conversation is a tree (shared/storage/message_tree.py): a turn continues the active branch, or the message the
client names (`parent_message_id`); an edit (`replace_from`) adds a sibling of the user message it names, and a
regenerate (the same text again) adds a sibling answer; nothing stored is ever removed. The prompt renders the path
from the first message down to where the turn goes, so every branch renders byte-stably.

A history longer than its pool's context is rendered from a later message on (shared/context_window.py: the oldest
turns leave in steps that keep consecutive prompts' prefix); the response says how many stored messages are out of
context (`conversation.out_of_context`, header `x-fleetchat-out-of-context`). The stored conversation keeps them all.

`begin` runs before routing (it may refuse with 400/404), `finish` after the worker answered and before the client
sees the end of the response (`[DONE]` or the JSON body). If the store is down the turn is still answered, single-turn,
and the response says it was not saved; it is never dropped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from anyio import to_thread

from functions.accounts.retention import expiry_for
from functions.chat.instructions import guidance_text, leaving_room
from functions.chat.memory import memory_in_use
from shared.context_window import ContextWindow, pinned_count, window_start
from shared.errors import InvalidRequestError
from shared.rendering import CURRENT_RENDER_VERSION, RenderedMessages, render
from shared.storage.accounts import Tenant
from shared.storage.conversations import (
    Conversation,
    ConversationMeta,
    ConversationNotFoundError,
    ConversationStore,
    StoredMessage,
    StoreUnavailableError,
    VersionConflictError,
    check_conversation_id,
    new_conversation_id,
)
from shared.storage.timestamps import utc_now
from shared.wire.responses_api import ResponseRecord, ResponseUsageRecord
from shared.wire.retrieval_api import Citation
from shared.wire.schemas import ChatCompletionRequest, ChatMessage
from shared.wire.server_tool_runs import ServerToolRunView
from shared.wire.tools_api import ToolCall

if TYPE_CHECKING:
    from functions.control.request_accounting import TokenUsage

log = logging.getLogger("fleetchat.conversations")

CONVERSATION_HEADER = "x-conversation-id"
HISTORY_HEADER = "x-fleetchat-history"
STORED_HEADER = "x-fleetchat-stored"
OUT_OF_CONTEXT_HEADER = "x-fleetchat-out-of-context"
TITLE_CHARS = 60
APPEND_ATTEMPTS = 3


class History(StrEnum):
    NEW = "new"  # a new conversation (store: true)
    LOADED = "loaded"  # the stored history was rendered in front of the new turn
    COLD = "cold"  # the stored history was inconsistent (shorter than its record): answered without it
    UNAVAILABLE = "unavailable"  # the store could not be reached: answered single-turn, not saved


@dataclass
class Turn:
    tenant: Tenant
    conversation_id: str
    expected_version: int
    render_version: int
    new_messages: list[StoredMessage]
    rendered: RenderedMessages
    history: History
    title: str | None = None
    loaded: Conversation | None = None  # the stored conversation this turn continues, as read in `begin`
    # The stored message this turn follows (the last of the path its prompt rendered; ROOT: a new first message);
    # None: the active branch's last message when it is stored. `pinned`: the client named it (an edit, a regenerate,
    # `parent_message_id`), so a retry on top of a concurrent writer keeps it; otherwise ours goes after theirs.
    parent: int | None = None
    pinned: bool = False
    citations: list[Citation] | None = None  # retrieval's citations, stored with the answer (functions/retrieval)
    response: ResponseRecord | None = None  # the Responses API's record, stored with the answer (functions/responses)
    # A turn that continues exactly the first `fork_at` stored messages (a Responses API continuation): if another
    # turn was appended meanwhile, this one is never put after it; it starts the conversation `fork_to` instead, with
    # those messages as its history (two continuations of one response are two branches).
    fork_to: str | None = None
    fork_at: int | None = None
    out_of_context: int = 0  # stored messages (after the system prompt) this turn's prompt leaves out
    message_ids: list[int] | None = None  # the stored ids of this turn's messages, once stored

    def apply(self, request: ChatCompletionRequest) -> ChatCompletionRequest:
        """The request as the worker must see it: the rendered conversation instead of the client's messages."""
        return request.model_copy(update={"messages": [ChatMessage(**m) for m in self.rendered]})

    def headers(self) -> dict[str, str]:
        headers = {CONVERSATION_HEADER: self.conversation_id, HISTORY_HEADER: self.history.value}
        if self.out_of_context:
            headers[OUT_OF_CONTEXT_HEADER] = str(self.out_of_context)
        return headers

    def summary(self, stored: bool, version: int | None) -> dict[str, Any]:
        """The `conversation` extension object of the response body (and of a stream's last chunk); with
        `out_of_context` when the prompt left the oldest stored messages out."""
        summary: dict[str, Any] = {
            "id": self.conversation_id, "stored": stored, "history": self.history.value, "version": version
        }  # fmt: skip
        if stored and self.message_ids is not None:
            summary["message_ids"] = self.message_ids
        return {**summary, "out_of_context": self.out_of_context} if self.out_of_context else summary


@dataclass(frozen=True)
class AnsweredBy:
    """Who answered a turn, stored with the answer (metadata, never rendered): the model (pool) that generated it and
    the safety policies in force for the turn (the pre-filter's on the conversation, the post-filter's on the
    answer)."""

    model: str
    pre_policy_version: str | None = None
    post_policy_version: str | None = None
    model_version: str | None = None  # the version that answered (functions/control/canary.py)
    usage: TokenUsage | None = None  # its usage (a stored response keeps it in its record)


def _title_from(messages: list[StoredMessage]) -> str | None:
    first_user = next((m.content for m in messages if m.role == "user" and m.content.strip()), None)
    if first_user is None:
        return None
    line = " ".join(first_user.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


def _stored(messages: list[ChatMessage]) -> list[StoredMessage]:
    now = utc_now()
    return [
        StoredMessage(
            role=m.role,
            content=m.text(),
            content_parts=m.content if m.images() and isinstance(m.content, list) else None,
            created_at=now,
            tool_calls=m.tool_calls,
            tool_call_id=m.tool_call_id,
        )
        for m in messages
    ]


def _new_turn_only(history: list[StoredMessage], sent: list[StoredMessage]) -> list[StoredMessage]:
    """What the client adds. Clients that resend the whole history are accepted: the stored prefix is dropped."""
    if len(sent) > len(history) and all(
        (h.role, h.content, h.content_parts, h.tool_call_id) == (s.role, s.content, s.content_parts, s.tool_call_id)
        for h, s in zip(history, sent, strict=False)
    ):
        sent = sent[len(history) :]
    if any(m.role not in ("user", "tool") for m in sent):
        raise InvalidRequestError(
            "A request that continues a conversation sends only its new user message(s) or tool results; the "
            "stored history (system prompt included) is added by the service.",
            param="messages",
        )
    return sent


def _same_turns(stored: list[StoredMessage], read: list[StoredMessage] | None) -> bool:
    """Whether `stored` holds the turns `read` held (who said what; metadata such as a response record may differ).
    Without what was read (another gateway finishing the answer), the count alone is compared."""
    if read is None:
        return True
    return [(m.role, m.content, m.tool_call_id) for m in stored] == [(m.role, m.content, m.tool_call_id) for m in read]


def _windowed(
    history: list[StoredMessage], new: list[StoredMessage], window: ContextWindow | None
) -> tuple[list[StoredMessage], int]:
    """The history the prompt keeps (the pinned system prompt, then from the window's start) and how many stored
    messages it leaves out."""
    if window is None or not history:
        return history, 0
    pinned = pinned_count(history)
    start = min(window_start([*history, *new], window), len(history))
    if start <= pinned:
        return history, 0
    return [*history[:pinned], *history[start:]], start - pinned


class ConversationTurns:
    def __init__(self, store: ConversationStore, context_tokens: Mapping[str, int] | None = None) -> None:
        self.store = store
        self.context_tokens = dict(context_tokens or {})  # each pool's context length (functions/app.py)

    def window_for(self, pool: str | None) -> ContextWindow | None:
        context = self.context_tokens.get(pool or "")
        return ContextWindow.for_context(context) if context else None

    def out_of_context(self, conversation: Conversation, tenant: Tenant | None = None) -> int:
        """How many stored messages the last answer's prompt left out (for the pool that answered it): what that
        answer's `out_of_context` said, read back for a conversation opened later (with the instructions in force
        now)."""
        messages = conversation.path() if conversation.complete else []
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)
        guidance = guidance_text(
            tenant.instructions if tenant else None, conversation.instructions, memory_in_use(tenant) if tenant else ()
        )
        window = None if last is None else leaving_room(self.window_for(messages[last].model), guidance)
        if last is None or window is None:
            return 0
        prompt = messages[:last]
        return max(0, min(window_start(prompt, window), len(prompt)) - pinned_count(prompt))

    async def begin(
        self,
        tenant: Tenant,
        request: ChatCompletionRequest,
        header_id: str | None,
        *,
        new_id: str | None = None,
        loaded: Conversation | None = None,
        fork_to: str | None = None,
        pool: str | None = None,
    ) -> Turn | None:
        """The turn this request belongs to, or None for a stateless request. `new_id`: the id a new conversation
        gets (a Responses API id names it before the turn is stored); a fresh one by default. `loaded`: the
        conversation as the caller read it, continued exactly as read; `fork_to`: where the turn goes if the
        conversation moved on before it is stored (Turn.fork_to). `pool`: the requested model's pool, whose
        context the rendered history is kept within."""
        conversation_id = self._requested_id(request, header_id)
        if conversation_id is None and not request.store:
            return None
        sent = _stored(request.messages)
        if conversation_id is None:
            if sent[-1].role not in ("user", "tool"):
                raise InvalidRequestError(
                    "A new conversation must end with a user message or a tool result.", param="messages"
                )
            return Turn(
                tenant=tenant,
                conversation_id=new_id or new_conversation_id(),
                expected_version=0,
                render_version=CURRENT_RENDER_VERSION,
                new_messages=sent,
                rendered=render(
                    CURRENT_RENDER_VERSION, [], sent, guidance_text(tenant.instructions, None, memory_in_use(tenant))
                ),
                history=History.NEW,
                title=_title_from(sent),
            )
        try:
            stored = (
                loaded
                if loaded is not None and loaded.id == conversation_id
                else await to_thread.run_sync(lambda: self.store.get(tenant.id, conversation_id))
            )
        except StoreUnavailableError:
            log.warning("conversation store unavailable; answering %s without its stored history", conversation_id)
            # Nothing will be saved, so the client's own messages are all there is (a client that resends its
            # history keeps its context).
            return Turn(
                tenant=tenant,
                conversation_id=conversation_id,
                expected_version=-1,  # unknown: this turn is not saved
                render_version=CURRENT_RENDER_VERSION,
                new_messages=sent,
                rendered=render(
                    CURRENT_RENDER_VERSION, [], sent, guidance_text(tenant.instructions, None, memory_in_use(tenant))
                ),
                history=History.UNAVAILABLE,
            )
        if stored is None:
            raise ConversationNotFoundError(conversation_id)
        guidance = guidance_text(tenant.instructions, stored.instructions, memory_in_use(tenant))
        window = leaving_room(self.window_for(pool), guidance)
        if request.replace_from is not None:
            return self._edit(tenant, stored, sent, request.replace_from, window, guidance)
        parent, pinned = None, request.parent_message_id is not None
        if stored.complete:
            parent = stored.leaf() if not pinned else stored.check_node(request.parent_message_id, "parent_message_id")
            history, status = stored.path(parent), History.LOADED
        else:
            log.error(
                "conversation %s holds %d of %d messages; answering without its history",
                conversation_id,
                len(stored.messages),
                stored.message_count,
            )
            history, status = [], History.COLD
        new = _new_turn_only(history if stored.complete else stored.messages, sent)
        kept, out_of_context = _windowed(history, new, window)
        return Turn(
            tenant=tenant,
            conversation_id=conversation_id,
            expected_version=stored.version,
            render_version=stored.render_version,
            new_messages=new,
            rendered=render(stored.render_version, kept, new, guidance),
            history=status,
            loaded=stored,
            parent=parent,
            pinned=pinned,
            fork_to=fork_to,
            fork_at=len(stored.messages) if fork_to is not None else None,
            out_of_context=out_of_context,
        )

    @staticmethod
    def _edit(
        tenant: Tenant,
        stored: Conversation,
        sent: list[StoredMessage],
        replace_from: int,
        window: ContextWindow | None,
        guidance: str | None,
    ) -> Turn:
        """Edit-and-resend or regenerate: the turn goes beside the user message `replace_from` names (a sibling, under
        the same parent); sending that message's own text again regenerates its answer (only a new answer is stored,
        beside the earlier ones). Either renders the same bytes: the path down to the parent, then the sent text."""
        if not stored.complete:
            raise StoreUnavailableError("The stored conversation is incomplete right now; try the edit again shortly.")
        target = stored.check_node(replace_from, "replace_from")
        if stored.messages[target].role != "user":
            raise InvalidRequestError(
                "replace_from must name one of the conversation's user messages.", param="replace_from"
            )
        if any(m.role != "user" for m in sent):
            raise InvalidRequestError("An edit sends only the new user message(s).", param="messages")
        parent = stored.tree().parent_of(target)
        history, out_of_context = _windowed(stored.path(parent), sent, window)
        same = stored.messages[target]
        regenerate = [(m.content, m.content_parts) for m in sent] == [(same.content, same.content_parts)]
        return Turn(
            tenant=tenant,
            conversation_id=stored.id,
            expected_version=stored.version,
            render_version=stored.render_version,
            new_messages=[] if regenerate else sent,
            rendered=render(stored.render_version, history, sent, guidance),
            history=History.LOADED,
            loaded=stored,
            parent=target if regenerate else parent,
            pinned=True,
            out_of_context=out_of_context,
        )

    @staticmethod
    def _requested_id(request: ChatCompletionRequest, header_id: str | None) -> str | None:
        body_id = request.conversation_id
        if body_id is not None and header_id is not None and body_id != header_id:
            raise InvalidRequestError(
                f"conversation_id in the body and the {CONVERSATION_HEADER} header differ.", param="conversation_id"
            )
        chosen = body_id or header_id
        return None if chosen is None else check_conversation_id(chosen)

    async def finish(
        self,
        turn: Turn,
        assistant_text: str,
        finish_reason: str | None = None,
        answered_by: AnsweredBy | None = None,
        tool_calls: list[Any] | None = None,
        tool_runs: list[dict[str, Any]] | None = None,
    ) -> tuple[bool, int | None]:
        """Persist the user turn and the answer (how it ended, who answered it, the tool calls it made, the gateway's
        own tool runs behind it as the client saw them); (stored, new version). Retries on top of a concurrent
        writer: a turn whose place the client named goes there still (a sibling of the other's), any other after
        the other's."""
        if turn.history is History.UNAVAILABLE:
            return False, None
        who = {} if answered_by is None else asdict(answered_by)
        usage = who.pop("usage", None)
        response = turn.response
        if response is not None and usage is not None:
            usage_record = ResponseUsageRecord(
                input_tokens=usage["prompt_tokens"],
                output_tokens=usage["completion_tokens"],
                cached_tokens=usage["cached_tokens"],
            )
            response = response.model_copy(update={"usage": usage_record})
        answer = StoredMessage(
            role="assistant",
            content=assistant_text,
            created_at=utc_now(),
            finish_reason=finish_reason,
            tool_calls=[ToolCall.model_validate(c) for c in tool_calls] if tool_calls else None,
            server_tool_runs=[ServerToolRunView.model_validate(r) for r in tool_runs] if tool_runs else None,
            citations=turn.citations,
            response=response,
            **who,
        )
        messages = [*turn.new_messages, answer]
        try:
            try:
                meta = await to_thread.run_sync(lambda: self._append(turn, messages))
            except VersionConflictError:
                if turn.fork_to is None:
                    raise
                meta = await to_thread.run_sync(lambda: self._settle_continuation(turn, messages))
        except (StoreUnavailableError, ConversationNotFoundError, VersionConflictError) as exc:
            log.warning("turn of %s not saved: %s", turn.conversation_id, type(exc).__name__)
            return False, None
        turn.message_ids = list(range(meta.message_count - len(messages), meta.message_count))
        return True, meta.version

    def _append(self, turn: Turn, messages: list[StoredMessage]) -> ConversationMeta:
        version, loaded, parent = turn.expected_version, turn.loaded, turn.parent
        for attempt in range(APPEND_ATTEMPTS):
            now = utc_now()
            try:
                return self.store.append_turn(
                    turn.tenant.id,
                    turn.conversation_id,
                    expected_version=version,
                    messages=messages,
                    expires_at=expiry_for(turn.tenant, now),
                    render_version=turn.render_version,
                    title=turn.title,
                    now=now,
                    loaded=loaded,
                    parent=parent,
                )
            except VersionConflictError:
                # Another writer appended first (a second tab): keep both turns; ours where the client put it (beside
                # theirs) or else after theirs (but a turn that must continue exactly what it read never goes on).
                if turn.fork_to is not None or version == 0 or attempt == APPEND_ATTEMPTS - 1:
                    raise
                parent = turn.parent if turn.pinned else None
                loaded = self.store.get(turn.tenant.id, turn.conversation_id)
                if loaded is None:
                    raise
                version = loaded.version
        raise AssertionError("unreachable")

    def _settle_continuation(self, turn: Turn, messages: list[StoredMessage]) -> ConversationMeta:
        """A continuation whose conversation changed since it was read: already stored (another gateway finishing
        the same answer stored it first), stored in place after all (the conversation was rewritten, not extended:
        a response's record deleted), or stored as a branch (another turn was appended)."""
        assert turn.fork_to is not None and turn.fork_at is not None
        current = self.store.get(turn.tenant.id, turn.conversation_id)
        record = turn.response.id if turn.response is not None else None
        for where in (current, self.store.get(turn.tenant.id, turn.fork_to)):
            if (
                where is not None
                and record is not None
                and any(m.response is not None and m.response.id == record for m in where.messages)
            ):
                turn.conversation_id = where.id
                return where
        if (
            current is not None
            and current.complete
            and len(current.messages) == turn.fork_at
            and _same_turns(current.messages, turn.loaded.messages[: turn.fork_at] if turn.loaded is not None else None)
        ):
            turn.expected_version, turn.loaded = current.version, current
            return self._append(turn, messages)
        return self._fork(turn, messages, current)

    def _fork(self, turn: Turn, messages: list[StoredMessage], current: Conversation | None) -> ConversationMeta:
        """Store the turn as the start of the conversation `turn.fork_to`, after the history it continued (the
        records of earlier responses stay in their own conversation)."""
        assert turn.fork_to is not None and turn.fork_at is not None
        base = turn.loaded
        if base is None or len(base.messages) < turn.fork_at:
            base = current
            if base is None or len(base.messages) < turn.fork_at:
                raise ConversationNotFoundError(turn.conversation_id)
        leaf = turn.fork_at - 1 if turn.parent is None else turn.parent
        history = [m.model_copy(update={"response": None, "parent": None}) for m in base.path(leaf)]
        now = utc_now()
        meta = self.store.append_turn(
            turn.tenant.id,
            turn.fork_to,
            expected_version=0,
            messages=[*history, *messages],
            expires_at=expiry_for(turn.tenant, now),
            render_version=turn.render_version,
            title=base.title,
            now=now,
        )
        log.info("turn of %s stored as a branch %s: the conversation moved on", turn.conversation_id, turn.fork_to)
        turn.conversation_id = turn.fork_to
        return meta
