"""Everything the service keeps for one tenant, as one account: the GDPR erase and the account export.

Erase order matters: conversations first, then feedback. A rating racing the erase re-checks its conversation after
writing (functions/feedback/service.py): if it lands after the conversations are gone it takes itself back, and if it
lands before, the feedback erase that follows removes it. Erasing feedback first would let a rating written between
the two steps (its conversation still there when it re-checks) outlive the account. Both steps are idempotent, so a
retry after a failure part-way finishes the job.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from functions.accounts.conversation_export import account_export_json
from functions.files.tenant_data import TenantFiles
from shared.service_api.conversation_api import AccountDataDeleted, InstructionsObject
from shared.service_api.feedback_api import FeedbackObject
from shared.service_api.memory_api import MemoryObject
from shared.storage.accounts import TenantChanges, TenantStore
from shared.storage.batches import BatchStore
from shared.storage.conversations import AuditRecord, ConversationStore
from shared.storage.feedback import FeedbackStore
from shared.storage.memory import Memory
from shared.storage.result_cache import ResultCacheStore
from shared.storage.shares import ShareStore
from shared.storage.timestamps import utc_now


class AccountData:
    def __init__(
        self,
        conversations: ConversationStore,
        feedback: FeedbackStore,
        result_cache: ResultCacheStore | None = None,
        *,
        tenants: TenantStore | None = None,
    ) -> None:
        self.conversations = conversations
        self.feedback = feedback
        self.tenants = tenants  # the account's own settings kept with the tenant (its custom instructions)
        self.result_cache = result_cache  # cached answers are the tenant's content too (docs/result-cache.md)
        self.files: TenantFiles | None = (
            None  # files, vector stores, chunks, vectors (set by functions/files/wiring.py)
        )
        self.batches: BatchStore | None = None  # batches and their line results (set by functions/batches/wiring.py)
        self.shares: ShareStore | None = None  # share links: copies of conversations (set by functions/app.py)

    def erase(self, tenant_id: str) -> AccountDataDeleted:
        audit = AuditRecord(
            at=utc_now(), actor=f"tenant:{tenant_id}", action="erase", tenant_id=tenant_id, detail="account data erase"
        )
        conversations = self.conversations.erase_tenant(tenant_id, audit)
        feedback = self.feedback.erase_tenant(tenant_id)
        if self.result_cache is not None:
            self.result_cache.forget_tenant(tenant_id)
        if self.files is not None:
            self.files.erase(tenant_id)
        if self.batches is not None:
            self.batches.delete_tenant(tenant_id)
        if self.shares is not None:
            self.shares.erase_tenant(tenant_id)
        if self.tenants is not None:
            self.tenants.update_tenant(tenant_id, TenantChanges(instructions=None))
            self.tenants.update_memory(tenant_id, lambda _: Memory())  # every item gone, memory off
        return AccountDataDeleted(deleted_conversations=conversations, deleted_feedback=feedback)

    def export(self, tenant_id: str) -> AsyncIterator[bytes]:
        """The account as one streamed JSON document: conversations, then every rating the service keeps for the
        tenant (those of replaced answers too), as the API shows them."""
        feedback = (FeedbackObject.of(record) for record in self.feedback.list_tenant(tenant_id))
        sections = {} if self.files is None else self.files.export_sections(tenant_id)
        tenant = self.tenants.get_tenant(tenant_id) if self.tenants is not None else None
        if tenant is not None:
            sections = {
                "instructions": iter([InstructionsObject(instructions=tenant.instructions)]),
                "memory": iter([MemoryObject.of(tenant.memory)]),
                **sections,
            }
        return account_export_json(tenant_id, self.conversations.export_tenant(tenant_id), feedback, sections)
