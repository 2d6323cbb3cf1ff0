"""Worker server logic against a scripted engine (real HTTP): stop strings, usage, and in-band engine failure."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import httpx
import openai
import pytest

from gpu_workers.engine import EngineError, EngineOutput, EngineStats, SamplingParams, TokenLogprobs
from gpu_workers.server.app import create_worker_app
from tests.support.servers import serve


class ScriptedEngine:
    """Emits one character per token from a fixed script; can fail after N tokens."""

    model_name = "mini"
    max_model_len = 64
    vocab_size = 0x110000  # every code point

    def __init__(self, script: str, fail_after: int | None = None, honours: frozenset[str] = frozenset()) -> None:
        self.script = script
        self.fail_after = fail_after
        self.aborted: list[str] = []
        self.honours = honours

    def tokenize_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True, continue_final: bool = False
    ) -> list[int]:
        return [ord(c) for m in messages for c in m["content"]]

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(chr(t) for t in token_ids)

    def token_bytes(self, token_id: int) -> bytes:
        return chr(token_id).encode()

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[EngineOutput]:
        finished = False
        try:
            tokens = [ord(c) for c in self.script][: params.max_tokens]
            for i, token in enumerate(tokens, start=1):
                if self.fail_after is not None and i > self.fail_after:
                    raise EngineError("device lost")
                finished = i == len(tokens)
                reason = ("length" if len(tokens) == params.max_tokens else "stop") if finished else None
                logprobs = None
                if params.logprobs is not None:  # the scripted token is certain; "?" is the runner-up
                    logprobs = [TokenLogprobs(token, -0.5, [(token, -0.5), (ord("?"), -2.0)][: params.logprobs])]
                yield EngineOutput([token], finished, reason, cached_tokens=0, generated_total=i, logprobs=logprobs)
        finally:
            if not finished:
                self.aborted.append(request_id)

    def stats(self) -> EngineStats:
        return EngineStats(0, 0, 0.0, 0, 0)

    def shutdown(self) -> None:
        pass


def test_stop_string_truncates_and_aborts_the_engine_request() -> None:
    engine = ScriptedEngine("Hello world. Goodbye.")
    with serve(create_worker_app(engine)) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        reply = api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "hi"}], stop=["."])
    assert reply.choices[0].message.content == "Hello world"
    assert reply.choices[0].finish_reason == "stop"
    assert len(engine.aborted) == 1, "generation must stop once the stop string matched"


def test_stream_usage_counts_generated_tokens() -> None:
    with serve(create_worker_app(ScriptedEngine("abcdef"))) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        chunks = list(
            api.chat.completions.create(
                model="mini",
                messages=[{"role": "user", "content": "hey"}],
                max_tokens=4,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "abcd"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (3, 4)


def test_engine_failure_mid_stream_is_an_error_event_not_a_silent_cut() -> None:
    with serve(create_worker_app(ScriptedEngine("abcdef", fail_after=2))) as url:
        raw = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "mini", "messages": [{"role": "user", "content": "x"}], "stream": True},
            timeout=10,
        )
        events = [e for e in raw.text.split("\n\n") if e.strip()]
        assert events[-2].startswith("event: error") and "device lost" in events[-2]
        assert events[-1] == "data: [DONE]"
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIError, match="device lost"):
            list(api.chat.completions.create(model="mini", messages=[{"role": "user", "content": "x"}], stream=True))


def test_prompt_plus_max_tokens_over_context_is_400() -> None:
    with serve(create_worker_app(ScriptedEngine("ab"))) as url:
        response = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "mini", "messages": [{"role": "user", "content": "x" * 10}], "max_tokens": 60},
            timeout=10,
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


def test_a_parameter_the_engine_cannot_honour_or_a_token_outside_its_vocabulary_is_400() -> None:
    with serve(create_worker_app(ScriptedEngine("ab"))) as url:
        base = {"model": "mini", "messages": [{"role": "user", "content": "x"}]}
        refused = httpx.post(f"{url}/v1/chat/completions", json={**base, "top_k": 4}, timeout=10)
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "top_k"
        assert refused.json()["error"]["code"] == "unsupported_parameter"
    with serve(create_worker_app(ScriptedEngine("ab", honours=frozenset({"logit_bias"})))) as url:
        outside = httpx.post(f"{url}/v1/chat/completions", json={**base, "logit_bias": {"1114112": 1}}, timeout=10)
        assert outside.status_code == 400
        assert outside.json()["error"]["param"] == "logit_bias"
        assert "out of vocabulary" in outside.json()["error"]["message"]


def test_log_probabilities_follow_the_text_they_belong_to_streamed_and_whole() -> None:
    engine = ScriptedEngine("Hi. Bye", honours=frozenset({"logprobs"}))
    with serve(create_worker_app(engine)) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "x"}]
        whole = api.chat.completions.create(model="mini", messages=messages, logprobs=True, top_logprobs=2, stop=[" B"])
        chunks = list(
            api.chat.completions.create(model="mini", messages=messages, logprobs=True, top_logprobs=1, stream=True)
        )
    assert whole.choices[0].message.content == "Hi."
    content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [entry.token for entry in content][:3] == ["H", "i", "."]
    assert content[0].top_logprobs[1].token == "?" and content[0].bytes == [ord("H")]
    streamed = [
        entry.token
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for entry in c.choices[0].logprobs.content or []
    ]
    assert "".join(streamed) == "Hi. Bye" == "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
