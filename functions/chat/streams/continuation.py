"""Mid-stream continuation: one client stream over one or more worker legs. When a replica dies or stalls after the
first byte, the same answer continues on another healthy replica of the pool (or, failing that, the tier's fallback
pool, announced in-band) from the partial answer, sent as an open final assistant message (vLLM's
`continue_final_message: true, add_generation_prompt: false`). docs/reliability.md describes what the client sees.

Deployed, a pool is one URL in front of many containers (a Modal Server; `FLEETCHAT_WORKER_BALANCED`). A broken
stream there is one container gone, not the pool: the continuing leg goes to the same URL under a new
`Modal-Session-ID` (the answer's own, numbered by leg), which Modal's rendezvous hashing routes to another live
container, so a free-tier answer, whose tier has no fallback pool, continues too. Modal drops a dead container from
its routing; until it does, a new session id lands on it only as often as on any other container, and the leg
after that tries again.

It sits upstream of functions/chat/streams/relay.py, so the relay (safety post-filter, capture, books) sees one event
stream. Every chunk keeps the first leg's `id`, `created` and `model`; the continuing leg's role chunk is dropped;
usage is the first leg's prompt tokens plus the completion tokens of every leg (the continuing leg's prompt repeats
the original prompt and the partial answer, both already counted once: the gateway pays for that re-prefill, the
client does not). Only if no replica can continue does the stream end with an SSE `error` event and `[DONE]`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from functions.metrics.failover import FailoverMetrics
from functions.worker_client import UpstreamBrokeError, UpstreamStream, WorkerClient
from shared.errors import FleetchatError, UpstreamError
from shared.wire.sse import DONE, sse_error, sse_json

log = logging.getLogger("fleetchat.gateway")

# The top-level extension field on the first chunk of a continuing leg: {"pool": ..., "fallback": bool}.
CONTINUATION_FIELD = "continuation"
BROKE_MESSAGE = "The model worker stopped before finishing this response."


@dataclass
class Leg:
    """Where an answer is (or would be) generated: a pool, its candidate replicas, the worker body and headers."""

    pool: str
    replicas: list[str]
    body: dict[str, Any]
    headers: dict[str, str]


def continuation_body(body: dict[str, Any], partial: str, generated: int) -> dict[str, Any] | None:
    """`body` asking for the rest of an answer that starts with `partial` (`generated` completion tokens so far);
    None when the completion budget is already spent. With no partial text the original request is sent again."""
    out = dict(body)
    for key in ("max_tokens", "max_completion_tokens"):
        if isinstance(out.get(key), int):
            out[key] -= generated
            if out[key] <= 0:
                return None
    if isinstance(out.get("min_tokens"), int):  # the floor counts the whole answer, as the budget does
        out["min_tokens"] = max(0, out["min_tokens"] - generated)
    if not partial:
        return out
    messages = list(out["messages"])
    last = messages[-1] if messages else {}
    if out.get("continue_final_message") and last.get("role") == "assistant":
        # The client itself prefilled the answer: the partial answer extends that message.
        content = last.get("content")
        prefix = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
        messages[-1] = {**last, "content": prefix + partial}
    else:
        messages.append({"role": "assistant", "content": partial})
    out.update(messages=messages, continue_final_message=True, add_generation_prompt=False)
    return out


@dataclass
class AnswerSoFar:
    """What the client has been sent across legs, and the rewriting that makes later legs look like the first."""

    id: str = ""
    created: int = 0
    model: str = ""
    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    sent_role: bool = False
    prompt_tokens: int | None = None  # the first leg's (what the client is billed for)
    cached_tokens: int | None = None
    earlier_completion: int = 0  # completion tokens of the legs that ended
    leg_completion: int = 0
    legs: int = 1
    announce: dict[str, Any] | None = None  # put on the next chunk sent (a continuing leg's first)
    # Tokens the first leg that reports usage repeats in its prompt, counted as completion already (a gateway's
    # takeover: its first leg continues a partial answer nobody reported usage for).
    repeated_in_prompt: int = 0

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def completion_tokens(self) -> int:
        return self.earlier_completion + self.leg_completion

    def usage(self) -> dict[str, Any]:
        prompt = self.prompt_tokens or 0
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": self.completion_tokens,
            "total_tokens": prompt + self.completion_tokens,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage

    def next_leg(self, announce: dict[str, Any]) -> None:
        self.earlier_completion += self.leg_completion
        self.leg_completion = 0
        self.legs += 1
        self.announce = announce

    def observe(self, event: bytes) -> tuple[bytes | None, bool]:
        """(what the client gets for this event, whether it carried content); the first leg passes unchanged."""
        if not event.startswith(b"data: {"):
            return event, False
        try:
            chunk = json.loads(event[len(b"data: ") :])
        except ValueError:
            return event, False
        if not self.id:
            self.id, self.created, self.model = chunk.get("id", ""), chunk.get("created", 0), chunk.get("model", "")
        content = False
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if self.sent_role and self.legs > 1:
                delta.pop("role", None)  # the client already has its role chunk
            if delta.get("role"):
                self.sent_role = True
            if delta.get("content"):
                self.parts.append(delta["content"])
                content = True
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            if self.prompt_tokens is None:
                prompt = usage.get("prompt_tokens")
                self.prompt_tokens = None if prompt is None else max(0, int(prompt) - self.repeated_in_prompt)
                self.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            self.leg_completion = int(usage.get("completion_tokens") or 0)
        if self.legs == 1:
            return event, content
        choices = chunk.get("choices") or []
        said = any(c.get("finish_reason") or any((c.get("delta") or {}).values()) for c in choices)
        if choices and not said:
            return None, False  # the continuing leg's role chunk: nothing new for the client
        chunk.update(id=self.id, created=self.created, model=self.model)
        if isinstance(usage, dict):
            chunk["usage"] = self.usage()
        if self.announce is not None:
            chunk[CONTINUATION_FIELD], self.announce = self.announce, None
        return sse_json(chunk), content

    def tail(self, client_usage: bool) -> list[bytes]:
        """The end of an answer whose last leg finished it but broke before `[DONE]`: a usage chunk, `[DONE]`."""
        base = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}
        usage = [sse_json({**base, "choices": [], "usage": self.usage()})] if client_usage else []
        return [*usage, DONE]


# The design's deployed sticky-replica hint, forwarded as-is (workers that do not know it ignore it).
MODAL_SESSION_HEADER = "Modal-Session-ID"


def rerouted(headers: dict[str, str], answer_id: str, leg: int) -> dict[str, str]:
    """`headers` for leg `leg` of an answer on a balanced pool URL: a session id of its own (the first leg's, or the
    answer's id, numbered by leg), so Modal's proxy routes it afresh instead of to the container that just broke."""
    session = headers.get(MODAL_SESSION_HEADER) or answer_id
    return {**headers, MODAL_SESSION_HEADER: f"{session.split('~leg')[0]}~leg{leg + 1}"}


class ContinuingStream:
    """The event stream the relay sees for one streamed answer, continued across replicas when one fails."""

    def __init__(
        self,
        first: UpstreamStream,
        leg: Leg,
        workers: WorkerClient,
        *,
        max_continuations: int = 2,
        fallback: Callable[[], Leg | None] | None = None,
        metrics: FailoverMetrics | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.first, self.leg, self.workers = first, leg, workers
        self.max_continuations, self.fallback, self.metrics, self.clock = max_continuations, fallback, metrics, clock
        self.answer = AnswerSoFar()
        self.dead: set[str] = set()
        # Seconds from each failure to the continuing leg's first content (also logged; `make bench` reads it).
        self.second_leg_ttft_s: list[float] = []

    async def events(self) -> AsyncIterator[bytes]:
        answer, stream, pool = self.answer, self.first, self.leg.pool
        usage_wanted = bool((self.leg.body.get("stream_options") or {}).get("include_usage"))
        broke_at: float | None = None
        while True:
            try:
                async with contextlib.aclosing(stream.raw_events()) as events:
                    async for event in events:
                        if event == DONE:
                            yield DONE
                            return
                        if event.startswith(b"event: error"):  # the worker's own mid-stream failure (engine)
                            if stream.breaker is not None:
                                stream.breaker.failed()
                            raise UpstreamBrokeError("worker error event")
                        out, content = answer.observe(event)
                        if content and broke_at is not None:
                            self._first_token_again(pool, self.clock() - broke_at)
                            broke_at = None
                        if out is not None:
                            yield out
            except UpstreamBrokeError:
                pass
            if answer.finish_reason is not None:  # the answer was complete; only its closing events were lost
                for tail in answer.tail(usage_wanted):
                    yield tail
                return
            broke_at = self.clock()
            if not self.workers.balanced:  # a balanced URL lost one container, not its replicas
                self.dead.add(stream.replica)
            found = await self._continue(pool, answer.legs - 1)
            if found is None:
                if self.metrics is not None:
                    self.metrics.continuations.labels(self.leg.pool, "failed").inc()
                yield sse_error(UpstreamError(BROKE_MESSAGE))
                yield DONE
                return
            if isinstance(found, bytes):  # the budget was spent exactly at the break: the answer ends by length
                yield found
                for tail in answer.tail(usage_wanted):
                    yield tail
                return
            pool, stream = found

    def _first_token_again(self, pool: str, seconds: float) -> None:
        self.second_leg_ttft_s.append(seconds)
        if self.metrics is not None:
            self.metrics.continuation_ttft.labels(pool).observe(seconds)
        log.info("continuation pool=%s leg=%d second_leg_ttft_s=%.3f", pool, self.answer.legs, seconds)

    async def _continue(self, pool: str, continued: int) -> tuple[str, UpstreamStream] | bytes | None:
        """Open the next leg: another replica of the pool, else the tier's fallback pool (announced); None if
        nothing can continue; a `length` finish chunk when the completion budget is spent."""
        if continued >= self.max_continuations:
            return None
        answer = self.answer
        targets: list[tuple[Leg, bool]] = [(self.leg, False)]
        if self.fallback is not None and (fallback := self.fallback()) is not None:
            targets.append((fallback, True))
        for leg, is_fallback in targets:
            body = continuation_body(leg.body, answer.text, answer.completion_tokens)
            if body is None:
                choice = {"index": 0, "delta": {}, "finish_reason": "length"}
                answer.finish_reason = "length"
                return sse_json({"id": answer.id, "object": "chat.completion.chunk", "created": answer.created,
                              "model": answer.model, "choices": [choice]})  # fmt: skip
            replicas = self.workers.breakers.order(leg.pool, [r for r in leg.replicas if r not in self.dead])
            if not replicas:
                continue
            headers = leg.headers
            if self.workers.balanced and not is_fallback:
                headers = rerouted(leg.headers, answer.id, answer.legs)
            try:
                stream = await self.workers.open_stream(leg.pool, replicas, body, headers)
            except FleetchatError as exc:  # unreachable, or refused the continuation (4xx): try the next target
                log.warning("continuation on %s failed: %s", leg.pool, type(exc).__name__)
                continue
            outcome = "fallback" if is_fallback else "continued"
            if self.metrics is not None:
                self.metrics.continuations.labels(self.leg.pool, outcome).inc()
            log.info("continuing answer %s on pool=%s outcome=%s after %d chars", answer.id, leg.pool, outcome,
                     len(answer.text))  # fmt: skip
            answer.next_leg({"pool": leg.pool, "fallback": is_fallback})
            return leg.pool, stream
        return None
