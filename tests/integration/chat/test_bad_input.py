"""Bad input through the real gateway: each gets the right OpenAI error object and status; the service keeps serving."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Stack

pytestmark = pytest.mark.slow


def post(stack: Stack, key: str | None, content: bytes | None = None, json_body: Any = None) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}".strip()  # an empty key sends a bare "Bearer"
    return httpx.post(
        f"{stack.gateway_url}/v1/chat/completions", content=content, json=json_body, headers=headers, timeout=60
    )


def assert_error(response: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["type"] == ("invalid_request_error" if status < 500 else "server_error")
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return error


def still_serving(stack: Stack, key: str) -> None:
    api = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=key, max_retries=0)
    reply = api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
    assert reply.usage and reply.usage.completion_tokens >= 1


def test_invalid_json(stack: Stack, plus_key: str) -> None:
    assert_error(post(stack, plus_key, content=b'{"model": "mini", "messages": ['), 400, code="invalid_json")
    still_serving(stack, plus_key)


def test_missing_messages(stack: Stack, plus_key: str) -> None:
    assert_error(post(stack, plus_key, json_body={"model": "mini"}), 400, param="messages")
    assert_error(post(stack, plus_key, json_body={"model": "mini", "messages": []}), 400, param="messages")
    still_serving(stack, plus_key)


def test_out_of_range_parameters(stack: Stack, plus_key: str) -> None:
    base = {"model": "mini", "messages": [{"role": "user", "content": "x"}]}
    assert_error(post(stack, plus_key, json_body={**base, "temperature": 5}), 400, param="temperature")
    assert_error(post(stack, plus_key, json_body={**base, "n": 129}), 400, param="n")
    assert_error(post(stack, plus_key, json_body={**base, "max_tokens": 0}), 400, param="max_tokens")


def test_unknown_model_is_404(stack: Stack, plus_key: str) -> None:
    api = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=plus_key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        api.chat.completions.create(model="gpt-99", messages=[{"role": "user", "content": "hi"}])
    assert info.value.code == "model_not_found"
    still_serving(stack, plus_key)


def test_free_tier_cannot_use_flagship(stack: Stack, free_key: str, plus_key: str) -> None:
    api = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=free_key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as info:
        api.chat.completions.create(model="flagship", messages=[{"role": "user", "content": "hi"}])
    assert info.value.code == "model_not_found"
    assert chat_models(api) == ["mini"]
    plus = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=plus_key, max_retries=0)
    assert sorted(chat_models(plus)) == ["flagship", "mini"]


def chat_models(api: openai.OpenAI) -> list[str]:
    """The chat models of `/v1/models` (embedding models are listed for every tier beside them)."""
    return [m.id for m in api.models.list() if (getattr(m, "capabilities", None) or {}).get("chat_completions")]


def test_wrong_and_empty_keys_are_401(stack: Stack, plus_key: str) -> None:
    api = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="fc-not-a-real-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "hi"}])
    assert info.value.code == "invalid_api_key"
    body = {"model": "mini", "messages": [{"role": "user", "content": "hi"}]}
    assert_error(post(stack, "", json_body=body), 401)
    assert_error(post(stack, None, json_body=body), 401)
    models = httpx.get(f"{stack.gateway_url}/v1/models", headers={"authorization": "Bearer nope"}, timeout=10)
    assert_error(models, 401, code="invalid_api_key")
    still_serving(stack, plus_key)


def test_prompt_longer_than_context(stack: Stack, plus_key: str) -> None:
    api = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=plus_key, max_retries=0)
    huge = "hello " * 9000  # SmolLM2's context is 8192 tokens
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(model="mini", messages=[{"role": "user", "content": huge}])
    assert info.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(
            model="mini", messages=[{"role": "user", "content": "hello " * 5000}], max_tokens=4000, stream=True
        )
    assert info.value.code == "context_length_exceeded"
    still_serving(stack, plus_key)


def test_max_tokens_above_the_tiers_ceiling_is_refused(stack: Stack, plus_key: str) -> None:
    api = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=plus_key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "hi"}], max_tokens=9000)
    assert info.value.code == "invalid_value" and info.value.param == "max_tokens"
    assert "at most 4096" in info.value.message
    still_serving(stack, plus_key)


def test_body_over_the_size_limit_is_413(stack: Stack, plus_key: str) -> None:
    big = {"model": "mini", "messages": [{"role": "user", "content": "x" * 1_200_000}]}
    assert_error(post(stack, plus_key, json_body=big), 413)

    def chunked() -> Any:  # no content-length: the limit must hold while reading
        yield b'{"model": "mini", "messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"y" * 100_000
        yield b'"}]}'

    response = httpx.post(
        f"{stack.gateway_url}/v1/chat/completions",
        content=chunked(),
        headers={"authorization": f"Bearer {plus_key}", "content-type": "application/json"},
        timeout=60,
    )
    assert_error(response, 413)
    still_serving(stack, plus_key)


def test_health_and_metrics(stack: Stack) -> None:
    health = httpx.get(f"{stack.gateway_url}/healthz", timeout=10)
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    assert "127.0.0.1" not in health.text, "worker addresses must not leak"
    metrics = httpx.get(f"{stack.gateway_url}/metrics", timeout=10).text
    assert "fleetchat_gateway_requests_total" in metrics


def test_parameters_that_cannot_be_honoured_are_refused_not_dropped(stack: Stack, plus_key: str) -> None:
    base = {"model": "mini", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    error = assert_error(post(stack, plus_key, json_body={**base, "temprature": 0.5}), 400, param="temprature")
    assert error["message"] == "Unrecognized request argument supplied: temprature"
    # No pool honours the legacy `functions`: the message points at `tools`.
    functions = [{"name": "f", "parameters": {"type": "object"}}]
    error = assert_error(post(stack, plus_key, json_body={**base, "functions": functions}), 400, param="functions")
    assert "tools" in error["message"]
    # Sampling parameters every pool honours: out of range is the gateway's 400, a token id outside the vocabulary the
    # worker's, passed through unchanged.
    assert_error(post(stack, plus_key, json_body={**base, "presence_penalty": 2.5}), 400, param="presence_penalty")
    outside = {**base, "logit_bias": {"9999999": 1}}
    error = assert_error(post(stack, plus_key, json_body=outside), 400, param="logit_bias")
    assert "out of vocabulary" in error["message"]
    # At values that change nothing they are accepted, as are the hints fleetchat honours.
    accepted = {**base, "logprobs": False, "frequency_penalty": 0, "prompt_cache_key": "k-1", "safety_identifier": "u"}
    assert post(stack, plus_key, json_body=accepted).status_code == 200
    still_serving(stack, plus_key)
