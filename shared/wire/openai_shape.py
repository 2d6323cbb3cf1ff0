"""OpenAI's required-but-null fields on chat and completion bodies and chunks: a choice's `finish_reason` and
`logprobs`, a message's `refusal`, a log-probability object's `refusal`. Pydantic dumps leave unset fields out (as
OpenAI does for optional ones); these OpenAI's published schema requires, null or not (tests/contracts)."""

from __future__ import annotations

from typing import Any


def with_required_nulls(body: dict[str, Any]) -> dict[str, Any]:
    """`body` (a completion or a chunk, chat or legacy) with OpenAI's required keys present; changed in place."""
    for choice in body.get("choices") or []:
        choice.setdefault("finish_reason", None)
        choice.setdefault("logprobs", None)
        logprobs = choice["logprobs"]
        if isinstance(logprobs, dict) and "content" in logprobs:
            logprobs.setdefault("refusal", None)
        message = choice.get("message")
        if isinstance(message, dict):
            message.setdefault("refusal", None)
    return body


def reasoning_of(part: dict[str, Any]) -> str | None:
    """A message's or delta's reasoning text: vLLM's `reasoning`, or `reasoning_content` (its name until vLLM
    removed it, and DeepSeek's)."""
    text = part.get("reasoning") or part.get("reasoning_content")
    return text if isinstance(text, str) and text else None
