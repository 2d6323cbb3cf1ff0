"""The Responses API (`/v1/responses`) over the chat pipeline: a response is a chat turn, so auth, limits, safety,
retrieval, metering, the result cache and resumable streams are the chat path's own (docs/responses.md).

Stored responses live in the conversations: `store: true` keeps the exchange as a turn of a conversation, and the
answer's stored message carries the response's record (shared/wire/responses_api.ResponseRecord), so retention,
export, legal hold and erasure treat a response as the conversation turn it is. A response id names its conversation
(`resp_` + the conversation's 32 hex digits + 16 of its own), so finding one is one conversation read.

`previous_response_id` continues the conversation in place when the response it names is the conversation's latest
and the instructions are unchanged (the rendered prefix stays byte-stable, so the replica's prefix cache hits);
otherwise it forks: a new conversation starts with the history up to that response (OpenAI's semantics: any earlier
response can be continued, and instructions are not carried over)."""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from anyio import to_thread
from starlette.types import Receive

from functions.accounts.auth import Caller
from functions.chat.delivery import ChatResult, JsonAnswer, StreamAnswer, StreamShape
from functions.chat.pipeline import ChatCall, ChatPipeline
from functions.responses.events import ResponseHead, response_events
from functions.responses.objects import AnswerParts, item_id, response_object
from functions.responses.translate import (
    LOGPROBS_INCLUDE,
    RESULTS_INCLUDE,
    chat_messages,
    chat_request,
    refuse_unhonoured,
)
from shared.errors import InvalidRequestError, NotFoundError
from shared.storage.accounts import Tenant
from shared.storage.conversations import (
    Conversation,
    ConversationStore,
    StoredMessage,
    VersionConflictError,
    check_conversation_id,
    new_conversation_id,
)
from shared.wire.responses_api import (
    RESPONSE_ID_RE,
    FunctionTool,
    ResponseRecord,
    ResponsesRequest,
)

DELETE_ATTEMPTS = 3


class ResponseNotFoundError(NotFoundError):
    default_code = "response_not_found"

    def __init__(self, response_id: str, param: str | None = None) -> None:
        super().__init__(f"Response with id '{response_id[:80]}' not found.", param=param)


def new_response_id(conversation_id: str | None) -> str:
    """`resp_` + the conversation's hex id (random when not stored) + 16 hex digits of its own."""
    conversation_hex = conversation_id.removeprefix("conv_") if conversation_id else uuid.uuid4().hex
    return f"resp_{conversation_hex}{uuid.uuid4().hex[:16]}"


def conversation_of(response_id: str) -> str | None:
    """The conversation a well-formed response id names (None for anything else)."""
    if not RESPONSE_ID_RE.fullmatch(response_id):
        return None
    return f"conv_{response_id[5:37]}"


def branch_of(response_id: str) -> str:
    """Where a continuation is stored if its conversation moved on before it was (conversation_turns.Turn.fork_to):
    a conversation id derived from the response id, so finding the response needs no index."""
    return f"conv_{hashlib.sha256(response_id.encode()).hexdigest()[:32]}"


@dataclass(frozen=True)
class Placement:
    """Where a response's turn goes: the messages sent, the conversation continued or created (neither: stateless)."""

    messages: list[dict[str, Any]]
    continues: str | None = None  # a stored conversation this turn is appended to
    creates: str | None = None  # the id of a new conversation this turn starts
    loaded: Conversation | None = None  # the continued conversation as read (begin reads it no second time)
    # A continuation of a response: continued exactly as read (a branch if it moved on; conversation_turns.Turn).
    exact: bool = False

    @property
    def conversation_id(self) -> str | None:
        return self.continues or self.creates


@dataclass(frozen=True)
class FoundResponse:
    conversation: Conversation
    index: int  # its answer's position in the conversation's messages
    record: ResponseRecord

    @property
    def message(self) -> StoredMessage:
        return self.conversation.messages[self.index]


def _chat_message(message: StoredMessage) -> dict[str, Any]:
    """A stored message as the chat request sends it (rendered the same way: role, content, tool calls)."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [call.model_dump() for call in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


def _instructions_message(instructions: str | None) -> list[dict[str, Any]]:
    return [{"role": "system", "content": instructions}] if instructions else []


def _last_user_text(messages: list[dict[str, Any]]) -> str | None:
    for message in reversed(messages):
        if message["role"] == "user":
            content = message["content"]
            return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
    return None


def record_for(request: ResponsesRequest, response_id: str, *, input_messages: int) -> ResponseRecord:
    """What the Response repeats of its request (kept with a stored answer, so a retrieved response reads the same),
    and how many messages its input added (its input items, read back)."""
    tools: list[dict[str, Any]] = []
    for tool in request.tools or []:
        if isinstance(tool, FunctionTool):
            tools.append(
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": tool.strict,
                }
            )
        else:
            tools.append(tool.model_dump(exclude_none=True))
    choice = request.tool_choice
    text_format = request.text.format if request.text is not None else None
    return ResponseRecord(
        id=response_id,
        created_at=int(time.time()),
        model=request.model,
        previous_response_id=request.previous_response_id,
        instructions=request.instructions,
        metadata=request.metadata or {},
        tools=tools,
        tool_choice=choice.model_dump() if choice is not None and not isinstance(choice, str) else (choice or "auto"),
        parallel_tool_calls=request.parallel_tool_calls if request.parallel_tool_calls is not None else True,
        text={
            "format": text_format.model_dump(exclude_none=True) if text_format is not None else {"type": "text"},
            "verbosity": "medium",
        },
        temperature=request.temperature,
        top_p=request.top_p,
        top_logprobs=request.top_logprobs,
        max_output_tokens=request.max_output_tokens,
        max_tool_calls=request.max_tool_calls,
        user=request.user,
        safety_identifier=request.safety_identifier,
        prompt_cache_key=request.prompt_cache_key,
        input_messages=input_messages,
    )


@dataclass(frozen=True)
class ResponseCall:
    """A Responses request with what the client's connection said about it (functions/api/routers/responses.py)."""

    caller: Caller
    request: ResponsesRequest
    receive: Receive
    session_header: str | None = None
    cache_control: str | None = None
    resumable: bool = False


class ResponsesService:
    def __init__(self, pipeline: ChatPipeline, store: ConversationStore) -> None:
        self.pipeline = pipeline
        self.store = store

    # -- create ------------------------------------------------------------------------------------------------------
    async def create(self, call: ResponseCall) -> ChatResult:
        """The response as JSON, or as its typed event stream (`stream: true`)."""
        request = call.request
        refuse_unhonoured(request)
        assert request.input is not None  # refuse_unhonoured requires it
        new_messages = chat_messages(request.input)
        placement = await self._place(call.caller.tenant, request, new_messages)
        record = record_for(request, new_response_id(placement.conversation_id), input_messages=len(new_messages))
        body = chat_request(request, placement.messages)
        body = body.model_copy(update={"conversation_id": placement.continues, "store": placement.creates is not None})
        includes = set(request.include or [])
        query = _last_user_text(new_messages)
        head = ResponseHead(
            record=record,
            stored=request.store,
            conversation_id=placement.conversation_id if request.store else None,
            query=query,
            with_logprobs=LOGPROBS_INCLUDE in includes,
            with_results=RESULTS_INCLUDE in includes,
        )
        chat_call = ChatCall(
            caller=call.caller,
            body=body,
            receive=call.receive,
            session_header=call.session_header,
            cache_control=call.cache_control,
            resumable=call.resumable,
            new_conversation_id=placement.creates,
            response=record if request.store else None,
            shape=StreamShape(record.id, head.frame(), response_events),
            loaded_conversation=placement.loaded,
            fork_to=branch_of(record.id) if placement.exact else None,
            reasoning_param="reasoning.effort",
        )
        result = await self.pipeline.run(chat_call)
        if isinstance(result, StreamAnswer):
            return result
        return JsonAnswer(head.build(AnswerParts.from_completion(result.body, query)), result.headers)

    async def _place(self, tenant: Tenant, request: ResponsesRequest, new_messages: list[dict[str, Any]]) -> Placement:
        instructions = _instructions_message(request.instructions)
        if (named := request.conversation_id()) is not None:
            conversation_id = check_conversation_id(named, param="conversation")
            conversation = await self._conversation(tenant, conversation_id)
            if conversation is None:
                raise NotFoundError(f"Conversation with id '{conversation_id}' not found.", param="conversation")
            first = conversation.path()[:1]
            stored = first[0].content if first and first[0].role == "system" else None
            if request.instructions is not None and request.instructions != stored:
                raise InvalidRequestError(
                    "'instructions' differ from the conversation's stored system message; omit them to keep the "
                    "conversation's own, or continue with previous_response_id to start a branch with new ones.",
                    param="instructions",
                )
            return Placement(new_messages, continues=conversation_id, loaded=conversation)
        if request.previous_response_id is None:
            creates = new_conversation_id() if request.store else None
            return Placement(instructions + new_messages, creates=creates)
        found = await self.find(tenant, request.previous_response_id, param="previous_response_id")
        conversation, previous = found.conversation, found.record
        latest = found.index == conversation.leaf()
        turn_only = all(message["role"] in ("user", "tool") for message in new_messages)
        if request.store and latest and turn_only and request.instructions == previous.instructions:
            return Placement(new_messages, continues=conversation.id, loaded=conversation, exact=True)
        history = [_chat_message(m) for m in conversation.path(found.index)]
        if previous.instructions is not None and history[:1] and history[0]["role"] == "system":
            history = history[1:]  # instructions are not carried over (OpenAI's rule); this request's replace them
        creates = new_conversation_id() if request.store else None
        return Placement(instructions + history + new_messages, creates=creates)

    # -- read, delete ------------------------------------------------------------------------------------------------
    async def _conversation(self, tenant: Tenant, conversation_id: str) -> Conversation | None:
        return await to_thread.run_sync(lambda: self.store.get(tenant.id, conversation_id))

    async def find(self, tenant: Tenant, response_id: str, *, param: str | None = None) -> FoundResponse:
        """The stored response `response_id` of this tenant (404 when unknown, not stored, deleted or expired): in the
        conversation its id names, else in its branch (`branch_of`)."""
        conversation_id = conversation_of(response_id)
        if conversation_id is not None:
            for where in (conversation_id, branch_of(response_id)):
                conversation = await self._conversation(tenant, where)
                for index, message in enumerate(conversation.messages if conversation is not None else []):
                    if message.response is not None and message.response.id == response_id:
                        assert conversation is not None
                        return FoundResponse(conversation, index, message.response)
        raise ResponseNotFoundError(response_id, param)

    async def retrieve(self, tenant: Tenant, response_id: str) -> dict[str, Any]:
        found = await self.find(tenant, response_id)
        message = found.message
        earlier = [_chat_message(m) for m in found.conversation.path(found.index)[:-1]]
        parts = AnswerParts(
            text=message.content,
            tool_calls=[call.model_dump() for call in message.tool_calls or []],
            finish_reason=message.finish_reason,
            model=message.model,
            usage=found.record.usage,
            citations=list(message.citations or []),
            searched=message.citations is not None,
            query=_last_user_text(earlier),
        )
        return response_object(
            found.record,
            parts,
            stored=True,
            conversation_id=found.conversation.id,
            completed_at=int(message.created_at.timestamp()),
        )

    async def delete(self, tenant: Tenant, response_id: str) -> dict[str, Any]:
        """Forget the response: its id no longer resolves (retrieve, previous_response_id). The turn itself stays in
        its conversation, which the conversations API lists and deletes (docs/responses.md)."""
        for attempt in range(DELETE_ATTEMPTS):
            found = await self.find(tenant, response_id)
            try:
                await to_thread.run_sync(self._forget, tenant, found)
                break
            except VersionConflictError:  # a turn was appended meanwhile: read it again
                if attempt == DELETE_ATTEMPTS - 1:
                    raise
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    def _forget(self, tenant: Tenant, found: FoundResponse) -> None:
        """Rewrite the conversation's tail with the response's record dropped (its turns unchanged)."""
        conversation = found.conversation
        tail = [found.message.model_copy(update={"response": None}), *conversation.messages[found.index + 1 :]]
        self.store.append_turn(
            tenant.id,
            conversation.id,
            expected_version=conversation.version,
            messages=tail,
            expires_at=conversation.expires_at,
            render_version=conversation.render_version,
            loaded=conversation,
            keep=found.index,
        )

    async def input_items(
        self, tenant: Tenant, response_id: str, *, limit: int, order: Literal["asc", "desc"], after: str | None
    ) -> dict[str, Any]:
        """The items this response's request added (its instructions excepted, as at OpenAI), paged."""
        found = await self.find(tenant, response_id)
        messages, count = found.conversation.path(found.index), found.record.input_messages
        at = len(messages) - 1  # the response's place on its path
        if count is None:  # a record kept before the count was: the messages since the previous answer
            since = next((i + 1 for i in range(at - 1, -1, -1) if messages[i].role == "assistant"), 0)
            instructions = since == 0 and found.record.instructions is not None and messages[0].role == "system"
            count = at - since - (1 if instructions else 0)  # instructions are not an input item
        added = messages[max(at - count, 0) : at]
        items = [item for number, m in enumerate(added) for item in _input_items(response_id, number, m)]
        if order == "desc":
            items.reverse()
        if after is not None:
            position = next((i for i, item in enumerate(items) if item["id"] == after), None)
            if position is None:
                raise InvalidRequestError(f"No input item '{after[:80]}' in this response.", param="after")
            items = items[position + 1 :]
        page = items[:limit]
        return {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }


def _input_items(response_id: str, number: int, message: StoredMessage) -> list[dict[str, Any]]:
    """One stored input message as the items it was sent as."""
    if message.role == "tool":
        return [
            {
                "id": item_id("fco", response_id, number),
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": message.content,
                "status": "completed",
            }
        ]
    if message.role == "assistant":
        items: list[dict[str, Any]] = []
        if message.content or not message.tool_calls:
            part = {"type": "output_text", "text": message.content, "annotations": [], "logprobs": []}
            items.append(
                {
                    "id": item_id("in", response_id, number),
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [part],
                }
            )
        for call in message.tool_calls or []:
            items.append(
                {
                    "id": f"{item_id('fci', response_id, number)}_{call.id[:24]}",
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call.id,
                    "name": call.function.name,
                    "arguments": call.function.arguments,
                }
            )
        return items
    return [
        {
            "id": item_id("in", response_id, number),
            "type": "message",
            "role": message.role,
            "status": "completed",
            "content": [{"type": "input_text", "text": message.content}],
        }
    ]
