"""Custom instructions in a stored conversation's prompt (docs/conversations.md, "Custom instructions"): the
account's (for every conversation it stores) and the conversation's own, as one block from a fixed template that
ends the prompt's first system message (shared/rendering.py `render(..., guidance=)`).

The same instructions render to the same bytes on every turn, so consecutive turns keep sharing their prefix (the
prefix cache holds); a change to them changes the system prompt, so the next turn's prompt is new from its start,
once. The block is never stored with the conversation: it is made from the instructions in force on every turn. It
stays with the system prompt when older turns leave the context, and the context window leaves room for it.

Instructions are set by their owner and judged by the safety pre-filter before they are kept: they enter every later
prompt of the conversations they apply to, so a text the pre-filter would refuse is refused once, at the save, with
its audit."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.safety.pipeline import SafetyPipeline
from shared.context_window import ContextWindow, text_tokens
from shared.service_api.conversation_api import ConversationObject, InstructionsObject
from shared.storage.accounts import TenantChanges, TenantStore
from shared.storage.conversations import ConversationNotFoundError, ConversationStore
from shared.wire.schemas import ChatCompletionRequest

ACCOUNT_HEADING = "The user's custom instructions (for every conversation):"
CONVERSATION_HEADING = "The user's instructions for this conversation:"
MEMORY_HEADING = "What the user asked you to remember (their saved memory):"


def guidance_text(account: str | None, conversation: str | None, memory: Sequence[str] = ()) -> str | None:
    """The instructions block, then the account's memory in use (functions/chat/memory.py) as a list; None: neither."""
    parts = [
        f"{heading}\n{text.strip()}"
        for heading, text in ((ACCOUNT_HEADING, account), (CONVERSATION_HEADING, conversation))
        if text and text.strip()
    ]
    if memory:
        parts.append(MEMORY_HEADING + "".join(f"\n- {fact}" for fact in memory))
    return "\n\n".join(parts) if parts else None


def leaving_room(window: ContextWindow | None, guidance: str | None) -> ContextWindow | None:
    """`window` less the block's estimated tokens: the kept history shrinks by what the block takes."""
    if window is None or not guidance:
        return window
    cost = text_tokens(guidance) + 2  # and the blank line joining it to the system prompt
    return dataclasses.replace(window, budget=max(0, window.budget - cost), keep=max(0, window.keep - cost))


def _kept(text: str | None) -> str | None:
    """What is stored: surrounding blank space trimmed; nothing left is no instructions."""
    return (text or "").strip() or None


class Instructions:
    def __init__(self, tenants: TenantStore, conversations: ConversationStore, safety: SafetyPipeline) -> None:
        self.tenants = tenants
        self.conversations = conversations
        self.safety = safety

    async def set_for_account(self, caller: Caller, text: str | None) -> InstructionsObject:
        kept = _kept(text)
        await self.screen(caller, kept)
        tenant = await to_thread.run_sync(
            self.tenants.update_tenant, caller.tenant.id, TenantChanges(instructions=kept)
        )
        return InstructionsObject(instructions=tenant.instructions if tenant is not None else kept)

    async def set_for_conversation(self, caller: Caller, conversation_id: str, text: str | None) -> ConversationObject:
        kept = _kept(text)
        await self.screen(caller, kept)
        meta = await to_thread.run_sync(
            lambda: self.conversations.set_instructions(caller.tenant.id, conversation_id, kept)
        )
        if meta is None:
            raise ConversationNotFoundError(conversation_id)
        return ConversationObject.of(meta)

    async def screen(self, caller: Caller, text: str | None) -> None:
        """400 content_policy_violation (audited as blocked) when the pre-filter refuses the text."""
        if text is None:
            return
        request = ChatCompletionRequest.model_validate(
            {"model": "instructions", "messages": [{"role": "user", "content": text}]}
        )
        await self.safety.screen(caller, request, f"instructions-{uuid.uuid4().hex}", "instructions")
