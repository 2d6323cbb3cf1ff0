"""The judge client against the scripted judge over real loopback HTTP: grades come back parsed, transient failures
are retried within bounds, and a judge that is down, slow or talks nonsense yields a verdict with an error."""

from __future__ import annotations

import threading

import httpx
import pytest
from pydantic import SecretStr

from functions.judging.client import JUDGE_CALL_HEADER, JudgeClient, JudgeEndpoint, judge_endpoint
from functions.judging.verdict import JudgeRequest
from shared.settings import Settings
from tests.support.processes import free_port
from tests.support.servers import serve
from tests.support.stand_ins.scripted_judge import scripted_judge

REQUEST = JudgeRequest(question="What is 2 + 2?", answer="It is 4.", reference="4", category="reasoning")


async def test_scores_come_back_parsed_with_the_rubric_sent() -> None:
    app = scripted_judge()
    with serve(app) as url:
        endpoint = JudgeEndpoint(base_url=f"{url}/v1", model="flagship", api_key=SecretStr("judge-key"))
        client = JudgeClient(endpoint)
        try:
            good = await client.judge(REQUEST)
            wrong = await client.judge(REQUEST.model_copy(update={"answer": "It is 5. WRONG"}))
        finally:
            await client.aclose()
    assert good.error is None and good.scores is not None
    assert (good.scores.helpfulness, good.scores.accuracy, good.scores.format) == (5, 5, 5)
    assert good.judge_model == "flagship" and '"accuracy": 5' in good.raw and good.latency_s > 0
    assert wrong.scores is not None and wrong.scores.accuracy == 1
    assert app.state.headers[0]["authorization"] == "Bearer judge-key"
    assert app.state.headers[0][JUDGE_CALL_HEADER] == "1"
    body = app.state.bodies[0]
    assert body["model"] == "flagship" and body["temperature"] == 0 and body["stream"] is False
    assert app.state.graded[0] == (REQUEST.question, REQUEST.answer)
    assert "<reference>\n4\n</reference>" in body["messages"][1]["content"]


async def test_a_shared_http_client_is_used_and_left_open() -> None:
    app = scripted_judge()
    with serve(app) as url:
        async with httpx.AsyncClient() as http:
            client = JudgeClient(JudgeEndpoint(base_url=f"{url}/v1", model="j"), http=http)
            verdict = await client.judge(REQUEST)
            await client.aclose()
            assert not http.is_closed
    assert verdict.scores is not None and app.state.calls == 1


async def test_transient_failures_are_retried_within_bounds() -> None:
    recovering = scripted_judge(fail_first=2)
    with serve(recovering) as url:
        client = JudgeClient(JudgeEndpoint(base_url=f"{url}/v1", model="j", attempts=3))
        verdict = await client.judge(REQUEST)
        await client.aclose()
    assert verdict.scores is not None and recovering.state.calls == 3

    down = scripted_judge(fail_first=10)
    with serve(down) as url:
        client = JudgeClient(JudgeEndpoint(base_url=f"{url}/v1", model="j", attempts=2))
        verdict = await client.judge(REQUEST)
        await client.aclose()
    assert verdict.scores is None and verdict.raw == "" and "503" in (verdict.error or "")
    assert down.state.calls == 2


async def test_unparseable_replies_and_dead_or_slow_judges_give_errors() -> None:
    prose = scripted_judge(reply=lambda question, answer: "This answer is pretty good, I would say.")
    with serve(prose) as url:
        client = JudgeClient(JudgeEndpoint(base_url=f"{url}/v1", model="j"))
        verdict = await client.judge(REQUEST)
        await client.aclose()
    assert verdict.scores is None and verdict.raw.startswith("This answer") and "no scores" in (verdict.error or "")

    with serve(prose) as url:
        wrong_url = JudgeClient(JudgeEndpoint(base_url=url, model="j"))  # the base URL without /v1
        verdict = await wrong_url.judge(REQUEST)
        await wrong_url.aclose()
    assert verdict.scores is None and "HTTP 404" in (verdict.error or "") and "/v1" in (verdict.error or "")

    dead = JudgeClient(JudgeEndpoint(base_url=f"http://127.0.0.1:{free_port()}/v1", model="j", attempts=2))
    verdict = await dead.judge(REQUEST)
    await dead.aclose()
    assert verdict.scores is None and "ConnectError" in (verdict.error or "")

    gate = threading.Event()
    stalled = scripted_judge(gate=gate)
    with serve(stalled) as url:
        try:
            client = JudgeClient(JudgeEndpoint(base_url=f"{url}/v1", model="j", timeout_s=0.2, attempts=1))
            verdict = await client.judge(REQUEST)
            await client.aclose()
        finally:
            gate.set()
    assert verdict.scores is None and "ReadTimeout" in (verdict.error or "")


def test_the_endpoint_comes_from_settings() -> None:
    pools = {"mini": ["http://127.0.0.1:9001"], "flagship": ["http://127.0.0.1:9002/", "http://127.0.0.1:9003"]}
    default = judge_endpoint(Settings(worker_urls=pools))
    assert (default.base_url, default.model, default.api_key) == ("http://127.0.0.1:9002/v1", "flagship", None)
    named = judge_endpoint(
        Settings(
            worker_urls=pools,
            judge={"url": "https://judge.example/v1", "model": "qwen", "api_key": "k"},
        )
    )
    assert named.base_url == "https://judge.example/v1" and named.model == "qwen"
    assert named.api_key is not None and named.api_key.get_secret_value() == "k"
    with pytest.raises(ValueError, match="FLEETCHAT_JUDGE_URL"):
        judge_endpoint(Settings(worker_urls={"mini": ["http://127.0.0.1:9001"]}))
