"""Share links: the owner revokes one (`DELETE /v1/shares/{id}`); anyone with a link reads it, as JSON
(`GET /v1/shared/{token}`) or as a page (`GET /s/{token}`), without a key. Making and listing a conversation's links
is under `/v1/conversations/{id}/shares` (functions/api/routers/conversations.py)."""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import HTMLResponse, PlainTextResponse, Response

from functions.accounts.auth import CurrentCaller
from functions.api.deps import ShareServiceDep
from functions.api.openapi_description import error_responses
from functions.shares.service import ShareNotFoundError
from shared.service_api.share_api import SharedConversation, ShareDeleted

router = APIRouter(tags=["shares"])

ShareId = Annotated[str, Path(pattern=r"^shr_[0-9a-f]{32}$")]
TOKEN = Annotated[str, Path(min_length=16, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
NOINDEX = {"x-robots-tag": "noindex, nofollow", "cache-control": "no-store"}
STYLESHEET = """
body { margin: 0; font: 16px/1.55 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f1f23; background: #fff; }
main { max-width: 760px; margin: 0 auto; padding: 24px 16px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; overflow-wrap: anywhere; }
.meta { color: #6b6b75; font-size: 13px; margin: 0 0 24px; }
.message { margin: 0 0 18px; }
.role { font-size: 12px; font-weight: 600; text-transform: uppercase; letter-spacing: .04em; color: #6b6b75; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
.user .text { background: #f1f1f3; border-radius: 14px; padding: 10px 14px; }
@media (prefers-color-scheme: dark) {
  body { color: #ececf1; background: #17171a; } .user .text { background: #2a2a30; } .meta, .role { color: #a0a0aa; }
}
"""


@router.delete("/v1/shares/{share_id}", responses=error_responses(404))
async def revoke_share(share_id: ShareId, caller: CurrentCaller, shares: ShareServiceDep) -> ShareDeleted:
    """Revoke a link at once: from now on it is a 404."""
    await shares.revoke(caller, share_id)
    return ShareDeleted(id=share_id)


@router.get("/v1/shared/{token}", responses=error_responses(404))
async def read_shared(token: TOKEN, shares: ShareServiceDep, response: Response) -> SharedConversation:
    """What a share link shows (no key: the unguessable token is the permission)."""
    response.headers.update(NOINDEX)
    return await shares.open(token)


@router.get("/s/share.css", include_in_schema=False)
async def shared_page_style() -> PlainTextResponse:
    return PlainTextResponse(STYLESHEET, media_type="text/css", headers={"cache-control": "public, max-age=3600"})


@router.get("/s/{token}", include_in_schema=False, response_model=None)
async def shared_page(token: TOKEN, shares: ShareServiceDep) -> HTMLResponse:
    """The read-only page of a link: the snapshot as text (no script; the service's CSP; never indexed)."""
    try:
        shared = await shares.open(token)
    except ShareNotFoundError:
        return HTMLResponse(
            _page("Link not found", "<p>This link was revoked, has expired, or never existed.</p>"), 404, NOINDEX
        )
    made = datetime.fromtimestamp(shared.created_at, UTC).strftime("%d %b %Y")
    expires = datetime.fromtimestamp(shared.expires_at, UTC).strftime("%d %b %Y")
    body = [
        f'<p class="meta">A snapshot shared on {made}; the link works until {expires}. Read-only.</p>',
        *(
            f'<section class="message {m.role}"><div class="role">{"You" if m.role == "user" else "Assistant"}</div>'
            f'<div class="text">{html.escape(m.content)}</div></section>'
            for m in shared.messages
        ),
    ]
    return HTMLResponse(_page(shared.title or "Shared conversation", "\n".join(body)), headers=NOINDEX)


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="robots" content="noindex, nofollow">'
        f'<title>{html.escape(title)} · fleetchat</title><link rel="stylesheet" href="/s/share.css"></head>'
        f"<body><main><h1>{html.escape(title)}</h1>{body}</main></body></html>"
    )
