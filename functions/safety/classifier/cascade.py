"""The learned layer of the safety gate, a cascade: a fast first stage (distilled token table + linear scorer, every
request) finds the uncertain regions of a conversation; a small MiniLM screen lets through those it is sure are
benign; the fine-tuned MiniLM second stage decides the rest. Where the regions let a conversation through, the second
stage also reads alone the turns of a long chat (turn reads) and the sentences of a long turn that are phrased as a
request (sentence reads), each gated by the first stage."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

from functions.safety.classifier.ask_head import AskHead, load_ask_head
from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.classifier.features import WINDOW_TOKENS, Features, Span, alone_features, conversation_features
from functions.safety.classifier.head import ClassifierHead
from functions.safety.classifier.intent_model import IntentModel, ScreenModel, load_intent, load_screen
from functions.safety.classifier.sentence_units import sentence_units
from functions.safety.classifier.token_table import MODEL_DIR, TokenTable, shipped_token_table

# The most turns, and the most sentences, of one request the second stage reads alone (those the first stage scores
# highest): a chat of many harmful-looking turns or a document of ask-like sentences must not cost a transformer pass
# each. The composed validation chats and documents had 0.9 and 0.5 read on average at the shipped thresholds
# (`turn_reads_metrics.json`, `sentence_reads_metrics.json`).
MAX_READS_ALONE = 8


class ClassifierVerdict(BaseModel):
    score: float  # P(harmful) from the stage that decided
    category: str  # the most likely harmful category ("benign" when the first stage or the screen let it through)
    flagged: bool
    stage: Literal["fast", "screen", "intent"]
    # The second stage's category distribution when it decided (None when an earlier stage let the request through).
    distribution: dict[str, float] | None = None


@dataclass(frozen=True)
class FastScore:
    score: float  # the first stage's P(harmful) on its most harmful row
    spans: list[Span]  # what the later stages must read (the regions scored >= escalate_at); empty: let through
    short: bool = False  # every view fits in one first-stage window: the second stage reads it whatever its score


class SafetyClassifier:
    def __init__(
        self,
        table: TokenTable,
        head: ClassifierHead,
        intent: IntentModel | None,
        screen: ScreenModel | None = None,
        ask: AskHead | None = None,
    ) -> None:
        self.table = table
        self.head = head
        self.intent = intent  # None only while the second stage is being trained: the first decides alone
        self.screen = screen  # None: the second stage reads every escalated region
        self.ask = ask  # None: no sentence reads

    @classmethod
    def load(
        cls, directory: Path = MODEL_DIR, *, sentence_reads: bool = False, table: TokenTable | None = None
    ) -> SafetyClassifier:
        """The cascade in `directory`; with `sentence_reads`, its ask head too where it has a current one (sentence
        reads are a deployment's choice, off by default: `Settings.guard.sentence_reads`)."""
        head = ClassifierHead.load(directory)
        return cls(
            table or TokenTable.load(directory),
            head,
            load_intent(directory),
            load_screen(directory),
            load_ask_head(directory, head.meta.version) if sentence_reads else None,
        )

    @property
    def version(self) -> str:
        stages = [self.head.meta] + [s.meta for s in (self.intent, self.screen, self.ask) if s is not None]
        return "+".join(meta.version for meta in stages)

    @property
    def threshold(self) -> float:
        """The block threshold of the deciding stage."""
        return self.intent.meta.threshold if self.intent else self.head.meta.threshold

    def fast(self, conversation: ConversationText, escalate_at: float = 0.0) -> FastScore:
        """The first stage on every view of the conversation (as written, and with obfuscation undone), and what of
        it the later stages must read: each view whose whole scores `escalate_at` or more (its last tokens), and the
        worst window if it does and lies before what the first reader of those reads. A region the first stage clears
        is not read again, except a short conversation (no longer than one window): the second stage reads it
        whatever the first stage scored. The first stage is there to keep long text cheap; on a short ask from a
        source it never saw it is the weaker reader (it let through 40 % of the hh-rlhf red-team asks that the
        shipped model never trained on, where the second stage alone blocks 62 %), and the second stage's pass on a
        short ask costs 4-20 ms on 2 cores."""
        views = [conversation]
        plain = conversation.plain
        if plain != conversation:
            views.append(plain)
        parts = [self.features(view) for view in views]
        features = Features(
            np.concatenate([p.dense for p in parts]),
            [row for p in parts for row in p.sparse],
            [span for p in parts for span in p.spans],
        )
        harmful = self.head.harmful_probability(features)
        firsts = np.cumsum([0] + [len(p.spans) for p in parts])[:-1]  # each view's row 0 (its whole)
        view_of = np.repeat(np.arange(len(parts)), [len(p.spans) for p in parts])
        short = self.intent is not None and all(len(p.spans) == 1 for p in parts)
        read = [i for i, first in enumerate(firsts) if harmful[first] >= escalate_at or short]
        spans = [parts[i].spans[0] for i in read]
        worst = int(np.argmax(harmful))
        reader = self.screen or self.intent
        tail = reader.encoder.body_tokens if reader else 0
        covered = view_of[worst] in read and features.spans[worst].to_end <= tail
        if harmful[worst] >= escalate_at and worst not in firsts and not covered:
            spans.append(features.spans[worst])
        return FastScore(score=float(harmful[worst]), spans=spans, short=short)

    def judge(
        self, conversation: ConversationText, *, escalate_at: float | None = None, block_at: float | None = None
    ) -> ClassifierVerdict:
        """The regions' verdict (`region_verdict`); where it lets the conversation through, the turn reads' verdict
        (`turn_verdict`) or the sentence reads' (`sentence_verdict`) if they block it."""
        verdict = self.region_verdict(conversation, escalate_at=escalate_at, block_at=block_at)
        if verdict.flagged or self.intent is None:
            return verdict
        turns = self.turn_verdict(conversation)
        if turns is not None and turns.flagged:
            return turns
        sentences = self.sentence_verdict(conversation)
        return sentences if sentences is not None and sentences.flagged else verdict

    def region_verdict(
        self, conversation: ConversationText, *, escalate_at: float | None = None, block_at: float | None = None
    ) -> ClassifierVerdict:
        """Let through what the first stage scores below `escalate_at` (a short conversation excepted) and the
        regions of the rest the screen clears (a short conversation is not screened); the second stage decides what
        remains."""
        if self.intent is None:
            fast = self.fast(conversation)
            threshold = self.head.meta.threshold if block_at is None else block_at
            return ClassifierVerdict(score=fast.score, category="benign", flagged=fast.score >= threshold, stage="fast")
        meta = self.intent.meta
        fast = self.fast(conversation, meta.escalate_at if escalate_at is None else escalate_at)
        if not fast.spans:
            return ClassifierVerdict(score=fast.score, category="benign", flagged=False, stage="fast")
        spans = fast.spans
        if self.screen is not None:
            screened = self.handed_on_scores(fast)
            clear_below = self.screen.meta.clear_below
            spans = [span for span, score in zip(spans, screened, strict=True) if score >= clear_below]
            if not spans:
                return ClassifierVerdict(score=max(screened), category="benign", flagged=False, stage="screen")
        return self._second_stage_verdict(spans, meta.threshold if block_at is None else block_at)

    def turn_verdict(self, conversation: ConversationText) -> ClassifierVerdict | None:
        """The second stage's verdict on the turns `turn_spans` hands on, each read alone and blocked at the stricter
        `turn_block_at` (None: none handed on, or no turn reads calibrated)."""
        assert self.intent is not None
        block_at = self.intent.meta.turn_block_at
        if block_at is None:
            return None
        spans = self.turn_spans(conversation)
        return self._second_stage_verdict(spans, block_at) if spans else None

    def _second_stage_verdict(self, spans: list[Span], block_at: float) -> ClassifierVerdict:
        """The second stage reads `spans` and decides on the worst of them."""
        assert self.intent is not None
        worst = max(self.intent.judge_tokens([span.ids for span in spans]), key=lambda verdict: verdict.score)
        return ClassifierVerdict(
            score=worst.score,
            category=worst.category,
            flagged=worst.score >= block_at,
            stage="intent",
            distribution=worst.distribution,
        )

    def turn_spans(self, conversation: ConversationText) -> list[Span]:
        """The turns of `turn_rows` that the first stage scores `turn_escalate_at` or more, at most MAX_READS_ALONE of
        them, the first stage's worst first (none where turn reads are not calibrated). A request placed among other
        turns is read as the short ask it is, where the second stage is strongest: read in a long chat's windows it is
        mixed with its neighbours (on long chats composed from the validation split, the second stage on every window
        caught 45.5 % of the requests, on every turn 87 %)."""
        assert self.intent is not None
        escalate_at = self.intent.meta.turn_escalate_at
        if escalate_at is None:
            return []
        spans, scores = self.turn_rows(conversation)
        return _worst_first(spans, scores, scores >= escalate_at)

    def turn_rows(self, conversation: ConversationText) -> tuple[list[Span], np.ndarray]:
        """Each judged turn of a conversation of two or more (as written and with obfuscation undone, each once),
        with the first stage's score of it read alone as a one-turn conversation; nothing for a single turn (the
        regions read it)."""
        if len(conversation.turns) < 2:
            return [], np.zeros(0, np.float32)
        rows = self.alone_rows(_turns_and_plain(conversation))
        return rows.spans, self.head.harmful_probability(rows)

    def sentence_verdict(self, conversation: ConversationText) -> ClassifierVerdict | None:
        """The second stage's verdict on the sentences `sentence_spans` hands on, each read alone and blocked at
        `sentence_block_at` (None: none handed on, or no sentence reads calibrated)."""
        assert self.intent is not None
        block_at = self.intent.meta.sentence_block_at
        if block_at is None or self.ask is None:
            return None
        spans = self.sentence_spans(conversation)
        return self._second_stage_verdict(spans, block_at) if spans else None

    def sentence_spans(self, conversation: ConversationText) -> list[Span]:
        """The units of `sentence_rows` phrased as a request (the ask head scores them `sentence_ask_at` or more)
        that the first stage scores `sentence_escalate_at` or more, at most MAX_READS_ALONE of them, the first
        stage's worst first (none where sentence reads are not calibrated). A request inside a pasted document is
        read as the short ask it is, not averaged with its neighbours."""
        assert self.intent is not None
        meta = self.intent.meta
        if self.ask is None or meta.sentence_ask_at is None or meta.sentence_escalate_at is None:
            return []
        spans, first, ask = self.sentence_rows(conversation)
        return _worst_first(spans, first, (ask >= meta.sentence_ask_at) & (first >= meta.sentence_escalate_at))

    def sentence_rows(self, conversation: ConversationText) -> tuple[list[Span], np.ndarray, np.ndarray]:
        """Each sentence unit (`sentence_units`) of the latest user turn where it is longer than one first-stage
        window (as written and with obfuscation undone, each once), with the first stage's and the ask head's scores
        of it read alone. Only the latest user turn: it is what the model answers now, and what a user pastes a
        document into; a system prompt is the operator's, and full of instructions."""
        assert self.ask is not None
        latest = list(dict.fromkeys([conversation.last, conversation.plain.last]))
        long_turns = [turn for turn in latest if self.table.ids(turn).size > WINDOW_TOKENS]
        units = list(dict.fromkeys(unit for turn in long_turns for unit in sentence_units(turn)))
        if not units:
            return [], np.zeros(0, np.float32), np.zeros(0, np.float32)
        rows = self.alone_rows(units)
        return rows.spans, self.head.harmful_probability(rows), self.ask.ask_probability(rows)

    def alone_rows(self, texts: list[str]) -> Features:
        """The first stage's row of each text read alone, as a one-turn conversation."""
        return alone_features(self.table, texts, self.head.idf)

    def handed_on_scores(self, fast: FastScore) -> list[float]:
        """The screen's score on each span the first stage hands on; 1.0 (hand on) for every span of a short
        conversation, which the second stage reads unscreened."""
        return [1.0] * len(fast.spans) if fast.short else self.screen_scores(fast.spans)

    def screen_scores(self, spans: list[Span]) -> list[float]:
        """The screen's score on each span it reads, 1.0 (hand on) for each it does not: a span that fits in the
        screen's window is a short ask, on which the second stage costs little more than the screen and the screen
        is least sure (it underrates short explicit asks); the screen pays off on the long spans of long chats."""
        assert self.screen is not None
        window = self.screen.encoder.body_tokens
        read = [i for i, span in enumerate(spans) if len(span.ids) > window]
        scores = [1.0] * len(spans)
        for i, verdict in zip(read, self.screen.judge_tokens([spans[i].ids for i in read]), strict=True):
            scores[i] = verdict.score
        return scores

    def intent_score(self, conversation: ConversationText, escalate_at: float = 0.0) -> float | None:
        """The second stage's score on what the first hands on at `escalate_at` (None when it hands on nothing)."""
        assert self.intent is not None
        spans = self.fast(conversation, escalate_at).spans
        return max(v.score for v in self.intent.judge_tokens([s.ids for s in spans])) if spans else None

    def features(self, conversation: ConversationText) -> Features:
        return conversation_features(self.table, conversation, self.head.idf)


def _worst_first(spans: list[Span], first_stage: np.ndarray, handed_on: np.ndarray) -> list[Span]:
    """The spans `handed_on` marks, at most MAX_READS_ALONE of them, those the first stage scores highest first."""
    order = np.argsort(-first_stage, kind="stable")
    return [spans[n] for n in order if handed_on[n]][:MAX_READS_ALONE]


def _turns_and_plain(conversation: ConversationText) -> list[str]:
    """The conversation's judged turns as written, then with obfuscation undone, each once."""
    return list(dict.fromkeys(conversation.turns + conversation.plain.turns))


@cache
def shipped_classifier(sentence_reads: bool = False) -> SafetyClassifier:
    """The classifier trained into the repo, with or without sentence reads (loaded once per process; with them, the
    same stages plus the ask head)."""
    if not sentence_reads:
        return SafetyClassifier.load(table=shipped_token_table())
    base = shipped_classifier()
    ask = load_ask_head(MODEL_DIR, base.head.meta.version)
    return SafetyClassifier(base.table, base.head, base.intent, base.screen, ask)
