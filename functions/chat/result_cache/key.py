"""Which chat requests the prompt/result cache may answer, and the key of one: a hash of the request normalised (the
messages as rendered, every field that changes the answer, defaults filled in, field order fixed) with the pool, its
model version and the safety post-policy (docs/result-cache.md)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shared.wire.schemas import ChatCompletionRequest

KEY_SCHEMA = 1  # bump when the normalisation changes: old entries are then never found again

# Fields that never change the answer's text: how it is delivered (stream), who asked (user, metadata), where it is
# kept (store, conversation_id: the rendered history is in `messages` by now), n (always 1), and the output budget's
# two spellings (folded into `max_tokens`). The model alias is replaced by the pool that serves it.
_DELIVERY_ONLY = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "user",
        "metadata",
        "store",
        "conversation_id",
        "session_id",
        "replace_from",
        "parent_message_id",
        "n",
        "max_tokens",
        "max_completion_tokens",
    }
)
# Requests whose answer the cache cannot reproduce: per-token log-probabilities are not kept, server-side tools
# run code whose results may change between calls (functions/chat/server_tools), and retrieval reads stores that change
# (and its citations are not replayed).
_UNCACHEABLE_FIELDS = ("logprobs", "top_logprobs", "server_tools", "vector_store_ids", "file_search")
# What an absent field means to the engines (the local worker and vLLM with `--generation-config vllm`).
_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "add_generation_prompt": True,
    "continue_final_message": False,
    "parallel_tool_calls": True,
    "response_format": {"type": "text"},
    # shared/wire/sampling_api.py's parameters at their no-op values
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "min_tokens": 0,
    "ignore_eos": False,
    "logit_bias": {},
    "stop_token_ids": [],
}
_FLOAT_FIELDS = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_p")


def uncacheable_reason(request: ChatCompletionRequest, *, seeds_honoured: bool) -> str | None:
    """Why the request's answer may differ from one call to the next (None: it is deterministic). Temperature 0 is
    greedy decoding; a fixed seed counts only where the engine honours it (`seeds_honoured`: vLLM does, per request;
    the local transformers engine does not)."""
    if request.n != 1:
        return "n"
    fields = request.model_dump(exclude_none=True)
    for name in _UNCACHEABLE_FIELDS:
        if fields.get(name) not in (None, False, [], 0):
            return name
    if request.temperature == 0:
        return None
    if request.seed is not None and seeds_honoured:
        return None
    return "sampling"


# Fields that carry text to the model besides the messages' content (declared by other parts or kept as extras).
_TEXT_FIELDS = ("tools", "tool_choice", "response_format")


def texts_of(request: ChatCompletionRequest) -> list[str]:
    """Every text the request hands the model, for the PII check: each message's content, any other message field
    (tool calls and their arguments) and the tools and response format, as JSON."""
    texts = [m.text() for m in request.messages]
    for message in request.messages:
        other = message.model_dump(mode="json", exclude_none=True, exclude={"role", "content"})
        if other:
            texts.append(json.dumps(other, ensure_ascii=False))
    fields = request.model_dump(mode="json", exclude_none=True)
    carried = set(_TEXT_FIELDS) | set(request.model_extra or {})
    extra = {name: value for name, value in fields.items() if name in carried}
    if extra:
        texts.append(json.dumps(extra, ensure_ascii=False))
    return texts


def _message(message: Any) -> dict[str, Any]:
    """A message as the prompt renders it: text parts joined (parts with images kept as sent: the images are part of
    the question), unset fields dropped (tool calls kept as sent)."""
    fields = message.model_dump(mode="json", exclude_none=True)
    if isinstance(message.content, list) and not message.images():
        fields["content"] = message.text()
    return dict(sorted(fields.items()))


def normalised(request: ChatCompletionRequest, pool: str) -> dict[str, Any]:
    """The request as the fields that shape its answer, with engine defaults made explicit."""
    fields = request.model_dump(mode="json", exclude_none=True)
    shaped = {name: value for name, value in fields.items() if name not in _DELIVERY_ONLY}
    shaped = {**_DEFAULTS, **shaped}
    shaped["pool"] = pool
    shaped["messages"] = [_message(m) for m in request.messages]
    shaped["max_tokens"] = request.output_limit()
    stops = sorted(set(request.stop_sequences()))  # the first stop string to appear ends the answer, in any order
    shaped.pop("stop", None)
    if stops:
        shaped["stop"] = stops
    for name in _FLOAT_FIELDS:  # 1 and 1.0 ask for the same answer
        shaped[name] = float(shaped[name])
    if shaped["top_k"] == 0:  # 0 and -1 both turn top-k off
        shaped["top_k"] = -1
    shaped["logit_bias"] = {token: float(bias) for token, bias in sorted(shaped["logit_bias"].items())}
    shaped["stop_token_ids"] = sorted(set(shaped["stop_token_ids"]))
    shaped.pop("logprobs", None)  # set to anything but false, the request is not cached at all
    shaped.pop("top_logprobs", None)
    if shaped["temperature"] == 0:
        # Greedy decoding never draws: the seed and the cuts of the distribution cannot change the answer.
        for name in ("seed", "top_p", "top_k", "min_p"):
            shaped.pop(name, None)
    if not shaped.get("tools"):
        shaped.pop("tools", None)
        shaped.pop("parallel_tool_calls", None)
        shaped.setdefault("tool_choice", "none")
    else:
        shaped.setdefault("tool_choice", "auto")
    return shaped


def request_key(request: ChatCompletionRequest, pool: str, model_version: str, post_policy: str) -> str:
    """The cache key (64 hex characters). The tenant is not in it: stores partition by tenant instead."""
    material = {
        "schema": KEY_SCHEMA,
        "model_version": model_version,  # a canary or a new version never serves an old version's answer
        "post_policy": post_policy,  # an answer screened under another output policy is not reused
        "request": normalised(request, pool),
    }
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
