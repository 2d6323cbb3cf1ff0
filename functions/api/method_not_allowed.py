"""405 answers that list every method the path supports in `Allow` (RFC 9110), with the OpenAI error object.

Starlette answers 405 from the first route whose path matches, so a path served by several routes (`GET` and `POST
/v1/session`) would list only that route's method; here the header lists the methods of every route on the path.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from functions.api.openapi_description import api_routes
from shared.errors import ErrorInfo, ErrorResponse


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods of every route on `path`; where a route names the path literally (`/v1/conversations/search`), only
    the literal routes' (a template's `/v1/conversations/{id}` does not serve it)."""
    matching = [route for route in api_routes(app) if route.path_regex.fullmatch(path)]
    literal = [route for route in matching if "{" not in route.path]
    methods: set[str] = set()
    for route in literal or matching:
        methods |= set(route.methods or ())
    return sorted(methods)


def install_method_not_allowed(app: FastAPI) -> None:
    @app.exception_handler(405)
    async def _method_not_allowed(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        allow = allowed_methods(app, request.url.path)
        message = f"Method {request.method} is not allowed here."
        body = ErrorResponse(error=ErrorInfo(message=message, type="invalid_request_error"))
        headers = {"allow": ", ".join(allow)} if allow else dict(exc.headers or {})
        return JSONResponse(body.model_dump(), status_code=405, headers=headers)
