"""The gateway's OpenAPI document as the API behaves: real error statuses with the OpenAI error object, no phantom 422,
and the ways to authenticate.

FastAPI documents a 422 for every route that takes input, but the gateway answers validation errors with 400 and the
OpenAI error object (shared/wire/http_errors.py). Here every operation gets the statuses it can really answer: those
that follow from how it is called (input: 400; a body: 413; a tenant's key or session: 401, and 403 for a session
without the CSRF header on a write; an admin key: 401) and those its router declares with `error_responses(...)` (404,
409, 429, 502, 503, ...). tests/integration/chat/test_openapi_fuzz.py runs schemathesis against a live gateway and fails
on any status or content type the document does not name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fastapi.routing
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from functions.accounts.auth import current_admin, current_caller
from functions.accounts.sessions import CSRF_HEADER, SESSION_COOKIE
from shared.errors import ErrorResponse

ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Invalid request: the OpenAI error object names the parameter (`param`) where it can.",
    401: "Missing or incorrect API key (or session).",
    403: "A write with a session cookie but without the CSRF header; or the caller may not do this.",
    404: "The model or the resource does not exist (or is not the caller's).",
    409: "The resource's state does not allow this now.",
    410: "What was asked for is gone (e.g. a stream's events were dropped from its replay buffer).",
    413: "The request body is larger than the gateway accepts.",
    429: "Rate limit or quota reached; `retry-after` says when to try again.",
    502: "The model worker failed the request.",
    503: "No capacity or no healthy worker right now; `retry-after` says when to try again.",
    504: "The model worker did not answer in time.",
}

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorResponse"}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route or router: these statuses answer with the OpenAI error object."""
    return {status: {"model": ErrorResponse, "description": ERROR_DESCRIPTIONS[status]} for status in statuses}


def _tree(dependant: Dependant) -> Iterator[Dependant]:
    """The route's dependant and every dependency below it (their parameters are the route's parameters too)."""
    yield dependant
    for dependency in dependant.dependencies:
        yield from _tree(dependency)


def api_routes(app: FastAPI) -> Iterator[Any]:
    """Every API route with its effective path, methods and dependencies (included routers' prefixes and dependencies
    applied): FastAPI >= 0.165 keeps included routers as wrappers and walks them with `iter_route_contexts`."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    for route in iterate(app.routes) if iterate is not None else app.routes:
        api_route = isinstance(route, APIRoute) or (hasattr(route, "dependant") and hasattr(route, "path_format"))
        if api_route and getattr(route, "include_in_schema", True):
            yield route


def _implied_statuses(route: Any) -> tuple[set[int], list[dict[str, list[str]]]]:
    """The error statuses and security requirements that follow from how the route is called."""
    tree = list(_tree(route.dependant))
    calls = {node.call for node in tree}
    statuses: set[int] = set()
    security: list[dict[str, list[str]]] = []
    has_body = any(node.body_params for node in tree)
    if has_body or any(node.path_params or node.query_params or node.header_params for node in tree):
        statuses.add(400)
    if has_body:
        statuses.add(413)
    if current_caller in calls:
        statuses.add(401)
        if not set(route.methods) <= _SAFE_METHODS:
            statuses.add(403)
        security = [{"apiKey": []}, {"session": []}]
    elif current_admin in calls:
        statuses.add(401)
        security = [{"adminKey": []}]
    return statuses, security


def _describe(operation: dict[str, Any], statuses: set[int], security: list[dict[str, list[str]]]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    responses.pop("422", None)
    for status in sorted(statuses):
        responses.setdefault(
            str(status),
            {
                "description": ERROR_DESCRIPTIONS[status],
                "content": {"application/json": {"schema": _ERROR_SCHEMA}},
            },
        )
    if security:
        operation["security"] = security


def _unused_validation_schemas(document: dict[str, Any]) -> None:
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


def install_openapi_description(app: FastAPI) -> None:
    """Replace `app.openapi` with the document described above (built once, then cached as FastAPI does)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = document.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        error_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, schema in error_schema.pop("$defs", {}).items():
            schemas.setdefault(name, schema)
        schemas.setdefault("ErrorResponse", error_schema)
        components["securitySchemes"] = {
            "apiKey": {"type": "http", "scheme": "bearer", "description": "A tenant's API key (`sk-...`)."},
            "session": {
                "type": "apiKey",
                "in": "cookie",
                "name": SESSION_COOKIE,
                "description": f"The web chat's signed session cookie (writes also need the `{CSRF_HEADER}` header).",
            },
            "adminKey": {"type": "http", "scheme": "bearer", "description": "An admin key (`fleetchat admin`)."},
        }
        for route in api_routes(app):
            statuses, security = _implied_statuses(route)
            path = document["paths"].get(route.path_format, {})
            for method in route.methods:
                if method.lower() in path:
                    _describe(path[method.lower()], statuses, security)
        _unused_validation_schemas(document)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
