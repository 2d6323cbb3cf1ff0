"""Distributed tracing with OpenTelemetry, for the gateway and the workers alike: a span for every request served
(W3C `traceparent` read from the caller) and for every HTTP call made (the worker, the guard, embeddings, the judge:
`traceparent` sent on), the trace id in log lines and on every response (`x-fleetchat-trace-id`, errors included), and
the spans exported over OTLP/HTTP when an endpoint is configured (docs/observability.md, "Traces").

OpenTelemetry's own FastAPI and httpx instrumentations do the spans and the propagation; this module only builds the
tracer provider from the settings and attaches them. Per-chunk ASGI send/receive spans are left out: a streamed
answer would otherwise make one span per token.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import httpx
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.settings import TracingOptions

TRACE_ID_HEADER = "x-fleetchat-trace-id"
# Requests not worth a trace: probes and scrapes (comma-separated regular expressions, OpenTelemetry's format).
UNTRACED_PATHS = "/health,/healthz,/metrics"


def tracer_provider(
    options: TracingOptions, part: str, instance: str, processors: Sequence[SpanProcessor] = ()
) -> TracerProvider:
    """A provider for one process: `part` is its service name (gateway, worker); spans go to the OTLP endpoint when
    one is configured, and to `processors` (tests read spans in memory)."""
    resource = Resource.create(
        {"service.namespace": options.service_namespace, "service.name": part, "service.instance.id": instance}
    )
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(options.sample_ratio)))
    if options.otlp_endpoint:
        exporter = OTLPSpanExporter(endpoint=f"{options.otlp_endpoint.rstrip('/')}/v1/traces")
        provider.add_span_processor(BatchSpanProcessor(exporter))
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def trace_server(app: FastAPI, provider: TracerProvider) -> None:
    """A span per request (continuing the caller's trace), and the trace id on every response."""
    app.add_middleware(TraceIdHeaderMiddleware)
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=provider, excluded_urls=UNTRACED_PATHS, exclude_spans=["receive", "send"]
    )


def trace_client(client: httpx.AsyncClient, provider: TracerProvider) -> None:
    """A span per call the client makes, with `traceparent` sent on."""
    HTTPXClientInstrumentor.instrument_client(client, tracer_provider=provider)


def current_trace_id() -> str | None:
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


class TraceIdHeaderMiddleware:
    """Puts the request's trace id on its response (inside the tracing middleware, where the span is current)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        trace_id = current_trace_id()

        async def with_trace_id(message: Message) -> None:
            if message["type"] == "http.response.start" and trace_id is not None:
                message.setdefault("headers", []).append((TRACE_ID_HEADER.encode(), trace_id.encode()))
            await send(message)

        await self.app(scope, receive, with_trace_id)


class TraceIdLogFilter(logging.Filter):
    """Adds ` trace=<id>` to a log line written while a traced request is being served."""

    def filter(self, record: logging.LogRecord) -> bool:
        trace_id = current_trace_id()
        if trace_id is not None and not getattr(record, "trace_id", None):
            record.trace_id = trace_id
            record.msg = f"{record.getMessage()} trace={trace_id}"
            record.args = ()
        return True


def install_trace_log_filter(loggers: Iterable[str] = ("", "functions", "gpu_workers", "uvicorn.error")) -> None:
    """On every handler of these loggers and on the loggers themselves (as the PII redaction filter goes)."""
    log_filter = TraceIdLogFilter()
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, TraceIdLogFilter) for f in logger.filters):
            logger.addFilter(log_filter)
        for handler in logger.handlers:
            if not any(isinstance(f, TraceIdLogFilter) for f in handler.filters):
                handler.addFilter(log_filter)
