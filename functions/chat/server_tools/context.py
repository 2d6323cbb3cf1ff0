"""Who a server tool runs for: the audit's tenant, key and request, whether the tenant's policy allows content in the
audit, and the caller whose files a run may read and keep."""

from __future__ import annotations

from dataclasses import dataclass

from functions.accounts.auth import Caller


@dataclass(frozen=True)
class RunContext:
    tenant_id: str
    key_id: str | None
    request_id: str
    audit_content: bool
    caller: Caller | None = None  # None: no files (a run outside a request's authority)
