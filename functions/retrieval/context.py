"""Passages into the prompt: how much room they get (the context budget), how they are rendered (byte-stably: the same
passages give the same bytes), where the context message goes, and which passages the safety screen withholds.

Budget: the pool's context window, less the request's own prompt (its whole rendered conversation) and the answer's
budget (the request's `max_tokens` as admission set it, else the tier's `max_output_tokens`), never more than
`max_context_share` of the window. Sizes use admission's bound (`prompt_token_bound`: one token per byte at most),
so a prompt with its passages still fits the context the worker enforces.

Placement: a system message right before the latest user message. The stored history is never changed, so it renders
byte-stably and a conversation's next turn still finds its history in the prefix cache; only the latest exchange and
the new passages are computed again.

Safety: the user's ask is judged by the pre-filter as always, before retrieval (functions/api/routers/chat.py). Passages
are the documents' words, not the user's intent, so they are never judged as the ask (a manual that mentions poisons
must not refuse the user's question). They are screened as untrusted context: a passage that matches a deny rule (a
weapon recipe, an instruction override) or that the prompt-injection screen flags (an instruction planted in the
document, functions/safety/injection_screen.py) is withheld from the prompt and counted, not a refusal. The answer
goes through the post-filter as every answer does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from functions.control.admission import prompt_token_bound
from functions.retrieval.hybrid import Passage
from functions.safety.injection_screen import InjectionScreen
from functions.safety.rules import first_deny
from shared.context_window import MESSAGE_OVERHEAD_TOKENS
from shared.wire.retrieval_api import Citation
from shared.wire.schemas import ChatMessage

CONTEXT_INSTRUCTION = (
    "Answer the user's next question from the numbered passages of their files below. Cite the passages you use as "
    "[1], [2], ... If the passages do not contain the answer, say so."
)
MIN_ROOM_TOKENS = 64  # less than this left for passages: retrieval is not worth a search


def room_for_passages(
    context_tokens: int, messages: Sequence[ChatMessage], max_tokens: int | None, tier_output: int, share: float
) -> int:
    """Tokens (admission's bound) the passages may take in this request's prompt."""
    answer = max_tokens if max_tokens is not None else tier_output
    left = context_tokens - prompt_token_bound(list(messages)) - answer - 2 * MESSAGE_OVERHEAD_TOKENS
    return max(0, min(left, int(context_tokens * share)))


def _entry(number: int, passage: Passage) -> str:
    hit = passage.hit
    return f"[{number}] {hit.filename}\n{hit.text.strip()}"


@dataclass
class Screened:
    kept: list[Passage] = field(default_factory=list)
    by_rules: int = 0  # withheld by a deny rule
    injected: list[tuple[Passage, float]] = field(default_factory=list)  # flagged by the injection screen, its score

    @property
    def withheld(self) -> int:
        return self.by_rules + len(self.injected)


def screened(passages: Sequence[Passage], injection: InjectionScreen | None) -> Screened:
    """The passages let into the context: none that a deny rule matches or the injection screen flags."""
    out = Screened()
    for passage in passages:
        if first_deny(passage.hit.text) is not None:
            out.by_rules += 1
        elif injection is not None and (score := injection.score(passage.hit.text)) >= injection.meta.threshold:
            out.injected.append((passage, score))
        else:
            out.kept.append(passage)
    return out


def packed(passages: Sequence[Passage], room: int) -> list[Passage]:
    """The passages, best first, that fit `room` tokens with the instruction (a passage that does not fit is skipped,
    a shorter later one may still fit)."""
    used = len(CONTEXT_INSTRUCTION.encode())
    kept: list[Passage] = []
    for passage in passages:
        size = len(_entry(len(kept) + 1, passage).encode()) + 2
        if used + size <= room:
            kept.append(passage)
            used += size
    return kept


def context_message(passages: Sequence[Passage]) -> ChatMessage:
    body = "\n\n".join(_entry(n, p) for n, p in enumerate(passages, start=1))
    return ChatMessage(role="system", content=f"{CONTEXT_INSTRUCTION}\n\n{body}")


def with_context(messages: Sequence[ChatMessage], context: ChatMessage) -> list[ChatMessage]:
    """`messages` with `context` just before the latest user message (at the end if there is none)."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=len(messages))
    return [*messages[:last_user], context, *messages[last_user:]]


def citations(passages: Sequence[Passage]) -> list[Citation]:
    return [
        Citation(
            index=n,
            vector_store_id=p.hit.vector_store_id,
            file_id=p.hit.file_id,
            filename=p.hit.filename,
            chunk_id=p.hit.chunk_id,
            start=p.hit.start,
            end=p.hit.end,
            score=round(p.score, 4),
            text=p.hit.text,
        )
        for n, p in enumerate(passages, start=1)
    ]
