"""The credential between the gateway and its own workers: the worker's check (an ASGI middleware, 401 without it) and
the gateway's side (an httpx `Auth` that adds it to every request for one of the fleet's own worker origins).

Locally every process on the machine can reach a loopback port, so a worker answers only a request that presents one
of its accepted keys (`Authorization: Bearer`). Deployed, vLLM's `--api-key` does the same check and Modal's proxy
auth (`Modal-Key` / `Modal-Secret`) a first one before any container starts. `/health` and `/metrics` stay open, as on
`vllm serve`: they reveal no content and run no model.
"""

from __future__ import annotations

import hmac
from collections.abc import Generator, Iterable, Mapping

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from shared.errors import AuthenticationError
from shared.wire.http_errors import error_json

OPEN_PATHS = frozenset({"/health", "/metrics"})


def presented_key(scope: Scope) -> str | None:
    """The bearer token of a request's `authorization` header, if any."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def key_accepted(presented: str | None, accepted: Iterable[str]) -> bool:
    """Whether `presented` is one of `accepted` (compared in constant time, each of them)."""
    if presented is None:
        return False
    given = presented.encode()
    return any(hmac.compare_digest(given, key.encode()) for key in accepted)  # no short cut: same time for each


class WorkerKeyMiddleware:
    """Refuses (401, an OpenAI error object) every request but `/health` and `/metrics` that does not present one of
    `keys`. With no keys the worker accepts anyone (a standalone worker, like `vllm serve` without `--api-key`)."""

    def __init__(self, app: ASGIApp, keys: frozenset[str]) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if key_accepted(presented_key(scope), self.keys):
            await self.app(scope, receive, send)
            return
        refused = AuthenticationError("This worker answers only its gateway: present the worker key as a bearer token.")
        response = error_json(refused)
        response.headers["www-authenticate"] = "Bearer"
        await response(scope, receive, send)


def origin(url: httpx.URL) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL: what decides whether a request goes to one of the fleet's workers."""
    return url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80)


class FleetWorkerAuth(httpx.Auth):
    """Adds the worker credential's headers to requests for the fleet's own worker origins, and to nothing else (an
    external pool's provider or a third-party guard never sees it)."""

    def __init__(self, origins: Iterable[str], headers: Mapping[str, str]) -> None:
        self.origins = frozenset(origin(httpx.URL(url)) for url in origins)
        self.headers = dict(headers)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.headers and origin(request.url) in self.origins:  # the request's parsed URL: no second parse
            for name, value in self.headers.items():
                request.headers[name] = value  # ours to set: no caller's header reaches a worker instead
        yield request
