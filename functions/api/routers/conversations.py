"""`/v1/conversations`: list, read, rename, soft-delete and export a tenant's own conversations."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from functions.accounts.auth import CurrentCaller, CurrentTenant
from functions.accounts.conversation_export import to_markdown
from functions.api.deps import ConversationSearchDep, ConversationStoreDep, InstructionsDep, ShareServiceDep
from functions.api.openapi_description import error_responses
from functions.chat.conversation_turns import ConversationTurns
from shared.service_api.conversation_api import (
    ConversationDeleted,
    ConversationDetail,
    ConversationList,
    ConversationObject,
    ConversationSearchResults,
    ConversationUpdate,
)
from shared.service_api.share_api import ShareCreate, ShareList, ShareObject
from shared.storage.conversations import (
    CONVERSATION_ID_RE,
    Conversation,
    ConversationNotFoundError,
    ConversationStore,
    StoreUnavailableError,
    check_conversation_id,
)

router = APIRouter(prefix="/v1/conversations", tags=["conversations"])
SEARCH_SEGMENT = "search"


Store = ConversationStoreDep


def valid_id(
    # The pattern is documented (clients and fuzzers read it); the check keeps the project's own error message.
    conversation_id: Annotated[str, Path(json_schema_extra={"pattern": CONVERSATION_ID_RE.pattern})],
) -> str:
    if conversation_id == SEARCH_SEGMENT:  # `/v1/conversations/search` answers GET only: any other method is a 405
        raise StarletteHTTPException(405)
    return check_conversation_id(conversation_id)


ConversationId = Annotated[str, Depends(valid_id)]


async def _live(store: ConversationStore, tenant_id: str, conversation_id: str) -> Conversation:
    conversation = await run_in_threadpool(store.get, tenant_id, conversation_id)
    if conversation is None:
        raise ConversationNotFoundError(conversation_id)
    return conversation


@router.get("")
async def list_conversations(
    tenant: CurrentTenant,
    store: Store,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(max_length=512)] = None,
) -> ConversationList:
    page = await run_in_threadpool(lambda: store.list(tenant.id, limit=limit, cursor=after))
    return ConversationList(
        data=[ConversationObject.of(m) for m in page.items],
        has_more=page.next_cursor is not None,
        next_cursor=page.next_cursor,
    )


@router.get(f"/{SEARCH_SEGMENT}", responses=error_responses(400))
async def search_conversations(
    tenant: CurrentTenant,
    search: ConversationSearchDep,
    q: Annotated[str, Query(min_length=1, max_length=500, description="The words to find (any of them; BM25).")],
    limit: Annotated[int, Query(ge=1, le=50)] = 20,
) -> ConversationSearchResults:
    """Full-text search over the caller's conversations: every message of every branch, best first, each hit with a
    snippet and its matched words (docs/conversations.md, "Search")."""
    return await run_in_threadpool(search.search, tenant.id, q, limit)


@router.get("/{conversation_id}", responses=error_responses(404))
async def get_conversation(
    request: Request, tenant: CurrentTenant, store: Store, conversation_id: ConversationId
) -> ConversationDetail:
    conversation = await _live(store, tenant.id, conversation_id)
    turns: ConversationTurns = request.app.state.turns
    left_out = turns.out_of_context(conversation, tenant)
    return ConversationDetail.of(conversation).model_copy(update={"out_of_context": left_out})


@router.patch("/{conversation_id}", responses=error_responses(400, 404))
async def update_conversation(
    caller: CurrentCaller,
    store: Store,
    instructions: InstructionsDep,
    conversation_id: ConversationId,
    update: ConversationUpdate,
) -> ConversationObject:
    """Rename it, set its instructions (judged by the safety pre-filter first), switch its active branch."""
    changed: ConversationObject | None = None
    if update.current_node is not None:
        changed = await _switch(store, caller.tenant.id, conversation_id, update.current_node)
    if "instructions" in update.model_fields_set:
        changed = await instructions.set_for_conversation(caller, conversation_id, update.instructions)
    if update.title is not None:
        title = update.title
        meta = await run_in_threadpool(lambda: store.rename(caller.tenant.id, conversation_id, title))
        if meta is None:
            raise ConversationNotFoundError(conversation_id)
        changed = ConversationObject.of(meta)
    assert changed is not None  # ConversationUpdate holds one change at least
    return changed


async def _switch(store: ConversationStore, tenant_id: str, conversation_id: str, node: int) -> ConversationObject:
    """Make the branch through `node` the active one, down to its newest message (where it was last written)."""
    conversation = await _live(store, tenant_id, conversation_id)
    tree = conversation.tree()
    if not conversation.complete:
        raise StoreUnavailableError("The stored conversation is incomplete right now; try again shortly.")
    leaf = tree.newest_leaf_under(conversation.check_node(node, "current_node"))
    meta = await run_in_threadpool(lambda: store.set_current_node(tenant_id, conversation_id, leaf))
    if meta is None:
        raise ConversationNotFoundError(conversation_id)
    return ConversationObject.of(meta)


@router.delete("/{conversation_id}", responses=error_responses(404))
async def delete_conversation(
    tenant: CurrentTenant, store: Store, shares: ShareServiceDep, conversation_id: ConversationId
) -> ConversationDeleted:
    if not await run_in_threadpool(store.soft_delete, tenant.id, conversation_id):
        raise ConversationNotFoundError(conversation_id)
    await shares.forget_conversation(tenant.id, conversation_id)  # its links go with it
    return ConversationDeleted(id=conversation_id)


@router.post("/{conversation_id}/shares", responses=error_responses(400, 403, 404))
async def create_share(
    caller: CurrentCaller, shares: ShareServiceDep, conversation_id: ConversationId, request: ShareCreate | None = None
) -> ShareObject:
    """A read-only link to a snapshot of the active branch (docs/conversations.md, "Share links"); its `url` is
    returned only now."""
    return await shares.create(caller, conversation_id, request or ShareCreate())


@router.get("/{conversation_id}/shares", responses=error_responses(404))
async def list_shares(caller: CurrentCaller, shares: ShareServiceDep, conversation_id: ConversationId) -> ShareList:
    """The conversation's live links (without their URLs: the service keeps only a hash)."""
    return await shares.list(caller, conversation_id)


@router.get(
    "/{conversation_id}/export",
    response_model=None,
    responses={
        200: {
            "description": "The conversation as JSON, or as Markdown with `format=markdown`.",
            "content": {"application/json": {}, "text/markdown": {}},
        },
        **error_responses(404),
    },
)
async def export_conversation(
    tenant: CurrentTenant,
    store: Store,
    conversation_id: ConversationId,
    format: Annotated[Literal["json", "markdown"], Query()] = "json",
) -> Response:
    conversation = await _live(store, tenant.id, conversation_id)
    filename = f"{conversation_id}.{'md' if format == 'markdown' else 'json'}"
    disposition = {"content-disposition": f'attachment; filename="{filename}"'}
    if format == "markdown":
        return PlainTextResponse(to_markdown(conversation), media_type="text/markdown", headers=disposition)
    body = ConversationDetail.of(conversation).model_dump_json(indent=2)
    return Response(body, media_type="application/json", headers=disposition)
