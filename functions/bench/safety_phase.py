"""Benchmark phase: what the safety pipeline costs. The pre-filter on a ~1,000-token multi-turn context (rules +
classifier, the whole gate a request waits for) and on a short one, each as the first stage clears it and with the
second stage forced (what an escalated request waits for), and the post-filter per streamed chunk."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.progress import Progress

from functions.bench import stats
from functions.bench.results import SafetyCostStats, SafetyStats
from functions.safety.classifier import shipped_classifier
from functions.safety.prefilter import PreFilter
from functions.safety.stream_guard import StreamGuard
from shared.schemas import ChatMessage

LONG_CONTEXT_TOKENS = 1000
CHUNK_CHARS = 4  # about one token per streamed chunk

_TURNS = (
    "I'm planning a two-week trip through Portugal in October with my partner and our eight-year-old. We like "
    "food markets, easy hikes and trains more than cars.",
    "Lisbon for four days works well: the tram 28 line, Belém for the tower and the pastries, and a day trip to "
    "Sintra by train. Then Porto by train for three days, with the Ribeira and a port cellar.",
    "What would you suggest for the Douro valley without a car, and is the train along the river worth it with a "
    "child? Also how warm is the sea in the Algarve in late October?",
    "The Douro line from Porto to Pinhão takes about two and a half hours and follows the river for most of the "
    "way; boats run from Pinhão. The sea in the Algarve is about 19 to 20 degrees in late October.",
)


def long_conversation(tokens: int = LONG_CONTEXT_TOKENS) -> list[ChatMessage]:
    """A benign multi-turn chat of about `tokens` MiniLM tokens (the classifier's own count)."""
    table = shipped_classifier().table
    messages = [ChatMessage(role="system", content="You are a helpful travel assistant.")]
    while sum(table.ids(m.text()).size for m in messages) < tokens:
        turn = _TURNS[(len(messages) - 1) % len(_TURNS)]
        messages.append(ChatMessage(role="user" if len(messages) % 2 else "assistant", content=turn))
    if messages[-1].role != "user":
        messages.append(ChatMessage(role="user", content=_TURNS[2]))
    return messages


def _time(fn: Callable[[], object], runs: int) -> list[float]:
    fn()  # warm caches
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        timings.append((time.perf_counter() - start) * 1000)
    return timings


def _cost(label: str, tokens: int, timings: list[float]) -> SafetyCostStats:
    return SafetyCostStats(
        case=label,
        context_tokens=tokens,
        runs=len(timings),
        p50_ms=stats.percentile(timings, 50) or 0.0,
        p99_ms=stats.percentile(timings, 99) or 0.0,
        max_ms=max(timings),
    )


def safety_phase(runs: int, progress: Progress) -> SafetyStats:
    task = progress.add_task("safety pre/post-filter cost", total=5)
    classifier = shipped_classifier()
    prefilter = PreFilter(classifier)
    escalated = PreFilter(classifier, escalate_at=0.0)
    table = classifier.table
    long_chat = long_conversation()
    short_chat = [ChatMessage(role="user", content=_TURNS[0])]
    cases = []
    for label, chat in (("multi-turn context", long_chat), ("one short turn", short_chat)):
        tokens = sum(table.ids(m.text()).size for m in chat)
        for gate, how in ((prefilter, ""), (escalated, ", second stage forced")):
            cases.append(_cost(f"pre-filter, {label}{how}", tokens, _time(lambda g=gate, c=chat: g.check(c), runs)))
            progress.advance(task)
    answer = " ".join(_TURNS[1::2]) * 3
    pieces = [answer[i : i + CHUNK_CHARS] for i in range(0, len(answer), CHUNK_CHARS)]
    per_chunk: list[float] = []
    for _ in range(max(1, runs // len(pieces))):
        guard = StreamGuard(None)
        per_chunk += _time_chunks(guard, pieces)
    cases.append(_cost("post-filter, per streamed chunk (400-char window)", 0, per_chunk))
    progress.advance(task)
    return SafetyStats(policy_version=prefilter.policy_version, costs=cases)


def _time_chunks(guard: StreamGuard, pieces: list[str]) -> list[float]:
    timings = []
    for piece in pieces:
        start = time.perf_counter()
        guard.check(piece)
        timings.append((time.perf_counter() - start) * 1000)
    return timings
