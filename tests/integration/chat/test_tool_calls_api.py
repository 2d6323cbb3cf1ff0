"""Function calling through the real gateway (uvicorn on loopback) with the `openai` SDK as the client, in front of a
scripted worker that emits tool calls: round trips whole and streamed, 400s with `param`, argument validation with one
repair attempt and a clear error after it, and tool turns kept in a stored conversation."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.support.injection import held_out_attack_the_screen_flags
from tests.support.prom import labelled
from tests.support.servers import serve
from tests.support.stand_ins.tool_call_worker import call, tool_worker

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "Weather in Paris?"}]
GOOD = call("get_weather", '{"city": "Paris"}')
BAD = call("get_weather", '{"town": "Paris"}')
ANSWER = {"content": "It is sunny in Paris."}


def _api(gw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)


def _tool_metric(gw: Any, outcome: str) -> float:
    return labelled(gw.url, "fleetchat_gateway_tool_calls_total", pool="mini", outcome=outcome)


def _streamed(stream: Any) -> tuple[str, list[Any], list[str]]:
    chunks = [c for c in stream if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    deltas = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    return text, deltas, [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]


def test_round_trip_whole(gateway_for) -> None:
    app = tool_worker([{"tool_calls": [GOOD]}, ANSWER])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        api = _api(gw)
        first = api.chat.completions.create(model="mini", messages=ASK, tools=[WEATHER])
        assert first.choices[0].finish_reason == "tool_calls"
        [made] = first.choices[0].message.tool_calls or []
        assert (made.id, made.function.name, json.loads(made.function.arguments)) == ("call_1", "get_weather",
                                                                                        {"city": "Paris"})  # fmt: skip
        history = [*ASK, first.choices[0].message.model_dump(exclude_none=True)]
        history.append({"role": "tool", "tool_call_id": made.id, "content": '{"sky": "sunny"}'})
        final = api.chat.completions.create(model="mini", messages=history, tools=[WEATHER])
        assert final.choices[0].message.content == ANSWER["content"] and final.choices[0].finish_reason == "stop"
        sent = app.state.bodies[1]
        assert sent["tools"] == [WEATHER] and sent["messages"][-1]["tool_call_id"] == "call_1"
        assert sent["messages"][-2]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert _tool_metric(gw, "valid") == 1


def test_round_trip_streamed(gateway_for) -> None:
    app = tool_worker([{"tool_calls": [GOOD]}, ANSWER])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        api = _api(gw)
        _, deltas, finish = _streamed(api.chat.completions.create(model="mini", messages=ASK, tools=[WEATHER],
                                                                  stream=True))  # fmt: skip
        assert finish == ["tool_calls"]
        assert deltas[0].id == "call_1" and deltas[0].type == "function" and deltas[0].function.name == "get_weather"
        assert all(d.id is None and d.function.name is None for d in deltas[1:]), "id and name once, on the first"
        arguments = "".join(d.function.arguments or "" for d in deltas)
        assert json.loads(arguments) == {"city": "Paris"} and len(deltas) >= 3, "arguments in fragments"
        history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [GOOD]}]
        history.append({"role": "tool", "tool_call_id": "call_1", "content": "sunny"})
        text, deltas, finish = _streamed(api.chat.completions.create(model="mini", messages=history, tools=[WEATHER],
                                                                     stream=True))  # fmt: skip
        assert text == ANSWER["content"] and deltas == [] and finish == ["stop"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{**WEATHER, "function": {**WEATHER["function"], "parameters": {"type": 12}}}]},
         "tools[0].function.parameters"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"tools": [WEATHER], "messages": [*ASK, {"role": "tool", "tool_call_id": "nope", "content": "x"}]},
         "messages[1].tool_call_id"),
    ],
)  # fmt: skip
def test_malformed_tool_requests_are_400_with_param(gateway_for, extra: dict[str, Any], param: str) -> None:
    app = tool_worker([ANSWER])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        kwargs = {"messages": ASK, **extra}
        with pytest.raises(openai.BadRequestError) as refused:
            _api(gw).chat.completions.create(model="mini", **kwargs)
        assert refused.value.status_code == 400 and refused.value.body["param"] == param  # type: ignore[index]
        assert app.state.bodies == [], "a refused request never reaches a worker"


def test_invalid_arguments_get_one_repair_attempt(gateway_for) -> None:
    app = tool_worker([{"tool_calls": [BAD]}, {"tool_calls": [GOOD]}])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        reply = _api(gw).chat.completions.create(model="mini", messages=ASK, tools=[WEATHER])
        assert json.loads((reply.choices[0].message.tool_calls or [])[0].function.arguments) == {"city": "Paris"}
        repair = app.state.bodies[1]
        assert repair["stream"] is False and "get_weather" in repair["messages"][-1]["content"]
        assert "required property" in repair["messages"][-1]["content"], "the repair names the schema error"
        assert reply.usage is not None and reply.usage.prompt_tokens == 40, "the repair's tokens are billed too"
        assert _tool_metric(gw, "repaired") == 1


def test_invalid_arguments_after_the_repair_are_a_clear_error(gateway_for) -> None:
    app = tool_worker([{"tool_calls": [BAD]}])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        api = _api(gw)
        with pytest.raises(openai.UnprocessableEntityError) as failed:
            api.chat.completions.create(model="mini", messages=ASK, tools=[WEATHER])
        error = failed.value.body
        assert error["code"] == "invalid_tool_call" and error["param"] == "tools[0].function.parameters"  # type: ignore[index]
        assert "get_weather" in error["message"] and "required property" in error["message"]  # type: ignore[index]
        assert len(app.state.bodies) == 2, "exactly one repair attempt"
        stream = api.chat.completions.create(model="mini", messages=ASK, tools=[WEATHER], stream=True)
        with pytest.raises(openai.APIError, match="get_weather"):
            list(stream)
        assert len(app.state.bodies) == 4
        assert _tool_metric(gw, "invalid") == 2


def test_streamed_invalid_arguments_are_repaired_before_the_client_sees_them(gateway_for) -> None:
    app = tool_worker([{"tool_calls": [BAD]}, {"tool_calls": [GOOD]}])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        _, deltas, finish = _streamed(_api(gw).chat.completions.create(model="mini", messages=ASK, tools=[WEATHER],
                                                                       stream=True))  # fmt: skip
        assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Paris"}
        assert finish == ["tool_calls"]


def test_tool_turns_are_stored_and_rendered(gateway_for) -> None:
    app = tool_worker([{"tool_calls": [GOOD]}, ANSWER])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        api = _api(gw)
        first = api.chat.completions.create(model="mini", messages=ASK, tools=[WEATHER], extra_body={"store": True})
        conversation = (first.model_extra or {})["conversation"]
        assert conversation["stored"] is True
        result = {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        final = api.chat.completions.create(
            model="mini", messages=[result], tools=[WEATHER], extra_body={"conversation_id": conversation["id"]}
        )
        assert final.choices[0].message.content == ANSWER["content"]
        rendered = app.state.bodies[1]["messages"]
        assert [m["role"] for m in rendered] == ["system", "user", "assistant", "tool"]
        assert rendered[2]["tool_calls"] == [GOOD] and rendered[3]["tool_call_id"] == "call_1"
        stored = httpx.get(f"{gw.url}/v1/conversations/{conversation['id']}", headers=gw.headers(), timeout=10).json()
        messages = stored["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[1]["tool_calls"] == [GOOD] and messages[2]["tool_call_id"] == "call_1"
        markdown = httpx.get(
            f"{gw.url}/v1/conversations/{conversation['id']}/export",
            params={"format": "markdown"},
            headers=gw.headers(),
            timeout=10,
        ).text
        assert 'get_weather({"city": "Paris"})' in markdown and "call_1" in markdown


def test_a_tool_result_carrying_planted_instructions_reaches_the_model_quoted_and_is_audited(gateway_for) -> None:
    import sqlite3
    import time

    from functions.safety.untrusted_context import QUOTE_NOTE, QUOTED_HEADER

    attack = held_out_attack_the_screen_flags()
    app = tool_worker([ANSWER, ANSWER])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        history = [*ASK, {"role": "assistant", "tool_calls": [GOOD]}]
        planted = [*history, {"role": "tool", "tool_call_id": "call_1", "content": attack}]
        plain = [*history, {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'}]
        raw = _api(gw).chat.completions.with_raw_response.create(model="mini", messages=planted, tools=[WEATHER])
        assert raw.headers[QUOTED_HEADER] == "1" and raw.parse().choices[0].message.content == ANSWER["content"]
        sent = app.state.bodies[0]["messages"][-1]["content"]
        assert sent.startswith(QUOTE_NOTE) and attack in sent  # the data still there, fenced as data
        ordinary = _api(gw).chat.completions.with_raw_response.create(model="mini", messages=plain, tools=[WEATHER])
        assert QUOTED_HEADER not in ordinary.headers
        assert app.state.bodies[1]["messages"][-1]["content"] == '{"sky": "sunny"}'
    deadline = time.monotonic() + 10
    while True:  # the audit record is written behind the response
        with sqlite3.connect(gw.data_dir / "fleetchat.db") as db:
            rows = db.execute("SELECT layer, detector, action, category FROM safety_audit").fetchall()
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert rows == [("context", "injection_screen", "quoted", "prompt_injection")]


def test_tool_call_arguments_carrying_instructions_reach_the_model_quoted_as_json(gateway_for) -> None:
    """The arguments of a call in the history (the model wrote them, the client sends them back) are screened too:
    a flagged one is quoted inside a JSON object, so the worker still gets valid arguments."""
    from functions.safety.untrusted_context import ARGUMENTS_NOTE, QUOTED_HEADER

    attack = held_out_attack_the_screen_flags()
    planted_call = {**GOOD, "function": {**GOOD["function"], "arguments": json.dumps({"city": attack})}}
    app = tool_worker([ANSWER])
    with serve(app) as worker:
        gw = gateway_for({"mini": [worker], "flagship": [worker]})
        messages = [
            *ASK, {"role": "assistant", "tool_calls": [planted_call]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'},
        ]  # fmt: skip
        raw = _api(gw).chat.completions.with_raw_response.create(model="mini", messages=messages, tools=[WEATHER])
        assert raw.headers[QUOTED_HEADER] == "1"
    sent = app.state.bodies[0]["messages"][-2]["tool_calls"][0]["function"]["arguments"]
    quoted = json.loads(sent)["quoted_arguments"]
    assert (
        quoted.startswith(ARGUMENTS_NOTE) and attack in json.loads(quoted.split("\n", 2)[2].rsplit("\n", 1)[0])["city"]
    )
