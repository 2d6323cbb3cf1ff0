"""The gateway's side of structured outputs: refuse a bad `response_format` up front, and never hand out an answer
that breaks its contract as if it were valid (docs/structured-outputs.md).

The worker constrains decoding (the local engine's llguidance masks, vLLM's structured-output backend deployed); the
gateway still validates the final answer with `jsonschema`, because a non-strict schema is only partly enforced, an
answer cut by `max_tokens` is incomplete JSON, and a continued stream joins two legs. Non-streamed, an invalid answer
is asked for once more, then is a clear error; streamed, the finish is withheld and the stream ends with an SSE error
event and `[DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from shared.errors import FleetchatError, InvalidRequestError, UpstreamError
from shared.wire.output_schemas import OutputContract
from shared.wire.schemas import ChatCompletionRequest
from shared.wire.sse import DONE, sse_error

STRUCTURED_OUTPUTS = "fleetchat_gateway_structured_outputs"  # exposed as ..._total


class StructuredOutputs:
    """The metric, on the gateway's registry: answers by pool, kind (json_object, json_schema) and outcome (valid:
    first answer valid; retried: the second was; failed: the client got an error instead)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.answers = Counter(
            STRUCTURED_OUTPUTS,
            "Structured-output answers by pool, kind and outcome (valid, retried, failed).",
            ["pool", "kind", "outcome"],
            registry=registry,
        )

    def count(self, pool: str, contract: OutputContract, outcome: str) -> None:
        self.answers.labels(pool, contract.kind, outcome).inc()

    async def settled(
        self,
        completion: dict[str, Any],
        contract: OutputContract,
        retry: Callable[[], Awaitable[tuple[dict[str, Any], Any]]],
        pool: str,
        body: ChatCompletionRequest,
    ) -> dict[str, Any]:
        """`settled` for the router: `retry()` answers the request again (the answer and its model version)."""

        async def again() -> dict[str, Any]:
            return (await retry())[0]

        greedy = body.temperature == 0
        return await settled(
            completion, contract, again, metrics=self, pool=pool, max_tokens=body.output_limit(), greedy=greedy
        )

    def checked(
        self,
        events: AsyncGenerator[bytes, None],
        body: ChatCompletionRequest,
        contract: OutputContract | None,
        pool: str,
    ) -> AsyncGenerator[bytes, None]:
        """A stream's events, checked at the finish against `contract` (unchanged without one)."""
        if contract is None:
            return events
        return StreamCheck(contract, self, pool, body.output_limit()).events(events)


def contract_for(body: ChatCompletionRequest) -> OutputContract | None:
    """The request's contract (None: free text); a bad schema raises `InvalidRequestError` with its `param`."""
    return OutputContract.of(body.response_format)


class StructuredOutputError(UpstreamError):
    """The model's answer did not satisfy the response format, even after a second attempt."""

    default_code = "invalid_structured_output"


def failure(contract: OutputContract, text: str, finish_reason: str | None, max_tokens: int | None) -> FleetchatError:
    """The error for an answer that broke its contract. Cut by the token limit, the fix is the client's (a 400 naming
    `max_tokens`); otherwise the model failed the schema (a 502)."""
    if finish_reason == "length":
        limit = f" ({max_tokens} tokens)" if max_tokens else ""
        return InvalidRequestError(
            f"The answer reached the token limit{limit} before the JSON was complete; no valid {contract.kind} "
            "answer could be produced. Raise max_tokens (or max_completion_tokens).",
            param="max_tokens",
            code="structured_output_truncated",
        )
    problem = contract.problem(text) or "no answer"
    return StructuredOutputError(f"The model's answer does not satisfy response_format: {problem}.")


def _text_and_finish(completion: dict[str, Any]) -> tuple[str, str | None]:
    choice = (completion.get("choices") or [{}])[0]
    return str((choice.get("message") or {}).get("content") or ""), choice.get("finish_reason")


async def settled(
    completion: dict[str, Any],
    contract: OutputContract,
    retry: Callable[[], Awaitable[dict[str, Any]]],
    *,
    metrics: StructuredOutputs,
    pool: str,
    max_tokens: int | None,
    greedy: bool,
) -> dict[str, Any]:
    """A non-streamed answer that satisfies `contract`: this one, or one more attempt's; else raise the error. Only
    the answer returned is billed (the router settles with its usage); a failure is billed nothing. A greedy answer
    cut by the token limit is not retried: the same prompt and limit would cut it again."""
    text, finish = _text_and_finish(completion)
    if finish == "tool_calls":  # a tool call (docs/tools.md) is the answer; its arguments are checked there
        return completion
    if finish != "length" and contract.problem(text) is None:
        metrics.count(pool, contract, "valid")
        return completion
    again = None
    if not (greedy and finish == "length"):
        try:
            again = await retry()
        except FleetchatError:  # the retry could not be served: the first answer's fault is the one to report
            again = None
    if again is not None:
        text2, finish2 = _text_and_finish(again)
        if finish2 != "length" and contract.problem(text2) is None:
            metrics.count(pool, contract, "retried")
            return again
        text, finish = text2, finish2
    metrics.count(pool, contract, "failed")
    raise failure(contract, text, finish, max_tokens)


@dataclass
class StreamCheck:
    """Watches a streamed answer's events; at its finish validates the whole text, and on a failure withholds the
    finish chunk and ends the stream with an error event and `[DONE]`. Streams cannot be retried: the client has
    seen the text, but never a successful finish for invalid JSON."""

    contract: OutputContract
    metrics: StructuredOutputs
    pool: str
    max_tokens: int | None
    parts: list[str] = field(default_factory=list)

    def _observe(self, event: bytes) -> str | None:
        """Collect content; return the finish reason if this event carries one."""
        if not event.startswith(b"data: {"):
            return None
        try:
            chunk = json.loads(event[len(b"data: ") :])
        except ValueError:
            return None
        finish = None
        for choice in chunk.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                self.parts.append(content)
            finish = choice.get("finish_reason") or finish
        return finish

    async def events(self, upstream: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
        judged = False
        try:
            async for event in upstream:
                finish = None if judged else self._observe(event)
                if finish is None:
                    if event == DONE and not judged:
                        judged = True  # ended without a finish reason (an error event came first): not ours to judge
                    yield event
                    continue
                judged = True
                text = "".join(self.parts)
                if finish == "tool_calls":  # a tool call (docs/tools.md) is the answer; its arguments are checked there
                    yield event
                    continue
                if finish == "stop" and self.contract.problem(text) is None:
                    self.metrics.count(self.pool, self.contract, "valid")
                    yield event
                    continue
                self.metrics.count(self.pool, self.contract, "failed")
                yield sse_error(failure(self.contract, text, finish, self.max_tokens))
                yield DONE
                return
        finally:
            await upstream.aclose()  # ending early aborts the worker's request
