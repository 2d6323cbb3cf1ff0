"""`create_app(settings)`: the gateway FastAPI app, identical locally (uvicorn) and deployed (Modal asgi_app)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from functions.chat_service import ChatService
from functions.conversation_turns import ConversationTurns
from functions.gateway_metrics import GatewayMetrics
from functions.routers import account, chat, health, models
from functions.routers import conversations as conversation_routes
from functions.routing import PoolRouter
from functions.worker_client import WorkerClient
from shared.http_errors import BodySizeLimitMiddleware, install_error_handlers
from shared.settings import Settings
from shared.storage.base import TenantStore
from shared.storage.conversations import ConversationStore
from shared.storage.factory import open_conversation_store
from shared.storage.sqlite import SQLiteStore


def create_app(
    settings: Settings, *, store: TenantStore | None = None, conversations: ConversationStore | None = None
) -> FastAPI:
    worker_urls = settings.resolved_worker_urls()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        timeout = httpx.Timeout(settings.worker_timeout_s, connect=settings.worker_connect_timeout_s)
        # Pool sized for many concurrent streams; keep-alive so each request skips the TCP handshake.
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=128)
        own_store, own_conversations = store is None, conversations is None
        app.state.store = store if store is not None else SQLiteStore(settings.db_path)
        app.state.conversations = conversations if conversations is not None else open_conversation_store(settings)
        app.state.turns = ConversationTurns(app.state.conversations)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            app.state.http = client
            app.state.chat = ChatService(PoolRouter(worker_urls), WorkerClient(client), app.state.metrics)
            yield
        if own_store:
            app.state.store.close()
        if own_conversations:
            app.state.conversations.close()

    app = FastAPI(title="fleetchat", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.worker_urls = worker_urls
    app.state.metrics = GatewayMetrics()
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    for module in (chat, conversation_routes, account, models, health):
        app.include_router(module.router)
    return app
