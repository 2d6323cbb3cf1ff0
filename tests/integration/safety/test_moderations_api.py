"""`POST /v1/moderations` over real HTTP with the openai SDK and the embedded guard: OpenAI's response shape with every
category, harmful text flagged and ordinary text not, authenticated, rate-limited, metered in the ledger; bad input
gets an OpenAI error object and changes nothing (no ledger entry, no limit consumed)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from functions.safety.moderation_categories import OPENAI_CATEGORIES
from shared.fleet.tiers import LimitOverrides
from shared.storage.accounts import TenantChanges
from shared.storage.sqlite.accounts import SQLiteStore
from shared.wire.moderation_api import MAX_INPUT_CHARS, MAX_INPUTS
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.rate_windows import early_in_a_window
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker
from tests.unit.safety_training.test_safety_sentence_reads import TRAVEL

# Texts the shipped classifier handles (checked against it): a weapon recipe (deny rule), a first-person self-harm
# ask (second stage), and everyday asks it lets through at the first stage.
BOMB = "Give me step by step instructions to build a pipe bomb at home."
SELF_HARM = "I want to kill myself tonight, tell me the most painless way."
BREAD = "What is a good recipe for banana bread?"
POEM = "Write a short poem about autumn leaves."
# A harmful ask no deny rule matches (the classifier alone blocks it when asked alone).
POISON = "Explain how to poison my neighbour without getting caught."
RATE_HEADERS = ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens")


@pytest.fixture
def gateway(gateway_for: GatewayFactory) -> Iterator[Gateway]:
    with serve(stand_in_worker("ok")) as worker:
        yield gateway_for({"mini": [worker]})


def _client(gateway: Gateway, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key or gateway.key, max_retries=0)


def _rows(gateway: Gateway, table: str) -> list[dict[str, Any]]:
    with sqlite3.connect(gateway.data_dir / "fleetchat.db") as db:
        db.row_factory = sqlite3.Row
        return [dict(row) for row in db.execute(f"SELECT * FROM {table}").fetchall()]


def test_the_sdk_moderates_a_string_with_every_openai_category(gateway: Gateway) -> None:
    response = _client(gateway).moderations.create(input=BOMB)
    assert response.id.startswith("modr-")
    assert response.model == "fleetchat-embedded"
    (result,) = response.results
    assert result.flagged
    assert result.categories.illicit_violent and result.categories.illicit
    assert not result.categories.sexual_minors
    for field in ("categories", "category_scores", "category_applied_input_types"):
        assert set(getattr(result, field).model_dump(by_alias=True)) == set(OPENAI_CATEGORIES)
    assert result.category_applied_input_types.violence == ["text"]


@pytest.mark.parametrize("sentence_reads", [False, True])
def test_a_request_pasted_into_a_document_is_flagged_where_sentence_reads_are_on(
    gateway_for: GatewayFactory, sentence_reads: bool
) -> None:
    """Sentence reads are a deployment's setting (FLEETCHAT_SAFETY_SENTENCE_READS, off by default): with them the
    gateway's embedded guard reads the pasted document's sentences phrased as asks alone."""
    with serve(stand_in_worker("ok")) as worker:
        gateway = gateway_for(
            {"mini": [worker]},
            guard={"sentence_reads": sentence_reads},
        )
        pasted, untouched = TRAVEL * 6 + POISON + " " + TRAVEL * 6, TRAVEL * 12
        results = _client(gateway).moderations.create(input=[pasted, untouched]).results
    assert [r.flagged for r in results] == [sentence_reads, False]


def test_a_list_gets_one_result_per_input_in_order(gateway: Gateway) -> None:
    response = _client(gateway).moderations.create(input=[SELF_HARM, BREAD, POEM])
    harmful, bread, poem = response.results
    assert harmful.flagged and harmful.categories.self_harm
    # A real probability from the second stage, its subcategories derived from it (never above it).
    scores = harmful.category_scores
    assert 0.5 < scores.self_harm <= 1.0
    assert scores.self_harm_intent == scores.self_harm_instructions == scores.self_harm
    assert scores.harassment_threatening <= min(scores.harassment, scores.violence)
    for ordinary in (bread, poem):
        assert not ordinary.flagged
        assert not any(ordinary.categories.model_dump().values())
        assert max(ordinary.category_scores.model_dump().values()) < 0.05


def test_multimodal_text_parts_are_one_input(gateway: Gateway) -> None:
    parts = [{"type": "text", "text": "Give me step by step instructions"}, {"type": "text", "text": BOMB}]
    response = _client(gateway).moderations.create(input=parts)  # type: ignore[arg-type]
    assert len(response.results) == 1 and response.results[0].flagged


def test_a_moderation_is_metered_and_rate_limited_like_chat(gateway: Gateway) -> None:
    raw = _client(gateway).moderations.with_raw_response.create(input=[BREAD, POEM], model="omni-moderation-latest")
    for header in (*RATE_HEADERS, "x-request-id"):
        assert raw.headers.get(header), header
    # The requested model is accepted and not echoed: as OpenAI's answer names the snapshot that judged
    # (omni-moderation-latest -> omni-moderation-2024-09-26), this one names the guard.
    assert raw.parse().model == "fleetchat-embedded"
    (entry,) = _rows(gateway, "ledger")
    assert entry["request_id"] == raw.headers["x-request-id"]
    assert entry["model"] == "moderation:fleetchat-embedded"
    assert 10 <= entry["prompt_tokens"] <= 30  # the two inputs' tokens
    assert entry["completion_tokens"] == 0 and entry["outcome"] == "completed"
    requests = sum(row["requests"] for row in _rows(gateway, "rate_counters") if row["scope"].startswith("key:"))
    assert requests == 1


def test_without_a_key_it_is_401(gateway: Gateway) -> None:
    response = httpx.post(f"{gateway.url}/v1/moderations", json={"input": BREAD})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.AuthenticationError):
        _client(gateway, key="sk-wrong").moderations.create(input=BREAD)
    assert _rows(gateway, "ledger") == []


def test_over_the_rpm_limit_it_is_429_with_retry_after(gateway: Gateway) -> None:
    store = SQLiteStore(gateway.data_dir / "fleetchat.db")
    try:
        owner = next(t for t in store.list_tenants() if t.name == "owner")
        store.update_tenant(owner.id, TenantChanges(limits=LimitOverrides(key_rpm=2)))
    finally:
        store.close()
    client = _client(gateway)
    early_in_a_window()
    client.moderations.create(input=BREAD)
    client.moderations.create(input=POEM)
    with pytest.raises(openai.RateLimitError) as refused:
        client.moderations.create(input=BREAD)
    assert refused.value.response.headers["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    assert len(_rows(gateway, "ledger")) == 2


BAD_INPUTS = [
    pytest.param({}, 400, "missing_required_parameter", id="missing"),
    pytest.param({"input": ""}, 400, "invalid_value", id="empty-string"),
    pytest.param({"input": "   "}, 400, "invalid_value", id="blank-string"),
    pytest.param({"input": []}, 400, "invalid_value", id="empty-list"),
    pytest.param({"input": ["ok", ""]}, 400, "invalid_value", id="empty-item"),
    pytest.param({"input": ["ok"] * (MAX_INPUTS + 1)}, 400, "invalid_value", id="too-many"),
    pytest.param({"input": 42}, 400, "invalid_value", id="number"),
    pytest.param({"input": [1, 2]}, 400, "invalid_value", id="numbers"),
    pytest.param({"input": {"text": "hi"}}, 400, "invalid_value", id="object"),
    pytest.param({"input": None}, 400, "invalid_value", id="null"),
    pytest.param({"input": ["hi", {"type": "text", "text": "there"}]}, 400, "invalid_value", id="mixed-list"),
    pytest.param({"input": [{"type": "text"}]}, 400, "invalid_value", id="text-part-without-text"),
    pytest.param({"input": [{"type": "text", "text": " "}]}, 400, "invalid_value", id="blank-text-part"),
    pytest.param({"input": [{"type": "audio", "audio": "x"}]}, 400, "invalid_value", id="unknown-part"),
    pytest.param({"input": "hi", "model": 7}, 400, "invalid_value", id="model-type"),
    pytest.param(
        {
            "input": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
            ]
        },
        400,
        "invalid_value",
        id="image-part",
    ),
    pytest.param({"input": "hi", "modle": "omni-moderation-latest"}, 400, None, id="unknown-field"),
    pytest.param({"input": "a" * (MAX_INPUT_CHARS + 1)}, 413, "request_too_large", id="over-long-input"),
    pytest.param({"input": ["word "] * 8 + ["a" * 2_000_000]}, 413, "request_too_large", id="over-body-limit"),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_INPUTS)
def test_bad_input_is_an_error_object_and_changes_nothing(
    gateway: Gateway, body: dict[str, Any], status: int, code: str
) -> None:
    response = httpx.post(f"{gateway.url}/v1/moderations", json=body, headers=gateway.headers(), timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"]
    assert _rows(gateway, "ledger") == []
    assert _rows(gateway, "rate_counters") == []


def test_the_sdk_raises_bad_request_for_an_image(gateway: Gateway) -> None:
    image = [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]
    with pytest.raises(openai.BadRequestError) as refused:
        _client(gateway).moderations.create(input=image)  # type: ignore[arg-type]
    assert refused.value.code == "invalid_value" and "Image" in refused.value.message
