"""`create_app(settings)`: the gateway FastAPI app, identical locally (uvicorn) and deployed (Modal asgi_app)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI
from opentelemetry.sdk.trace import SpanProcessor

from functions.account_data import AccountData
from functions.accounts.conversation_search import ConversationSearch
from functions.accounts.sessions import SessionSigner, load_or_create_secret
from functions.api.http_metrics import ResponseMetricsMiddleware
from functions.api.method_not_allowed import install_method_not_allowed
from functions.api.openapi_description import install_openapi_description
from functions.api.routers import (
    account,
    admin,
    batches,  # issue 48: /v1/batches
    canary_admin,  # issue 21: canary status and reset
    chat,
    completions,  # issue 48: /v1/completions
    embeddings,  # issue 22: /v1/embeddings
    feedback,
    files,  # issue 23: /v1/files
    health,
    models,
    moderations,
    rerank,  # issue 49: /v1/rerank
    responses,  # issue 48: /v1/responses
    session,
    shares,  # issue 50: share links
    streams,  # issue 21: resume and cancel a stream
    tokenizer,  # issue 48: vLLM's /tokenize, /detokenize, /tokenizer_info
    usage,
    vector_stores,  # issue 23: /v1/vector_stores
)
from functions.api.routers import conversations as conversation_routes
from functions.api.web_ui import SecurityHeadersMiddleware, mount_web_ui
from functions.batches.wiring import batch_metrics, install_batches
from functions.chat.conversation_turns import ConversationTurns
from functions.chat.delivery import Delivery
from functions.chat.images import ImageFetcher
from functions.chat.instructions import Instructions
from functions.chat.memory import MemoryService
from functions.chat.pipeline import ChatPipeline, ChatServices
from functions.chat.result_cache.cache import ResultCacheMetrics, result_cache_for
from functions.chat.server_tools.metrics import ServerToolMetrics
from functions.chat.server_tools.service import server_tools_for
from functions.chat.service import chat_service_for
from functions.chat.streams.resumable import ResumableStreams, ResumeMetrics, limits_from
from functions.chat.streams.shared_log import SharedStreamLog
from functions.chat.streams.takeover import StreamTakeovers
from functions.chat.structured_output import StructuredOutputs
from functions.chat.tool_arguments import ToolArguments
from functions.completions.service import CompletionsService
from functions.control.admission import Admission
from functions.control.canary import Canaries, CanaryMetrics, stable_versions
from functions.control.config_watch import watching
from functions.control.fleet_sync import FleetMetrics, FleetSync, new_instance_id
from functions.control.pool_overflow import PoolControl
from functions.control.request_accounting import Accounting
from functions.embedding_service import EmbeddingMetrics, embedding_service_for
from functions.feedback.service import FeedbackService
from functions.files.wiring import BodySizeLimits, ingestion_metrics, install_files, upload_limit_bytes
from functions.judging.shadow import shadow_judge_for
from functions.metrics.control import ControlMetrics
from functions.metrics.gateway import GatewayMetrics
from functions.rerank_service import RerankMetrics, rerank_service_for
from functions.responses.service import ResponsesService
from functions.retrieval.service import retrieval_for
from functions.safety.classifier.cascade import shipped_classifier
from functions.safety.classifier.output_classifier import OutputClassifier
from functions.safety.guards.configured import open_guard
from functions.safety.guards.embedded import EmbeddedGuard
from functions.safety.injection_screen import shipped_injection_screen
from functions.safety.log_redaction import install_log_redaction
from functions.safety.moderation_service import ModerationService
from functions.safety.pii import pii_detector
from functions.safety.pipeline import SafetyPipeline
from functions.safety.prefilter import PreFilter
from functions.sandbox.modal_sandboxes import CreateRemoteSandbox
from functions.shares.service import ShareService
from functions.spooled_writer import LedgerWriter, SafetyAuditWriter
from shared.fleet.tables import external_worker_urls, tables
from shared.operator_config import configure
from shared.settings import Settings
from shared.storage.accounts import TenantStore
from shared.storage.conversations import ConversationStore
from shared.storage.factory import (
    open_control_state,
    open_conversation_store,
    open_feedback_store,
    open_ledger,
    open_rate_limits,
    open_result_cache,
    open_safety_audit,
    open_share_store,
    open_tenant_store,
    open_tool_audit,
)
from shared.storage.indexed_conversations import search_index_of
from shared.tracing import install_trace_log_filter, trace_client, trace_server, tracer_provider
from shared.wire.http_errors import install_error_handlers
from shared.wire.worker_auth import FleetWorkerAuth


def context_tokens(settings: Settings) -> dict[str, int]:
    """Each pool's context length: the packaged model's locally, the deployed model's when deployed (and for a pool
    served deployed only)."""
    local = settings.environment == "local"
    return {
        name: pool.local.max_model_len if local and pool.local else pool.deployed.max_model_len
        for name, pool in tables().pools.items()
    } | {name: pool.max_model_len for name, pool in tables().external_pools.items()}


def session_signer(settings: Settings) -> SessionSigner:
    if settings.session_secret is not None:
        return SessionSigner(settings.session_secret.get_secret_value().encode())
    return SessionSigner(load_or_create_secret(settings.data_dir / "session_secret"))


def chat_pipeline_for(state: Any) -> ChatPipeline:
    """The chat pipeline over the services the lifespan just installed (functions/chat/pipeline.py)."""
    delivery = Delivery(
        chat=state.chat,
        turns=state.turns,
        safety=state.safety,
        structured=state.structured_outputs,
        tool_arguments=state.tool_arguments,
        result_cache=state.result_cache,
        canaries=state.canaries,
        resumable=state.resumable,
    )
    return ChatPipeline(
        ChatServices(
            chat=state.chat,
            turns=state.turns,
            accounting=state.accounting,
            safety=state.safety,
            server_tools=state.server_tools,
            structured=state.structured_outputs,
            retrieval=state.retrieval,
            canaries=state.canaries,
            pool_control=state.pool_control,
            result_cache=state.result_cache,
            delivery=delivery,
            shadow_judge=state.shadow_judge,
            injection=shipped_injection_screen(),
            images=ImageFetcher(state.settings.images),
        )
    )


def create_app(
    settings: Settings,
    *,
    store: TenantStore | None = None,
    conversations: ConversationStore | None = None,
    span_processors: Sequence[SpanProcessor] = (),
    create_modal_sandbox: CreateRemoteSandbox | None = None,
) -> FastAPI:
    """The gateway; `span_processors` also receive every span (tests read them in memory); `create_modal_sandbox`
    makes the Modal Sandboxes the python tool runs in when the operator chose that runner (the Modal app gives it)."""
    settings = configure(settings)  # the operator config file, if any (docs/configuration.md)
    instance_id = new_instance_id()  # this process in the fleet: its heartbeat, its spans
    spans = tracer_provider(settings.tracing, "gateway", instance_id, span_processors)
    worker_urls = {**settings.resolved_worker_urls(), **external_worker_urls()}  # hosted endpoints route like pools

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_log_redaction()  # no PII or secrets in the gateway's logs (after the server configured logging)
        install_trace_log_filter()  # a line written while serving a request names its trace
        timeout = httpx.Timeout(settings.worker.timeout_s, connect=settings.worker.connect_timeout_s)
        # Pool sized for many concurrent streams; keep-alive so each request skips the TCP handshake.
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=128)
        async with AsyncExitStack() as owned:

            def own(opened: Any) -> Any:
                owned.callback(opened.close)
                return opened

            app.state.store = store if store is not None else own(open_tenant_store(settings))
            app.state.conversations = (
                conversations if conversations is not None else own(open_conversation_store(settings))
            )
            app.state.ledger = own(open_ledger(settings))
            writer = LedgerWriter(app.state.ledger, settings.data_dir / "ledger-spool.jsonl")
            control: PoolControl = app.state.pool_control
            admission = Admission(own(open_rate_limits(settings)), context_tokens(settings), control.brownout.active)
            await owned.enter_async_context(control.brownout.running())
            # What gateway replicas share (docs/operations.md "Shared control state"), synced every round.
            control_state = open_control_state(settings)
            owned.push_async_callback(control_state.aclose)
            fleet = FleetSync(control_state, settings.control_state, app.state.fleet_metrics, instance_id=instance_id)
            app.state.fleet = await owned.enter_async_context(fleet.running())
            control.brownout.shared_by(control_state, fleet.instance_id, settings.control_state.liveness_s)
            await fleet.joined("brownout", control.brownout.sync)

            async def share_pools() -> None:  # each gateway admits its share of every pool's places
                control.share_among(fleet.size)

            await fleet.joined("pool-share", share_pools)
            app.state.accounting = Accounting(admission, writer, app.state.metrics)
            app.state.turns = ConversationTurns(app.state.conversations, context_tokens(settings))
            app.state.safety_audit = own(open_safety_audit(settings))
            audit = SafetyAuditWriter(app.state.safety_audit, settings.data_dir / "safety-audit-spool.jsonl")
            # Requests for the fleet's own workers carry the worker credential; nothing else sees it.
            workers = FleetWorkerAuth(settings.own_worker_urls(), settings.worker.credential_headers())
            client = await owned.enter_async_context(httpx.AsyncClient(timeout=timeout, limits=limits, auth=workers))
            trace_client(client, spans)  # every worker, guard, embedding and judge call continues the trace
            owned.callback(spans.shutdown)  # after the client closed: the spans still batched are exported
            app.state.http = client
            classifier = shipped_classifier(settings.guard.sentence_reads)
            embedded = EmbeddedGuard(PreFilter(classifier))
            app.state.guard = open_guard(settings, embedded, client, app.state.metrics)
            output = OutputClassifier.load() if settings.guard.output_check else None
            app.state.safety = SafetyPipeline(app.state.guard, pii_detector(), audit, app.state.metrics, output)
            app.state.moderation = ModerationService(app.state.guard, app.state.accounting, classifier.table)
            app.state.sessions = session_signer(settings)
            app.state.feedback = own(open_feedback_store(settings))
            app.state.feedback_service = FeedbackService(
                app.state.conversations,
                app.state.feedback,
                app.state.ledger,
                lambda: (app.state.safety.policy_version, app.state.safety.post_policy_version),
                app.state.metrics,
                chat_pools=worker_urls.keys(),
            )
            result_store = own(open_result_cache(settings))
            app.state.account_data = AccountData(
                app.state.conversations, app.state.feedback, result_store, tenants=app.state.store
            )
            app.state.instructions = Instructions(app.state.store, app.state.conversations, app.state.safety)
            app.state.memory = MemoryService(app.state.store, app.state.instructions)
            share_store = own(open_share_store(settings))
            index = search_index_of(app.state.conversations)
            app.state.conversation_search = ConversationSearch(app.state.conversations, index)
            app.state.shares = ShareService(share_store, app.state.conversations, app.state.store, pii_detector())
            app.state.account_data.shares = share_store
            resume_limits = limits_from(settings)
            shared_streams = SharedStreamLog(
                control_state,
                fleet,
                settings.control_state,
                max_bytes=resume_limits.response_max_bytes,
                ttl_s=resume_limits.ttl_s,
            )
            app.state.resumable = ResumableStreams(resume_limits, app.state.resume_metrics, shared=shared_streams)
            fleet.every_sync("stream-stops", app.state.resumable.apply_stops)
            # Unwound before the HTTP client closes: streams still generating are aborted and their books closed.
            owned.push_async_callback(app.state.resumable.aclose)
            deployed = settings.environment == "deployed"
            versions = stable_versions(deployed=deployed)
            app.state.canaries = Canaries(settings.canaries, versions, app.state.canary_metrics, shared=control_state)
            # A rollback the fleet made (before a restart too) holds from the first request.
            await fleet.joined("canaries", app.state.canaries.sync)
            # A pool's canary replicas are a ring of their own (functions/control/canary.py chooses the version).
            rings = {**worker_urls, **app.state.canaries.worker_urls()}
            app.state.chat = chat_service_for(settings, rings, client, app.state.metrics)
            # Deterministic answers served again (docs/result-cache.md).
            app.state.result_cache = result_cache_for(settings, result_store, app.state.result_cache_metrics)
            app.state.embeddings = embedding_service_for(
                settings, client, app.state.accounting, app.state.embedding_metrics, app.state.chat.failover
            )
            app.state.rerank = rerank_service_for(
                settings, client, app.state.accounting, app.state.rerank_metrics, app.state.chat.failover
            )
            # A worker one gateway found dead is skipped by all of them (functions/control/replica_breakers.py).
            for scope, breakers in (
                ("chat", app.state.chat.router.breakers),
                ("embeddings", app.state.embeddings.router.breakers),
                ("rerank", app.state.rerank.router.breakers),
            ):
                breakers.shared_by(control_state, scope)
                fleet.every_sync(f"breakers-{scope}", breakers.sync)
            # Entered after the HTTP client, so its workers are cancelled before the client closes.
            shadow = shadow_judge_for(settings, client, app.state.metrics, control_state)
            app.state.shadow_judge = await owned.enter_async_context(shadow)
            if settings.config_file is not None:  # limits and tiers change without a restart
                await owned.enter_async_context(watching(settings.config_file))
            # Files and vector stores (docs/files.md): ingestion left in progress by a previous process resumes.
            await install_files(app.state, settings, app.state.store, app.state.embeddings, owned)
            # Server-side tools (docs/server-tools.md): quotas in the shared limits store, runs audited, the python
            # tool's sandbox places counted in the shared control state (docs/sandbox.md), its files the caller's.
            app.state.server_tools = server_tools_for(
                settings.server_tools,
                settings.data_dir,
                admission.store,
                own(open_tool_audit(settings)),
                app.state.server_tool_metrics,
                app.state.safety.pii.redact,
                control_state=control_state,
                files=app.state.files_service,
                create_modal_sandbox=create_modal_sandbox,
            )
            app.state.retrieval = retrieval_for(app.state)  # chat's retrieval over the stores just installed
            app.state.chat_pipeline = chat_pipeline_for(app.state)
            app.state.completions = CompletionsService(
                app.state.chat, app.state.accounting, app.state.safety, app.state.pool_control
            )
            app.state.responses = ResponsesService(app.state.chat_pipeline, app.state.conversations)
            # Batches (docs/batches.md): lines run through the services above; left running, they resume.
            install_batches(app.state, settings, owned)
            # Streams whose gateway died are finished by another (functions/chat/streams/takeover.py).
            takeovers = StreamTakeovers(
                shared_streams,
                app.state.chat.workers,
                app.state.accounting,
                app.state.turns,
                app.state.safety,
                app.state.metrics,
                app.state.resume_metrics,
            )
            owned.push_async_callback(takeovers.aclose)
            fleet.every_sync("stream-takeovers", takeovers.adopt_orphans)
            app.state.takeovers = takeovers
            yield

    app = FastAPI(title="fleetchat", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.worker_urls = worker_urls
    app.state.metrics = GatewayMetrics()
    # Registered at once (not at start-up), so the app's registry holds every metric the alert rules name.
    app.state.resume_metrics = ResumeMetrics(app.state.metrics.registry)
    app.state.canary_metrics = CanaryMetrics(app.state.metrics.registry)
    app.state.fleet_metrics = FleetMetrics(app.state.metrics.registry)
    app.state.server_tool_metrics = ServerToolMetrics(app.state.metrics.registry)
    app.state.result_cache_metrics = ResultCacheMetrics(app.state.metrics.registry)
    app.state.embedding_metrics = EmbeddingMetrics(app.state.metrics.registry)
    app.state.rerank_metrics = RerankMetrics(app.state.metrics.registry)
    app.state.ingestion_metrics = ingestion_metrics(app.state.metrics.registry)
    app.state.batch_metrics = batch_metrics(app.state.metrics.registry)
    app.state.tool_arguments = ToolArguments(app.state.metrics.registry)
    app.state.structured_outputs = StructuredOutputs(app.state.metrics.registry)
    # Places per pool, priority queues, overflow and brownout (docs/reliability-control.md).
    control_metrics = ControlMetrics(app.state.metrics.registry)
    app.state.pool_control = PoolControl.from_settings(settings, worker_urls, control_metrics)
    # Every stream's time to first token feeds its pool's brownout control (functions/control/slo_observation.py).
    app.state.metrics.first_token_listeners.append(app.state.pool_control.record_first_token)
    # Uploads to /v1/files have their own bound (the largest file a tier accepts); every other body, the setting's.
    app.add_middleware(BodySizeLimits, max_bytes=settings.max_body_bytes, upload_max_bytes=upload_limit_bytes())
    app.add_middleware(SecurityHeadersMiddleware)
    # Outermost: counts every response as the client gets it (the body-size 413 included).
    app.add_middleware(ResponseMetricsMiddleware, metrics=app.state.metrics, templates=lambda: app.openapi()["paths"])
    install_error_handlers(app)
    routers = (
        chat,
        streams,
        moderations,
        conversation_routes,
        shares,
        feedback,
        account,
        usage,
        session,
        admin,
        models,
    )
    served = (
        completions,
        responses,
        batches,
        tokenizer,
        canary_admin,
        embeddings,
        rerank,
        files,
        vector_stores,
        health,
    )
    for module in (*routers, *served):
        app.include_router(module.router)
    mount_web_ui(app, settings.web_dist_dir)
    install_method_not_allowed(app)
    install_openapi_description(app)  # real error statuses, no phantom 422 (functions/api/openapi_description.py)
    trace_server(app, spans)  # last: its trace-id middleware wraps every other, so every response carries the id
    return app
