"""Chat parameters: unknown ones and unhonoured values are 400s naming the parameter, no-op values pass; the sampling
parameters every pool honours are declared and validated."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.errors import InvalidRequestError
from shared.wire.request_parameters import refuse_unknown_or_unhonoured
from shared.wire.schemas import ChatCompletionRequest


def request(**extra: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    )


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"temprature": 0}, "temprature"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"function_call": "auto"}, "function_call"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"service_tier": "flex"}, "service_tier"),
        ({"metadata": {"a": "b"}}, "metadata"),
    ],
)
def test_the_gateway_refuses_unknown_and_unhonoured(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        refuse_unknown_or_unhonoured(request(**extra))
    assert refused.value.param == param


@pytest.mark.parametrize(
    "extra",
    [
        {"modalities": ["text"], "service_tier": "auto", "metadata": {}, "functions": []},
        {"prompt_cache_key": "k", "safety_identifier": "u", "server_tools": ["calculator"]},
    ],
)
def test_the_gateway_accepts_known_values(extra: dict[str, Any]) -> None:
    refuse_unknown_or_unhonoured(request(**extra))


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"top_logprobs": 3}, None),  # needs logprobs: true
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": True}, "top_logprobs"),  # a count, not a boolean
        ({"frequency_penalty": 2.5}, "frequency_penalty"),
        ({"logit_bias": {"the": 1}}, "logit_bias"),
        ({"logit_bias": {"50256": -101}}, "logit_bias"),
        ({"top_k": -2}, "top_k"),
        ({"top_k": True}, "top_k"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"min_tokens": 9, "max_tokens": 8}, None),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
    ],
)
def test_sampling_parameters_are_validated_as_vllm_and_openai_do(fields: dict[str, Any], param: str | None) -> None:
    with pytest.raises(ValidationError) as refused:
        request(**fields)
    locations = {str(error["loc"][0]) if error["loc"] else None for error in refused.value.errors()}
    assert param in locations


def test_sampling_parameters_are_declared_not_extra() -> None:
    sent = request(logprobs=True, top_logprobs=2, logit_bias={"42": 3}, top_k=40, ignore_eos=True, min_tokens=2)
    assert not sent.model_extra
    assert sent.logprobs_wanted() == 2 and sent.bias_by_token() == {42: 3.0}
    assert request(logprobs=False, top_logprobs=0).logprobs_wanted() is None
    refuse_unknown_or_unhonoured(sent)


def test_an_unknown_field_inside_a_message_is_refused_by_its_path_and_a_replayed_answer_is_accepted() -> None:
    with pytest.raises(ValidationError) as refused:
        request(messages=[{"role": "user", "content": "hi", "contnet": "typo"}])
    assert refused.value.errors()[0]["type"] == "extra_forbidden"
    assert refused.value.errors()[0]["loc"] == ("messages", 0, "contnet")
    with pytest.raises(ValidationError):
        request(messages=[{"role": "user", "content": "hi", "audio": {"id": "audio_1"}}])  # only null: no audio pool
    # What the SDK's `message.model_dump()` gives back after an answer: accepted, kept out of the prompt.
    replayed = {
        "role": "assistant", "content": "Paris.", "refusal": None, "annotations": [], "audio": None,
        "reasoning": "France's capital is Paris.",  # a reasoning model's, kept by clients that send it back
    }  # fmt: skip
    sent = request(
        messages=[{"role": "user", "content": "Capital of France?"}, replayed, {"role": "user", "content": "Why?"}]
    )
    assert sent.model_dump(exclude_none=True)["messages"][1] == {"role": "assistant", "content": "Paris."}


def test_an_unknown_embeddings_field_is_refused() -> None:
    from shared.wire.embeddings_api import EmbeddingRequest

    with pytest.raises(ValidationError) as refused:
        EmbeddingRequest.model_validate({"model": "m", "input": "x", "encodng_format": "float"})
    assert refused.value.errors()[0]["type"] == "extra_forbidden"


def test_an_unknown_moderations_field_is_refused() -> None:
    from shared.wire.moderation_api import ModerationRequest

    with pytest.raises(ValidationError) as refused:
        ModerationRequest.model_validate({"input": "x", "modle": "omni-moderation-latest"})
    assert refused.value.errors()[0]["type"] == "extra_forbidden"
