"""Benchmark phase: what the safety pipeline costs. The pre-filter (rules + classifier, the whole gate a request
waits for) on ~1,000-token multi-turn chats on eight topics, on ~1,000-token pasted documents (one user turn) and on
short turns: as shipped, with sentence reads on (a deployment's choice; they cut a pasted document into sentences),
with every region escalated, and with every region read by both transformer stages (the most an escalated request
costs); and the post-filter per streamed chunk, with and without the output check."""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable

from rich.progress import Progress

from functions.offline.bench.results.records import SafetyCostStats, SafetyStats
from functions.offline.measure import stats
from functions.offline.safety_training.composed.everyday_chats import EVERYDAY_CHATS
from functions.safety.classifier.cascade import SafetyClassifier, shipped_classifier
from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.classifier.intent_model import SpanModel
from functions.safety.classifier.output_classifier import OutputClassifier
from functions.safety.prefilter import PreFilter
from functions.safety.rules import neutralise_idioms
from functions.safety.stream_guard import StreamGuard
from shared.wire.schemas import ChatMessage

LONG_CONTEXT_TOKENS = 1000
CHUNK_CHARS = 4  # about one token per streamed chunk


def long_conversation(tokens: int = LONG_CONTEXT_TOKENS, topic: str = "travel") -> list[ChatMessage]:
    """A benign multi-turn chat of about `tokens` MiniLM tokens (the classifier's own count)."""
    table = shipped_classifier().table
    system, turns = EVERYDAY_CHATS[topic]
    messages = [ChatMessage(role="system", content=system)]
    while sum(table.ids(m.text()).size for m in messages) < tokens:
        turn = turns[(len(messages) - 1) % len(turns)]
        messages.append(ChatMessage(role="user" if len(messages) % 2 else "assistant", content=turn))
    if messages[-1].role != "user":
        messages.append(ChatMessage(role="user", content=turns[2]))
    return messages


def pasted_document(tokens: int = LONG_CONTEXT_TOKENS, topic: str = "travel") -> list[ChatMessage]:
    """One user turn of about `tokens` tokens: a request to summarise, then a chat's turns pasted as one text."""
    table = shipped_classifier().table
    _, turns = EVERYDAY_CHATS[topic]
    parts = ["Please summarise these notes in five bullet points."]
    while table.ids("\n\n".join(parts)).size < tokens:
        parts.append(turns[(len(parts) - 1) % len(turns)])
    return [ChatMessage(role="user", content="\n\n".join(parts))]


def neutral(chat: list[ChatMessage]) -> ConversationText:
    """What the classifier judges of a chat (as the pre-filter hands it on)."""
    return ConversationText.of(chat).map(neutralise_idioms)


def _time(fn: Callable[[], object], runs: int) -> list[float]:
    fn()  # warm caches
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        timings.append((time.perf_counter() - start) * 1000)
    return timings


def _cost(label: str, tokens: int, timings: list[float], decided_by: str = "") -> SafetyCostStats:
    return SafetyCostStats(
        case=label,
        context_tokens=tokens,
        runs=len(timings),
        p50_ms=stats.percentile(timings, 50) or 0.0,
        p99_ms=stats.percentile(timings, 99) or 0.0,
        max_ms=max(timings),
        decided_by=decided_by,
    )


def _gates(classifier: SafetyClassifier) -> list[tuple[str, PreFilter]]:
    """The pre-filter as shipped, with every region escalated (the screen decides), and with every region read by
    both the screen and the second stage (the most an escalated request can cost)."""
    gates = [("", PreFilter(classifier))]
    with_sentences = shipped_classifier(sentence_reads=True)
    if with_sentences.ask is not None:
        gates.append((", sentence reads on", PreFilter(with_sentences)))
    gates.append((", every region escalated", PreFilter(classifier, escalate_at=0.0)))
    if classifier.screen is not None:
        screen = classifier.screen
        unsure = SpanModel(
            screen.session, screen.encoder, screen.meta.model_copy(update={"clear_below": 0.0}), screen.members
        )
        worst = SafetyClassifier(classifier.table, classifier.head, classifier.intent, unsure)
        gates.append((", screen and second stage both read", PreFilter(worst, escalate_at=0.0)))
    return gates


def _decided_by(gate: PreFilter, chats: list[list[ChatMessage]]) -> str:
    """Which stage decided each chat ("screen 3, fast 1")."""
    stages = Counter(gate.classifier.judge(neutral(chat), escalate_at=gate.escalate_at).stage for chat in chats)
    return ", ".join(f"{stage} {n}" for stage, n in stages.most_common())


def safety_phase(runs: int, progress: Progress) -> SafetyStats:
    classifier = shipped_classifier()
    gates = _gates(classifier)
    task = progress.add_task("safety pre/post-filter cost", total=3 * len(gates) + 1)
    table = classifier.table
    long_chats = [long_conversation(topic=topic) for topic in EVERYDAY_CHATS]
    documents = [pasted_document(topic=topic) for topic in EVERYDAY_CHATS]
    short_chats = [[ChatMessage(role="user", content=turns[0])] for _, turns in EVERYDAY_CHATS.values()]
    cases = []
    for label, chats in (
        (f"multi-turn context ({len(long_chats)} chats)", long_chats),
        (f"one pasted document ({len(documents)} documents)", documents),
        ("one short turn", short_chats),
    ):
        tokens = [sum(table.ids(m.text()).size for m in chat) for chat in chats]
        for how, gate in gates:
            per_chat = [_time(lambda g=gate, c=chat: g.check(c), max(runs // len(chats), 10)) for chat in chats]
            timings = [t for chat_timings in per_chat for t in chat_timings]
            cases.append(
                _cost(f"pre-filter, {label}{how}", round(statistics.mean(tokens)), timings, _decided_by(gate, chats))
            )
            if chats is long_chats and not how:  # each chat as shipped: the spread behind the p50
                cases += [
                    _cost(f"pre-filter, {topic} chat", n, chat_timings, _decided_by(gate, [chat]))
                    for topic, n, chat, chat_timings in zip(EVERYDAY_CHATS, tokens, chats, per_chat, strict=True)
                ]
            progress.advance(task)
    answer = " ".join(turns[1] + " " + turns[3] for _, turns in EVERYDAY_CHATS.values())
    pieces = [answer[i : i + CHUNK_CHARS] for i in range(0, len(answer), CHUNK_CHARS)]
    output = OutputClassifier.load()
    for how, check in (("rules", None), ("rules + output check", output)):
        if how != "rules" and check is None:
            continue  # no output check trained
        per_chunk: list[float] = []
        for _ in range(max(1, runs // len(pieces))):
            per_chunk += _time_chunks(StreamGuard(None, check), pieces)
        cases.append(_cost(f"post-filter, per streamed chunk (400-char window, {how})", 0, per_chunk))
    progress.advance(task)
    return SafetyStats(policy_version=gates[0][1].policy_version, costs=cases)


def _time_chunks(guard: StreamGuard, pieces: list[str]) -> list[float]:
    timings = []
    for piece in pieces:
        start = time.perf_counter()
        guard.check(piece)
        timings.append((time.perf_counter() - start) * 1000)
    return timings
