"""Distributed tracing over real HTTP: a request continues its caller's W3C trace through the gateway into the worker
(the worker gets `traceparent`), the response and an error response name the trace (`x-fleetchat-trace-id`), the
spans reach an OTLP/HTTP collector (a loopback server decoding OpenTelemetry's protobuf) when the gateway stops, and
a log line written while serving names the trace."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from functions.app import create_app
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.sqlite.accounts import SQLiteStore
from shared.tracing import TRACE_ID_HEADER, TraceIdLogFilter
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def _recording_worker() -> tuple[FastAPI, list[dict[str, str]]]:
    worker, seen = stand_in_worker("Traced."), []

    @worker.middleware("http")
    async def record(request: Request, call_next: Callable) -> Response:  # type: ignore[type-arg]
        seen.append(dict(request.headers))
        return await call_next(request)

    return worker, seen


def _collector() -> tuple[FastAPI, list[ExportTraceServiceRequest]]:
    app, received = FastAPI(), []

    @app.post("/v1/traces")
    async def traces(request: Request) -> Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        received.append(export)
        return Response(status_code=200)

    return app, received


def _tenant_key(path: Path) -> tuple[SQLiteStore, str]:
    store = SQLiteStore(path / "fleetchat.db")
    tenant, key = store.create_tenant("traced", Tier.PLUS), new_api_key()
    store.add_api_key(tenant.id, hash_api_key(key), "traced")
    return store, key


def _ask(url: str, key: str, model: str = "mini", **extra: object) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}
    headers = {"authorization": f"Bearer {key}", "traceparent": TRACEPARENT}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def test_a_request_continues_its_callers_trace_into_the_worker_and_names_it(tmp_path: Path) -> None:
    worker, seen = _recording_worker()
    spans = InMemorySpanExporter()
    with serve(worker) as worker_url:
        store, key = _tenant_key(tmp_path)
        settings = Settings(data_dir=tmp_path, worker_urls={"mini": [worker_url]}, pools=["mini"])
        app = create_app(settings, store=store, span_processors=[SimpleSpanProcessor(spans)])
        with serve(app) as url:
            answered = _ask(url, key)
            streamed = _ask(url, key, stream=True)
            refused = _ask(url, key, model="no-such-model")
    assert answered.status_code == 200 and answered.headers[TRACE_ID_HEADER] == TRACE_ID
    assert streamed.status_code == 200 and streamed.headers[TRACE_ID_HEADER] == TRACE_ID
    assert refused.status_code == 404 and refused.headers[TRACE_ID_HEADER] == TRACE_ID  # errors name it too
    calls = [headers for headers in seen if "traceparent" in headers]
    assert len(calls) == 2 and all(h["traceparent"].startswith(f"00-{TRACE_ID}-") for h in calls)
    finished = spans.get_finished_spans()
    server = [s for s in finished if s.kind is SpanKind.SERVER]
    client = [s for s in finished if s.kind is SpanKind.CLIENT]
    assert {format(s.context.trace_id, "032x") for s in server + client} == {TRACE_ID}
    assert len(client) == 2 and all(s.parent is not None for s in client)  # children of the request's span
    assert {s.resource.attributes["service.name"] for s in finished} == {"gateway"}


def test_spans_reach_an_otlp_collector_and_probes_are_not_traced(tmp_path: Path) -> None:
    collector, received = _collector()
    with serve(stand_in_worker("Traced.")) as worker_url, serve(collector) as collector_url:
        store, key = _tenant_key(tmp_path)
        settings = Settings(
            data_dir=tmp_path,
            worker_urls={"mini": [worker_url]},
            pools=["mini"],
            tracing={"otlp_endpoint": collector_url, "service_namespace": "fleetchat-test"},
        )
        with serve(create_app(settings, store=store)) as url:
            assert _ask(url, key).status_code == 200
            assert httpx.get(f"{url}/health").status_code == 200
        # The gateway stopped: its batched spans were exported on the way out.
    exported = [
        span for export in received for rs in export.resource_spans for ss in rs.scope_spans for span in ss.spans
    ]
    assert {span.trace_id.hex() for span in exported} == {TRACE_ID}
    attributes = {a.key: a.value.string_value for export in received for rs in export.resource_spans
                  for a in rs.resource.attributes}  # fmt: skip
    assert attributes["service.namespace"] == "fleetchat-test" and attributes["service.name"] == "gateway"
    assert not any("/health" in span.name for span in exported)


def test_a_log_line_written_while_serving_names_the_trace(caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    logger = logging.getLogger("functions.tracing-test")
    logger.addFilter(TraceIdLogFilter())
    with caplog.at_level(logging.WARNING, logger="functions.tracing-test"):
        with TracerProvider().get_tracer("test").start_as_current_span("request") as span:
            logger.warning("replica %s failed", "http://w0")
            trace_id = format(span.get_span_context().trace_id, "032x")
        logger.warning("outside any request")
    assert caplog.messages == [f"replica http://w0 failed trace={trace_id}", "outside any request"]
    assert trace.get_current_span() is trace.INVALID_SPAN
