"""Count every HTTP response by route template, method and status, and close each chat request's SLO observation.

A pure ASGI middleware installed outermost among the app's middlewares, so it sees what the client gets: the
OpenAI error objects of the exception handlers (shared/wire/http_errors.py), the body-size limit's 413, a stream by the
status it started with. An exception that escapes the app becomes Starlette's 500 (ServerErrorMiddleware, outside
every user middleware): counted as 500 here. A client gone before any response started is counted as 499 (nginx's
"client closed request"), so it is neither a success nor a server error.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

import anyio
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from functions.control import slo_observation
from functions.metrics.gateway import GatewayMetrics

log = logging.getLogger("fleetchat.gateway")

UNMATCHED_ROUTE = "unmatched"  # no route matched (a 404 for an unknown path): never the raw path
CLIENT_CLOSED = 499
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ResponseMetricsMiddleware:
    """`templates` lists the app's path templates (e.g. its OpenAPI paths): the route of a response sent before
    routing (the body-size 413) is found among them; otherwise the router names it on the scope."""

    def __init__(
        self, app: ASGIApp, metrics: GatewayMetrics, templates: Callable[[], Iterable[str]] | None = None
    ) -> None:
        self.app = app
        self.metrics = metrics
        self._templates = templates
        self._compiled: list[tuple[re.Pattern[str], str]] | None = None

    def route_template(self, scope: Scope) -> str:
        """The route's path template (`/v1/conversations/{conversation_id}`), never the raw path."""
        path = getattr(scope.get("route"), "path", None)
        if path is not None:
            return path or "/"
        if self._compiled is None:
            try:
                templates = list(self._templates()) if self._templates else []
            except Exception:  # a schema that cannot be generated must not break counting: such paths stay unmatched
                log.exception("route templates unavailable; responses sent before routing count as unmatched")
                templates = []
            self._compiled = [(compile_path(t)[0], t) for t in templates]
        return next((t for regex, t in self._compiled if regex.match(scope["path"])), UNMATCHED_ROUTE)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        observation, token = slo_observation.begin(self.metrics)
        status: int | None = None

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        except anyio.get_cancelled_exc_class():
            status = status or CLIENT_CLOSED
            raise
        except BaseException:
            status = status or 500
            raise
        finally:
            slo_observation.end(token)
            final = status or CLIENT_CLOSED  # returned without a response: the client went away first
            route = self.route_template(scope)
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.http_responses.labels(route, method, str(final)).inc()
            if route == slo_observation.CHAT_ROUTE:
                observation.response_ended(final)
