"""A conversation longer than its pool's context, through a real gateway on loopback (the `openai` SDK, SQLite, a
stand-in worker that records what it was sent): every turn is answered, the oldest turns leave the prompt in steps
(each turn's prompt starts with the previous turn's between steps), the response says how many stored messages are
out of context, and the stored conversation keeps them all. The cached-prefix ratio on the real engine over 200
turns is `make bench`'s ("Long conversation")."""

from __future__ import annotations

from typing import Any

import openai

from tests.integration.conftest import GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.answering_worker import answering_worker

ANSWER = "The answer goes on. " * 90  # 1,800 bytes: about 600 estimated tokens a turn with the question
QUESTION = "Tell me more about the next stage of the plan, in detail, please. " * 18  # 1,188 bytes


def test_a_conversation_past_its_context_answers_every_turn_and_keeps_its_prefix_between_steps(
    gateway_for: GatewayFactory,
) -> None:
    worker = answering_worker(lambda _: ANSWER)
    with serve(worker) as worker_url:
        gateway = gateway_for({"mini": [worker_url]})
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)
        conversation_id: str | None = None
        out: list[int] = []
        for turn in range(16):
            extra: dict[str, Any] = {"store": True} if conversation_id is None else {"conversation_id": conversation_id}
            reply = client.chat.completions.with_raw_response.create(
                model="mini", messages=[{"role": "user", "content": f"{turn}: {QUESTION}"}], extra_body=extra
            )
            body = reply.parse().model_dump()
            conversation_id = body["conversation"]["id"]
            out.append(body["conversation"].get("out_of_context", 0))
            assert reply.headers.get("x-fleetchat-out-of-context", "0") == str(out[-1])
        streamed = list(
            client.chat.completions.create(
                model="mini", messages=[{"role": "user", "content": "last"}], stream=True,
                extra_body={"conversation_id": conversation_id},
            )
        )  # fmt: skip
        final = [c.model_dump()["conversation"] for c in streamed if c.model_dump().get("conversation")]
        stored = client.get(f"/conversations/{conversation_id}", cast_to=object)
    assert out[0] == 0 and out[-1] > 0 and out == sorted(out)  # the cut only moves forward
    steps = [n for n in range(1, len(out)) if out[n] != out[n - 1]]
    assert 1 <= len(steps) <= len(out) // 3  # in steps of several turns
    assert final and final[-1]["out_of_context"] >= out[-1]
    assert len(stored["messages"]) == 2 * 17  # every message stored, none of the prompt's cuts
    assert stored["out_of_context"] == final[-1]["out_of_context"]  # read back for a conversation opened later
    prompts = [b["messages"] for b in worker.state.bodies]
    assert all(p[0]["role"] == "system" for p in prompts)
    for n in range(1, 16):
        if n not in steps:  # the previous prompt, its answer, then the new question
            assert prompts[n][: len(prompts[n - 1])] == prompts[n - 1]
    sizes = [sum(len(m["content"] or "") for m in p) for p in prompts]
    assert max(sizes) < 3 * 6144  # within the budget (three bytes a token) of the 8,192-token local pool
