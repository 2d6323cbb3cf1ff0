"""The completions request as vLLM and OpenAI validate it: prompt shapes, `echo` with `max_tokens: 0`, and the values
fleetchat's chat models cannot honour (`suffix`, `best_of`) refused by name; `n` choices per prompt and a streamed list
of prompts are taken, as vLLM takes them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.wire.completions_api import CompletionRequest


def request(**fields: Any) -> CompletionRequest:
    return CompletionRequest.model_validate({"model": "m", **fields})


@pytest.mark.parametrize(
    ("prompt", "prompts"),
    [
        ("hi", ["hi"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
    ],
)
def test_every_prompt_shape_is_a_list_of_prompts(prompt: Any, prompts: list[Any]) -> None:
    assert request(prompt=prompt).prompts() == prompts


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": []}, "prompt"),
        ({"prompt": [[1], []]}, "prompt"),
        ({"prompt": [-1]}, "prompt"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),
        ({"prompt": "x", "n": 0}, "n"),
        ({"prompt": "x", "n": True}, "n"),
        ({"prompt": "x", "best_of": 3}, "best_of"),
        ({"prompt": "x", "logprobs": True}, "logprobs"),
        ({"prompt": "x", "logprobs": 21}, "logprobs"),
        ({"prompt": "x", "max_tokens": 0}, None),  # only with echo
        ({"prompt": "x", "stream_options": {"include_usage": True}}, None),
        ({"prompt": "x", "min_tokens": 20}, None),  # above the default 16
    ],
)
def test_bad_values_are_refused_by_name(fields: dict[str, Any], param: str | None) -> None:
    with pytest.raises(ValidationError) as refused:
        request(**fields)
    locations = {str(error["loc"][0]) if error["loc"] else None for error in refused.value.errors()}
    assert param in locations


def test_several_choices_and_a_streamed_list_of_prompts_are_taken() -> None:
    assert request(prompt=["a", "b"], n=3, stream=True).n == 3


def test_echo_may_score_without_generating_and_the_controls_are_shared_with_chat() -> None:
    scored = request(prompt=[[1, 2]], max_tokens=0, echo=True, logprobs=1, top_k=5, logit_bias={"7": -100})
    assert scored.max_tokens == 0 and scored.bias_by_token() == {7: -100.0} and scored.top_k == 5
