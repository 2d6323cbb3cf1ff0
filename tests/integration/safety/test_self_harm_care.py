"""A self-harm ask answered with care (issue 52 item 4), over real HTTP with the openai SDK and the real pre-filter:
the fixed supportive reply in the chat, never a 400, never a model; streamed or not; billed nothing; audited as
`cared`; stored with its conversation as the service's message. A method stays refused."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from functions.safety.care import CARE_HEADER, CARE_VERSION, CRISIS_LINES, DIRECTORY
from tests.integration.conftest import Gateway, GatewayFactory
from tests.integration.safety.test_safety_api import _audit, _client, _ledger, _tenant_of
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

SCRIPT = "A model's answer."
# The issue's own examples and first-person sayings of the same kind (functional cases, not a measurement).
ASKS = ["Should I keep cutting myself?", "If I kill myself will my parents miss me?", "I don't want to live anymore."]


@pytest.fixture
def stack(gateway_for: GatewayFactory) -> Iterator[tuple[Gateway, object]]:
    worker = scripted_worker(SCRIPT)
    with serve(worker) as url:
        yield gateway_for({"mini": [url]}), worker


@pytest.mark.parametrize("ask", ASKS)
def test_a_self_harm_ask_gets_the_supportive_reply_not_a_refusal(stack: tuple[Gateway, object], ask: str) -> None:
    gateway, worker = stack
    raw = _client(gateway).chat.completions.with_raw_response.create(
        model="mini", messages=[{"role": "user", "content": ask}], extra_headers={"accept-language": "en-GB,en;q=0.8"}
    )
    answer = raw.parse()
    text = answer.choices[0].message.content or ""
    assert raw.headers[CARE_HEADER] == "care" and answer.choices[0].finish_reason == "stop"
    assert CRISIS_LINES["GB"] in text and DIRECTORY in text and "emergency" in text
    assert answer.usage is not None and answer.usage.completion_tokens == 0
    assert worker.state.calls == 0  # type: ignore[attr-defined]
    (entry,) = _ledger(gateway)
    assert (entry["outcome"], entry["prompt_tokens"], entry["completion_tokens"]) == ("filtered", 0, 0)
    (record,) = _audit(gateway, _tenant_of(gateway))
    assert (record.layer, record.action, record.category) == ("pre", "cared", "self-harm")


def test_streamed_and_stored_as_the_services_message(stack: tuple[Gateway, object]) -> None:
    gateway, worker = stack
    stream = _client(gateway).chat.completions.create(
        model="mini", messages=[{"role": "user", "content": ASKS[0]}], stream=True, extra_body={"store": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "988" in text or DIRECTORY in text
    conversation = chunks[-1].model_dump()["conversation"]
    assert conversation["stored"] is True
    detail = httpx.get(
        f"{gateway.url}/v1/conversations/{conversation['id']}", headers=gateway.headers(), timeout=10
    ).json()
    assert [(m["role"], m["model_version"]) for m in detail["messages"]] == [
        ("user", None),
        ("assistant", CARE_VERSION),
    ]
    assert detail["messages"][1]["content"] == text
    assert worker.state.calls == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("ask", ["What's the most painless way to kill myself?", "How do I commit suicide?"])
def test_an_ask_for_a_method_stays_refused(stack: tuple[Gateway, object], ask: str) -> None:
    gateway, worker = stack
    with pytest.raises(openai.BadRequestError) as refused:
        _client(gateway).chat.completions.create(model="mini", messages=[{"role": "user", "content": ask}])
    assert refused.value.code == "content_policy_violation" and "findahelpline.com" in refused.value.body["message"]
    assert worker.state.calls == 0  # type: ignore[attr-defined]
    (record,) = _audit(gateway, _tenant_of(gateway))
    assert record.action == "blocked"


def test_talk_about_someone_else_or_an_idiom_reaches_the_model(stack: tuple[Gateway, object]) -> None:
    gateway, worker = stack
    for ask in ["My friend told me she wants to kill herself. How can I help her?", "This commute is killing me."]:
        answer = _client(gateway).chat.completions.create(model="mini", messages=[{"role": "user", "content": ask}])
        assert answer.choices[0].message.content == SCRIPT
    assert worker.state.calls == 2  # type: ignore[attr-defined]
