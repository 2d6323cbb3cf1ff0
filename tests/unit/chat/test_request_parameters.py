"""Undeclared chat parameters: unknown ones and unhonoured values are 400s naming the parameter; no-op values pass."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import InvalidRequestError
from shared.wire.request_parameters import refuse_unhonoured_by_local_engine, refuse_unknown_or_unhonoured
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
        {"logprobs": True, "top_k": 40},  # vLLM's to honour deployed: not the gateway's to refuse
        {"prompt_cache_key": "k", "safety_identifier": "u", "server_tools": ["calculator"]},
    ],
)
def test_the_gateway_accepts_known_values(extra: dict[str, Any]) -> None:
    refuse_unknown_or_unhonoured(request(**extra))


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"frequency_penalty": 0.2}, "frequency_penalty"),
        ({"logit_bias": {"50256": -100}}, "logit_bias"),
        ({"top_k": 40}, "top_k"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"ignore_eos": True}, "ignore_eos"),
        ({"min_tokens": 1}, "min_tokens"),
    ],
)
def test_the_local_engine_refuses_what_only_vllm_honours(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        refuse_unhonoured_by_local_engine(request(**extra))
    assert refused.value.param == param
    assert refused.value.status_code == 400


def test_defaults_pass_the_local_engine_and_a_bool_is_not_a_number() -> None:
    refuse_unhonoured_by_local_engine(
        request(logprobs=False, top_logprobs=0, frequency_penalty=0.0, logit_bias={}, top_k=-1, repetition_penalty=1)
    )
    with pytest.raises(InvalidRequestError):
        refuse_unhonoured_by_local_engine(request(top_logprobs=False))  # 0 is the no-op, `False` is not a count
