"""`/v1/batches` through the real gateway to the real llama.cpp workers, with the `openai` SDK as the client:
`files.create(purpose="batch")`, `batches.create` / `.retrieve` / `.list` / `.cancel`, the output and error files,
chat completions, responses, completions and moderations as batch endpoints (embeddings: tests/integration/files/),
the ledger (one entry per line, at the batch price), `/v1/usage` showing the batch price class, every body validated
against OpenAI's published schema, and bad input refused with nothing created."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import openai
import pytest
from referencing import Registry

from functions.batches.runner import line_request_id
from shared.fleet.tiers import Tier
from tests.conftest import Stack
from tests.support.openai_contract import openai_registry, violations
from tests.support.stack_reads import client, ledger

pytestmark = pytest.mark.slow

FINAL = ("completed", "failed", "expired", "cancelled")


@pytest.fixture(scope="module")
def registry() -> Registry:
    return openai_registry()


def _jsonl(requests: list[dict[str, Any]]) -> io.BytesIO:
    return io.BytesIO("".join(json.dumps(r) + "\n" for r in requests).encode())


def _line(custom_id: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def _finished(api: openai.OpenAI, batch_id: str, timeout_s: float = 240) -> Any:
    deadline = time.monotonic() + timeout_s
    while (batch := api.batches.retrieve(batch_id)).status not in FINAL:
        assert time.monotonic() < deadline, batch
        time.sleep(0.3)
    return batch


def _lines(api: openai.OpenAI, file_id: str | None) -> dict[str, dict[str, Any]]:
    if file_id is None:
        return {}
    return {line["custom_id"]: line for line in map(json.loads, api.files.content(file_id).text.splitlines())}


def test_a_chat_batch_answers_every_line_bills_each_once_at_the_batch_price(stack: Stack, registry: Registry) -> None:
    tenant_id, key = stack.new_tenant(Tier.PLUS, "batch-chat")
    api = client(stack, key)
    chat = "/v1/chat/completions"
    requests = [
        _line("capital", chat, {"model": "mini", "messages": [{"role": "user", "content": "Capital of France?"}],
                                "max_tokens": 12, "temperature": 0}),
        _line("colour", chat, {"model": "mini", "messages": [{"role": "user", "content": "Name a colour."}],
                               "max_tokens": 12, "seed": 7}),
        _line("bogus", chat, {"model": "mini", "messages": [{"role": "user", "content": "hi"}], "bogus_field": 1}),
    ]  # fmt: skip
    uploaded = api.files.create(file=("chat.jsonl", _jsonl(requests)), purpose="batch")
    assert uploaded.purpose == "batch"
    created = api.batches.create(
        input_file_id=uploaded.id, endpoint=chat, completion_window="24h", metadata={"job": "nightly"}
    )
    assert created.status == "validating" and created.id.startswith("batch_")
    assert created.expires_at is not None and created.expires_at - created.created_at == 24 * 3600
    batch = _finished(api, created.id)
    assert batch.status == "completed", batch
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (3, 2, 1)
    assert batch.model == "mini" and batch.metadata == {"job": "nightly"}
    assert batch.completed_at is not None and batch.in_progress_at is not None and batch.finalizing_at is not None

    output, errors = _lines(api, batch.output_file_id), _lines(api, batch.error_file_id)
    assert set(output) == {"capital", "colour"} and set(errors) == {"bogus"}
    for line in output.values():
        body = line["response"]["body"]
        assert line["response"]["status_code"] == 200 and line["error"] is None
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
        assert line["id"].startswith("batch_req_")
    refused = errors["bogus"]["response"]
    assert refused["status_code"] == 400 and "bogus_field" in refused["body"]["error"]["message"]
    output_file = api.files.retrieve(batch.output_file_id)  # type: ignore[arg-type]
    assert output_file.purpose == "batch_output"

    # One ledger entry per answered line, under the line's own request id, at the batch price; the refused line
    # reached no model and bills nothing.
    rows = [row for row in ledger(stack, tenant_id) if row["request_id"].startswith("batch_req_")]
    assert sorted(row["request_id"] for row in rows) == sorted(line_request_id(batch.id, i) for i in (0, 1))
    assert {row["price_class"] for row in rows} == {"batch"}
    usage = batch.usage
    assert usage is not None
    assert usage.input_tokens == sum(row["prompt_tokens"] for row in rows)
    assert usage.output_tokens == sum(row["completion_tokens"] for row in rows)
    report = api.get("/usage", cast_to=object)
    batch_days = [day for day in report["data"] if day["price_class"] == "batch"]  # type: ignore[index]
    assert sum(day["requests"] for day in batch_days) == 2

    listed = api.batches.list(limit=5)
    assert [b.id for b in listed.data] == [batch.id]
    found = violations(registry, "Batch", api.get(f"/batches/{batch.id}", cast_to=object))
    found += violations(registry, "ListBatchesResponse", api.get("/batches", cast_to=object))
    found += violations(registry, "OpenAIFile", api.get(f"/files/{batch.output_file_id}", cast_to=object))
    assert found == []

    with pytest.raises(openai.BadRequestError) as done:
        api.batches.cancel(batch.id)  # a finished batch cannot be cancelled
    assert done.value.code == "invalid_state"


def test_responses_completions_and_moderations_run_as_batches(stack: Stack) -> None:
    """(Embeddings as a batch endpoint: tests/integration/files/test_embeddings_api.py, beside an embedding worker.)"""
    _, key = stack.new_tenant(Tier.PLUS, "batch-endpoints")
    api = client(stack, key)
    cases = {
        "/v1/responses": [_line("r", "/v1/responses", {"model": "mini", "input": "Say hi.", "max_output_tokens": 8})],
        "/v1/completions": [_line("c", "/v1/completions", {"model": "mini", "prompt": "Once upon", "max_tokens": 6})],
        "/v1/moderations": [_line("m", "/v1/moderations", {"input": "How do I bake bread?"})],
    }
    batches = {}
    for endpoint, requests in cases.items():
        uploaded = api.files.create(file=("in.jsonl", _jsonl(requests)), purpose="batch")
        batches[endpoint] = api.batches.create(
            input_file_id=uploaded.id,
            endpoint=endpoint,  # type: ignore[arg-type]
            completion_window="24h",
        ).id
    results = {endpoint: _finished(api, batch_id) for endpoint, batch_id in batches.items()}
    for endpoint, batch in results.items():
        assert batch.status == "completed" and batch.request_counts.failed == 0, (endpoint, batch)
    response = _lines(api, results["/v1/responses"].output_file_id)["r"]["response"]["body"]
    assert response["object"] == "response" and response["output"]
    moderation = _lines(api, results["/v1/moderations"].output_file_id)["m"]["response"]["body"]
    assert moderation["results"][0]["flagged"] is False
    completion = _lines(api, results["/v1/completions"].output_file_id)["c"]["response"]["body"]
    assert completion["object"] == "text_completion" and completion["choices"][0]["text"] is not None


def test_a_bad_input_file_fails_the_batch_with_its_lines_named(stack: Stack) -> None:
    _, key = stack.new_tenant(Tier.PLUS, "batch-invalid")
    api = client(stack, key)
    body = {"model": "mini", "messages": [{"role": "user", "content": "hi"}]}
    requests = [
        _line("a", "/v1/chat/completions", body),
        _line("a", "/v1/chat/completions", body),  # a custom_id twice
        _line("b", "/v1/embeddings", body),  # another endpoint than the batch's
    ]
    uploaded = api.files.create(file=("bad.jsonl", _jsonl(requests)), purpose="batch")
    batch = _finished(api, api.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    ).id)  # fmt: skip
    assert batch.status == "failed" and batch.failed_at is not None
    assert batch.errors is not None
    assert [(e.code, e.line) for e in batch.errors.data or []] == [
        ("duplicate_custom_id", 2),
        ("mismatched_endpoint", 3),
    ]
    assert batch.output_file_id is None


def test_a_cancelled_batch_stops_and_keeps_what_it_answered(stack: Stack) -> None:
    _, key = stack.new_tenant(Tier.PLUS, "batch-cancel")
    api = client(stack, key)
    body = {"model": "mini", "messages": [{"role": "user", "content": "Count to three."}], "max_tokens": 8}
    requests = [_line(f"n{i}", "/v1/chat/completions", body) for i in range(40)]
    uploaded = api.files.create(file=("many.jsonl", _jsonl(requests)), purpose="batch")
    created = api.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
    cancelling = api.batches.cancel(created.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
    batch = _finished(api, created.id)
    assert batch.status == "cancelled" and batch.cancelled_at is not None
    assert batch.request_counts is not None and batch.request_counts.completed < 40
    assert api.batches.cancel(created.id).status == "cancelled"  # cancelling again changes nothing


def test_bad_requests_are_refused_and_create_nothing(stack: Stack) -> None:
    _, key = stack.new_tenant(Tier.PLUS, "batch-refusals")
    api = client(stack, key)
    notes = api.files.create(file=("notes.txt", io.BytesIO(b"plain notes")), purpose="assistants")
    with pytest.raises(openai.BadRequestError) as wrong_purpose:
        api.batches.create(input_file_id=notes.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert wrong_purpose.value.param == "input_file_id"
    with pytest.raises(openai.NotFoundError):
        api.batches.create(input_file_id="file-nosuchfile", endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.BadRequestError) as unknown:
        api.batches.create(
            input_file_id=notes.id, endpoint="/v1/chat/completions", completion_window="24h",
            extra_body={"priority": "high"},
        )  # fmt: skip
    assert "priority" in unknown.value.message
    with pytest.raises(openai.BadRequestError):
        api.batches.create(input_file_id=notes.id, endpoint="/v1/chat/completions", completion_window="1h")  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError) as not_jsonl:
        api.files.create(file=("requests.txt", io.BytesIO(b"{}\n")), purpose="batch")
    assert not_jsonl.value.code == "invalid_file"
    with pytest.raises(openai.NotFoundError):
        api.batches.retrieve("batch_0123456789abcdef")
    assert api.batches.list().data == []
