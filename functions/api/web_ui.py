"""The web chat's static files at `/` (index.html, hashed /assets/*) and the security headers on every response.

The page talks only to the public API on the same origin, so its Content-Security-Policy allows nothing but
'self': no inline script or style, no third-party origin, no framing. Model output is rendered by the page through
DOMPurify; the CSP is the second wall if that ever fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse, PlainTextResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=()",
}
NOT_BUILT = "The web chat is not built: run `make up` (or `cd web && npm ci && npm run build`)."


class SecurityHeadersMiddleware:
    """Adds SECURITY_HEADERS to every HTTP response (API answers included: a JSON body is never a page either)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def mount_web_ui(app: FastAPI, dist: Path) -> None:
    """`/` serves index.html (revalidated on every load), `/assets/*` the content-hashed bundle (cached for good)."""
    index = dist / "index.html"

    @app.get("/", include_in_schema=False, response_model=None)
    async def web_chat() -> Response:
        if not index.is_file():
            return PlainTextResponse(NOT_BUILT, status_code=404)
        return FileResponse(index, media_type="text/html", headers={"cache-control": "no-cache"})

    if (dist / "assets").is_dir():
        app.mount("/assets", ImmutableStaticFiles(directory=dist / "assets"), name="web-assets")


class ImmutableStaticFiles(StaticFiles):
    """Vite names every asset by its content hash, so a browser may keep it forever."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["cache-control"] = "public, max-age=31536000, immutable"
        return response
