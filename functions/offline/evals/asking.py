"""How the suites ask the gateway: one chat completion through the OpenAI SDK, its outcome as a value (answer,
content-policy block, other API error), never an exception; plus bounded concurrency and the tier's default model."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import openai
from pydantic import BaseModel

from functions.safety.care import CARE_HEADER
from shared.fleet.tables import tables
from shared.fleet.tiers import Tier

CONTENT_POLICY = "content_policy_violation"
T = TypeVar("T")


class Answer(BaseModel):
    text: str = ""
    finish_reason: str | None = None
    status: int | None = None  # the HTTP status of an API error; None: answered
    error_code: str | None = None  # the OpenAI error object's code ("content_policy_violation", "rate_limit_exceeded")
    error: str | None = None  # a short description of the failure (never the request)
    conversation: dict[str, Any] | None = None  # the gateway's conversation extension, when the turn was stored
    cared: bool = False  # the safety stage answered with its supportive reply, not a model (functions/safety/care.py)

    @property
    def ok(self) -> bool:
        return self.status is None and self.error is None

    @property
    def blocked(self) -> bool:
        """The gateway refused the request before a model saw it (400 content_policy_violation)."""
        return self.status == 400 and self.error_code == CONTENT_POLICY

    @property
    def filtered(self) -> bool:
        """The gateway's output filter halted the answer mid-stream."""
        return self.finish_reason == "content_filter"


def default_model(tier: Tier) -> str:
    """The pool a tier's requests name by default (the gateway routes by pool name)."""
    return tables().tiers[tier].default_pool


async def ask(
    client: openai.AsyncOpenAI,
    model: str,
    messages: list[dict[str, str]],
    *,
    max_tokens: int,
    extra_body: dict[str, Any] | None = None,
) -> Answer:
    """One non-streamed chat completion at temperature 0; every failure comes back as an `Answer` saying why."""
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=0,
            extra_body=extra_body,
        )
        reply = raw.parse()
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        code = error.get("code") if isinstance(error, dict) else None
        return Answer(status=exc.status_code, error_code=code, error=f"HTTP {exc.status_code} {code or ''}".strip())
    except openai.APIError as exc:  # connection errors, timeouts, unreadable replies
        return Answer(error=type(exc).__name__)
    dumped = reply.model_dump()
    choice = reply.choices[0] if reply.choices else None
    return Answer(
        text=(choice.message.content or "") if choice else "",
        finish_reason=choice.finish_reason if choice else None,
        conversation=dumped.get("conversation"),
        cared=raw.headers.get(CARE_HEADER) == "care",
    )


async def bounded(
    jobs: Iterable[Callable[[], Awaitable[T]]], concurrency: int, on_done: Callable[[], None] | None = None
) -> list[T]:
    """Run the jobs with at most `concurrency` at a time; results in the jobs' order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(job: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            result = await job()
        if on_done is not None:
            on_done()
        return result

    return list(await asyncio.gather(*(one(job) for job in jobs)))
