"""`/v1/responses` through the real gateway to the real llama.cpp workers, with the `openai` SDK as the client:
`responses.create` / `.stream` / `.parse` / `.retrieve` / `.delete` / `.input_items.list`, `previous_response_id`
continuing the stored conversation in place (its prefix cache hit) or forking it (two continuations at once are two
branches), function calls round-tripped,
resuming a stream by sequence number, the ledger, and bad input refused with nothing billed or stored."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from functions.responses.service import branch_of
from shared import metric_names as names
from shared.fleet.tiers import Tier
from tests.conftest import Stack
from tests.support.prom import sample
from tests.support.stack_reads import client, ledger, settled

pytestmark = pytest.mark.slow

INSTRUCTIONS = "You are a helpful assistant. Answer briefly."
OPENING = (
    "I am planning a slow two-week rail journey through Portugal and Spain next spring. I like small towns, "
    "regional food, long walks and quiet evenings. I do not drive. Please keep your answers short."
)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def stored_messages(api: openai.OpenAI, conversation_id: str) -> list[dict[str, Any]]:
    return api.get(f"/conversations/{conversation_id}", cast_to=object)["messages"]  # type: ignore[index]


def test_a_chain_of_responses_continues_one_conversation_and_hits_its_prefix_cache(stack: Stack) -> None:
    tenant_id, key = stack.new_tenant(Tier.PLUS, "responses-chain")
    api = client(stack, key)
    worker = stack.worker_urls["mini"][0]
    first = api.responses.create(
        model="mini", instructions=INSTRUCTIONS, input=OPENING, max_output_tokens=24, temperature=0
    )
    assert first.status in ("completed", "incomplete") and first.output_text
    assert first.object == "response" and first.id.startswith("resp_")
    assert first.instructions == INSTRUCTIONS and first.store is True
    assert first.usage is not None and first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens
    conversation = first.conversation
    assert conversation is not None

    hits_before = sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS))
    second = api.responses.create(
        model="mini",
        previous_response_id=first.id,
        instructions=INSTRUCTIONS,
        input="Where should I start?",
        max_output_tokens=24,
        temperature=0,
    )
    assert second.previous_response_id == first.id
    assert second.conversation is not None and second.conversation.id == conversation.id  # continued in place
    assert second.usage is not None
    cached = second.usage.input_tokens_details.cached_tokens
    assert sample(worker, names.counter_sample(names.PREFIX_CACHE_HITS)) - hits_before == cached
    assert cached >= 0.9 * first.usage.input_tokens, f"reused {cached} of the previous {first.usage.input_tokens}"

    messages = stored_messages(api, conversation.id)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[0]["content"] == INSTRUCTIONS and messages[-1]["content"] == second.output_text
    assert [m["response_id"] for m in messages if m["role"] == "assistant"] == [first.id, second.id]

    # Retrieved later, the response reads as it was created.
    again = api.responses.retrieve(second.id)
    assert again.output_text == second.output_text and again.usage == second.usage
    assert again.previous_response_id == first.id and again.status == second.status
    items = api.responses.input_items.list(second.id)
    assert [(i.type, i.content[0].text) for i in items.data] == [("message", "Where should I start?")]  # type: ignore[union-attr]

    rows = settled(stack, tenant_id, 2)
    assert [(r["prompt_tokens"], r["completion_tokens"]) for r in rows] == [
        (first.usage.input_tokens, first.usage.output_tokens),
        (second.usage.input_tokens, second.usage.output_tokens),
    ]


def test_an_earlier_response_or_new_instructions_fork_a_new_conversation(stack: Stack) -> None:
    api = client(stack, stack.new_key(Tier.PLUS, "responses-fork"))
    first = api.responses.create(model="mini", instructions=INSTRUCTIONS, input="Name a fruit.", max_output_tokens=8)
    second = api.responses.create(
        model="mini", previous_response_id=first.id, instructions=INSTRUCTIONS, input="Another.", max_output_tokens=8
    )
    assert first.conversation is not None and second.conversation is not None
    assert second.conversation.id == first.conversation.id

    # Continuing the first response again branches: the original conversation keeps both turns.
    branch = api.responses.create(
        model="mini",
        previous_response_id=first.id,
        instructions=INSTRUCTIONS,
        input="A vegetable?",
        max_output_tokens=8,
    )
    assert branch.conversation is not None and branch.conversation.id != first.conversation.id
    assert len(stored_messages(api, first.conversation.id)) == 5
    forked = stored_messages(api, branch.conversation.id)
    assert [m["content"] for m in forked[:3]] == [INSTRUCTIONS, "Name a fruit.", first.output_text]
    assert forked[3]["content"] == "A vegetable?"

    # Instructions are not carried over (OpenAI's rule): without them the fork has no system message.
    plain = api.responses.create(model="mini", previous_response_id=second.id, input="Thanks.", max_output_tokens=8)
    assert plain.conversation is not None and plain.conversation.id != first.conversation.id
    assert plain.instructions is None
    assert [m["role"] for m in stored_messages(api, plain.conversation.id)][:2] == ["user", "assistant"]


def test_store_false_is_stateless_and_a_deleted_response_is_gone(stack: Stack) -> None:
    api = client(stack, stack.new_key(Tier.PLUS, "responses-store"))
    unstored = api.responses.create(model="mini", input="Say yes.", max_output_tokens=4, store=False)
    assert unstored.store is False and unstored.conversation is None
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(unstored.id)
    with pytest.raises(openai.NotFoundError) as missing:
        api.responses.create(model="mini", previous_response_id=unstored.id, input="And?", max_output_tokens=4)
    assert missing.value.body["param"] == "previous_response_id"  # type: ignore[index]

    kept = api.responses.create(model="mini", input="Say no.", max_output_tokens=4)
    assert kept.conversation is not None
    api.responses.delete(kept.id)
    with pytest.raises(openai.NotFoundError):
        api.responses.retrieve(kept.id)
    # The turn stays in its conversation (deleting that removes it), without the response's record.
    messages = stored_messages(api, kept.conversation.id)
    assert messages[-1]["content"] == kept.output_text and messages[-1]["response_id"] is None


def test_a_function_call_round_trips_through_previous_response_id(stack: Stack) -> None:
    api = client(stack, stack.new_key(Tier.PLUS, "responses-tools"))
    asked = api.responses.create(
        model="mini",
        input="What is the weather in Paris?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=60,
        temperature=0,
    )
    calls = [item for item in asked.output if item.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and "city" in json.loads(call.arguments)  # type: ignore[union-attr]
    assert asked.tools[0].name == "get_weather"  # type: ignore[union-attr]

    answered = api.responses.create(
        model="mini",
        previous_response_id=asked.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature_c": 18}'}],  # type: ignore[union-attr]
        tools=[WEATHER],  # type: ignore[list-item]
        max_output_tokens=30,
        temperature=0,
    )
    assert answered.output_text
    assert answered.conversation is not None and asked.conversation is not None
    assert answered.conversation.id == asked.conversation.id
    roles = [m["role"] for m in stored_messages(api, answered.conversation.id)]
    assert roles == ["user", "assistant", "tool", "assistant"]

    # Streamed, the call arrives as output_item.added, argument deltas, then its done events.
    with api.responses.stream(
        model="mini",
        input="What is the weather in Lisbon?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="required",
        max_output_tokens=60,
        temperature=0,
        store=False,
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.done" in kinds
    assert kinds.index("response.output_item.added") < kinds.index("response.function_call_arguments.done")
    assert [item.type for item in final.output] == ["function_call"]


class Colour(BaseModel):
    name: str
    hex: str


def test_structured_output_parses_into_the_callers_type(stack: Stack) -> None:
    api = client(stack, stack.new_key(Tier.PLUS, "responses-parse"))
    parsed = api.responses.parse(
        model="mini", input="Give one colour with its hex code.", text_format=Colour, max_output_tokens=60
    )
    assert isinstance(parsed.output_parsed, Colour)
    assert parsed.text is not None and parsed.text.format.type == "json_schema"  # type: ignore[union-attr]


def test_a_stream_reads_as_the_response_it_builds_and_resumes_by_sequence_number(stack: Stack) -> None:
    key = stack.new_key(Tier.PLUS, "responses-stream")
    api = client(stack, key)
    with api.responses.stream(
        model="mini", input="Count from one to five.", max_output_tokens=30, temperature=0
    ) as stream:  # greedy: an answer with text every time (a sampled one may end at once)
        events = list(stream)
        final = stream.get_final_response()
    assert events[0].type == "response.created" and events[-1].type in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert deltas == final.output_text and final.output_text
    assert api.responses.retrieve(final.id).output_text == final.output_text

    # The events after a sequence number, from the gateway's buffer, as OpenAI's `starting_after` reads.
    headers = {"authorization": f"Bearer {key}"}
    url = f"{stack.gateway_url}/v1/responses/{final.id}?stream=true&starting_after=3"
    with httpx.stream("GET", url, headers=headers, timeout=60) as resumed:
        assert resumed.status_code == 200
        again = [json.loads(line[6:]) for line in resumed.iter_lines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in again] == list(range(4, len(events)))
    assert again[-1]["type"] == events[-1].type and again[-1]["response"]["output"][0]["content"][0]["text"] == deltas


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"temperature_x": 1}, "temperature_x"),
        ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
        ({"background": True}, "background"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}, None),
        ({"include": ["reasoning.encrypted_content"]}, "include[0]"),
        ({"truncation": "auto"}, "truncation"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_that_bills_and_stores_nothing(
    stack: Stack, body: dict[str, Any], param: str | None
) -> None:
    tenant_id, key = stack.new_tenant(Tier.PLUS, "responses-bad")
    request = {"model": "mini", "input": "Hello.", "max_output_tokens": 4, **body}
    response = httpx.post(
        f"{stack.gateway_url}/v1/responses", json=request, headers={"authorization": f"Bearer {key}"}, timeout=60
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    else:
        assert "does not take images" in error["message"]  # the local models read text only
    assert ledger(stack, tenant_id) == []
    conversations = client(stack, key).get("/conversations", cast_to=object)
    assert conversations["data"] == []  # type: ignore[index]


def test_two_continuations_of_one_response_at_once_become_two_branches(stack: Stack) -> None:
    """OpenAI's semantics: each continuation's context is the previous response and its own input, never the other's.
    The one stored first stays in the conversation; the other goes to a branch and is found by its id all the same."""
    api = client(stack, stack.new_key(Tier.PLUS, "responses-race"))
    first = api.responses.create(model="mini", input="Name a fruit.", max_output_tokens=6)

    def continue_with(text: str) -> Any:
        return api.responses.create(model="mini", previous_response_id=first.id, input=text, max_output_tokens=16)

    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(continue_with, ["And a vegetable?", "And a grain?"])
    assert first.conversation is not None and a.conversation is not None and b.conversation is not None
    assert {a.conversation.id, b.conversation.id} != {first.conversation.id}  # at most one stayed in place
    for answer, asked in ((a, "And a vegetable?"), (b, "And a grain?")):
        stored = stored_messages(api, answer.conversation.id)  # type: ignore[union-attr]
        assert [m["content"] for m in stored] == ["Name a fruit.", first.output_text, asked, answer.output_text]
        assert api.responses.retrieve(answer.id).output_text == answer.output_text
    original = stored_messages(api, first.conversation.id)
    assert len(original) in (2, 4)  # the first turn, and the continuation stored in place if any
    # Where each went: in place, in its branch (it raced the other to the store), or a fork made at placement (the
    # other was stored before it started). Run here: one in place, the other in its branch.
    where = sorted(
        (r.conversation.id == first.conversation.id, r.conversation.id == branch_of(r.id))  # type: ignore[union-attr]
        for r in (a, b)
    )
    assert where in ([(False, True), (True, False)], [(False, False), (True, False)]), where
