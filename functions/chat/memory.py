"""Memory as the account manages it (`/v1/account/memory`): opt-in, every item the user's own to list, add, edit and
delete; each text judged by the safety pre-filter before it is kept (it enters every later prompt of the account's
stored conversations, functions/chat/instructions.py `guidance_text`)."""

from __future__ import annotations

from collections.abc import Callable

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.chat.instructions import Instructions
from shared.errors import InvalidRequestError, NotFoundError
from shared.service_api.memory_api import MemoryItemObject, MemoryObject
from shared.storage.accounts import Tenant, TenantStore
from shared.storage.memory import MAX_MEMORY_ITEMS, Memory, MemoryItem
from shared.storage.timestamps import utc_now


def memory_in_use(tenant: Tenant) -> list[str]:
    """The texts a prompt of this account renders (none while memory is off)."""
    return tenant.memory.in_use() if tenant.memory is not None else []


class MemoryFullError(InvalidRequestError):
    default_code = "memory_full"


class MemoryItemNotFoundError(NotFoundError):
    def __init__(self, item_id: str) -> None:
        super().__init__(f"No memory item with id '{item_id[:80]}'.", param="item_id")


class MemoryService:
    def __init__(self, tenants: TenantStore, instructions: Instructions) -> None:
        self.tenants = tenants
        self.instructions = instructions  # its pre-filter screen judges each text before it is kept

    async def get(self, caller: Caller) -> MemoryObject:
        tenant = await to_thread.run_sync(self.tenants.get_tenant, caller.tenant.id)
        return MemoryObject.of(tenant.memory if tenant is not None else None)

    async def set_enabled(self, caller: Caller, enabled: bool) -> MemoryObject:
        return await self._change(caller, lambda memory: memory.model_copy(update={"enabled": enabled}))

    async def add(self, caller: Caller, text: str) -> MemoryItemObject:
        await self.instructions.screen(caller, text)
        item = MemoryItem.new(text)

        def added(memory: Memory) -> Memory:
            if len(memory.items) >= MAX_MEMORY_ITEMS:
                raise MemoryFullError(f"Memory holds at most {MAX_MEMORY_ITEMS} items; delete one first.", param="text")
            return memory.model_copy(update={"items": [*memory.items, item]})

        await self._change(caller, added)
        return MemoryItemObject.of(item)

    async def edit(self, caller: Caller, item_id: str, text: str) -> MemoryItemObject:
        await self.instructions.screen(caller, text)
        edited: list[MemoryItem] = []

        def changed(memory: Memory) -> Memory:
            items = [self._edited(item, text, edited) if item.id == item_id else item for item in memory.items]
            if not edited:
                raise MemoryItemNotFoundError(item_id)
            return memory.model_copy(update={"items": items})

        await self._change(caller, changed)
        return MemoryItemObject.of(edited[-1])

    async def delete(self, caller: Caller, item_id: str) -> None:
        def without(memory: Memory) -> Memory:
            if not any(item.id == item_id for item in memory.items):
                raise MemoryItemNotFoundError(item_id)
            return memory.model_copy(update={"items": [item for item in memory.items if item.id != item_id]})

        await self._change(caller, without)

    @staticmethod
    def _edited(item: MemoryItem, text: str, edited: list[MemoryItem]) -> MemoryItem:
        new = item.model_copy(update={"text": text, "updated_at": utc_now()})
        edited.append(new)
        return new

    async def _change(self, caller: Caller, change: Callable[[Memory], Memory]) -> MemoryObject:
        tenant = await to_thread.run_sync(self.tenants.update_memory, caller.tenant.id, change)
        return MemoryObject.of(tenant.memory if tenant is not None else None)
