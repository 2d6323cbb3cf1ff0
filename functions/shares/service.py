"""Share links as the owner makes, lists and revokes them, and as a reader opens one (docs/conversations.md,
"Share links").

A share copies the conversation's active branch (user and assistant messages) when it is made. Before it is made the
snapshot is read for personal data (the safety stage's PII detector: emails, phone numbers, card numbers, keys,
IPs, SSNs); a snapshot with some is refused with `pii_in_share`, naming the kinds and the messages, until the owner
acknowledges it. A link opens only while it is unexpired, its conversation is still live and its tenant allows
sharing; otherwise it is a 404, as a revoked one is.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.safety.pii import PiiDetector
from shared.errors import FleetchatError, InvalidRequestError, NotFoundError
from shared.service_api.share_api import ShareCreate, SharedConversation, ShareList, ShareObject
from shared.storage.accounts import TenantStore
from shared.storage.conversations import ConversationNotFoundError, ConversationStore
from shared.storage.shares import (
    MAX_SNAPSHOT_BYTES,
    Share,
    SharedMessage,
    ShareStore,
    new_share_id,
    new_share_token,
    token_hash,
)
from shared.storage.timestamps import utc_now

SHARE_PATH = "/s/"  # the page a link opens (functions/api/routers/shared_pages.py)


class SharingDisabledError(FleetchatError):
    status_code = 403
    error_type = "invalid_request_error"
    default_code = "sharing_disabled"


class ShareNotFoundError(NotFoundError):
    def __init__(self, what: str = "share link") -> None:
        super().__init__(f"No such {what}.", param=None)


class ShareService:
    def __init__(
        self, shares: ShareStore, conversations: ConversationStore, tenants: TenantStore, pii: PiiDetector
    ) -> None:
        self.shares = shares
        self.conversations = conversations
        self.tenants = tenants
        self.pii = pii

    async def create(self, caller: Caller, conversation_id: str, request: ShareCreate) -> ShareObject:
        if caller.tenant.sharing_disabled:
            raise SharingDisabledError("Sharing is turned off for this account.")
        conversation = await to_thread.run_sync(lambda: self.conversations.get(caller.tenant.id, conversation_id))
        if conversation is None:
            raise ConversationNotFoundError(conversation_id)
        messages = [
            SharedMessage(role=m.role, content=m.content, created_at=m.created_at)
            for m in conversation.path()
            if m.role in ("user", "assistant") and m.content
        ]
        if not messages:
            raise InvalidRequestError("This conversation has no messages to share yet.", param="conversation_id")
        if sum(len(m.content.encode()) + 64 for m in messages) > MAX_SNAPSHOT_BYTES:
            raise InvalidRequestError(
                "This conversation is too long to share (its snapshot would exceed 350 KB).", code="share_too_large"
            )
        if not request.acknowledge_pii and (found := await to_thread.run_sync(self._personal_data, messages)):
            where = "; ".join(f"{', '.join(sorted(kinds))} in message {n}" for n, kinds in sorted(found.items()))
            raise InvalidRequestError(
                f"The conversation holds personal data ({where}). Send acknowledge_pii: true to share it anyway.",
                param="acknowledge_pii",
                code="pii_in_share",
            )
        now, token = utc_now(), new_share_token()
        share = Share(
            id=new_share_id(), tenant_id=caller.tenant.id, conversation_id=conversation_id, title=conversation.title,
            messages=messages, created_at=now, expires_at=now + timedelta(days=request.expires_in_days),
        )  # fmt: skip
        await to_thread.run_sync(self.shares.create, share, token_hash(token))
        return ShareObject.of(share, url=f"{SHARE_PATH}{token}")

    def _personal_data(self, messages: list[SharedMessage]) -> dict[int, set[str]]:
        """Message number (from 1) -> the kinds of personal data in it."""
        found: dict[int, set[str]] = defaultdict(set)
        for number, message in enumerate(messages, start=1):
            for span in self.pii.find(message.content):
                found[number].add(span.kind.value)
        return dict(found)

    async def list(self, caller: Caller, conversation_id: str) -> ShareList:
        conversation = await to_thread.run_sync(lambda: self.conversations.get_meta(caller.tenant.id, conversation_id))
        if conversation is None:
            raise ConversationNotFoundError(conversation_id)
        shares = await to_thread.run_sync(self.shares.list_conversation, caller.tenant.id, conversation_id)
        now = utc_now()
        return ShareList(data=[ShareObject.of(share) for share in shares if share.live_at(now)])

    async def revoke(self, caller: Caller, share_id: str) -> None:
        if not await to_thread.run_sync(self.shares.revoke, caller.tenant.id, share_id):
            raise ShareNotFoundError()

    async def forget_conversation(self, tenant_id: str, conversation_id: str) -> None:
        """Its conversation was deleted: its links go with it."""
        await to_thread.run_sync(self.shares.delete_conversation, tenant_id, conversation_id)

    async def open(self, token: str) -> SharedConversation:
        """What the link shows, or a 404 (unknown, revoked, expired, its conversation gone, sharing turned off)."""
        share = await to_thread.run_sync(self.shares.by_token, token_hash(token))
        if share is None or not share.live_at(utc_now()):
            raise ShareNotFoundError()
        tenant = await to_thread.run_sync(self.tenants.get_tenant, share.tenant_id)
        live = await to_thread.run_sync(lambda: self.conversations.get_meta(share.tenant_id, share.conversation_id))
        if tenant is None or tenant.sharing_disabled or live is None:
            raise ShareNotFoundError()
        return SharedConversation.of(share)
