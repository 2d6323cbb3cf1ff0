"""The learned layer of the safety gate, a two-stage cascade: a fast first stage (distilled token table + linear
scorer, every request) finds what is uncertain, and the fine-tuned MiniLM second stage decides those."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

from functions.safety.conversation_text import ConversationText
from functions.safety.deobfuscate import deobfuscate
from functions.safety.features import Features, conversation_features
from functions.safety.head import ClassifierHead
from functions.safety.intent_model import IntentModel
from functions.safety.token_table import MODEL_DIR, TokenTable


class ClassifierVerdict(BaseModel):
    score: float  # P(harmful) from the stage that decided
    category: str  # the most likely harmful category ("benign" when the first stage let it through)
    flagged: bool
    stage: Literal["fast", "intent"]


@dataclass(frozen=True)
class FastScore:
    score: float  # the first stage's P(harmful) on its most harmful row
    spans: list[str]  # what the second stage must read (the regions scored >= escalate_at); empty: let through


class SafetyClassifier:
    def __init__(self, table: TokenTable, head: ClassifierHead, intent: IntentModel | None) -> None:
        self.table = table
        self.head = head
        self.intent = intent  # None only while the second stage is being trained: the first decides alone

    @classmethod
    def load(cls, directory: Path = MODEL_DIR) -> SafetyClassifier:
        return cls(TokenTable.load(directory), ClassifierHead.load(directory), IntentModel.load(directory))

    @property
    def version(self) -> str:
        return f"{self.head.meta.version}+{self.intent.meta.version}" if self.intent else self.head.meta.version

    @property
    def threshold(self) -> float:
        """The block threshold of the deciding stage."""
        return self.intent.meta.threshold if self.intent else self.head.meta.threshold

    def fast(self, conversation: ConversationText, escalate_at: float = 0.0) -> FastScore:
        """The first stage on every view of the conversation (as written, and with obfuscation undone), and what of
        it the second stage must read: each view whose whole scores `escalate_at` or more (its last tokens), and the
        worst window if it does and lies before what those read. A region the first stage clears is not read again."""
        views = [conversation]
        plain = conversation.map(deobfuscate)
        if plain != conversation:
            views.append(plain)
        parts = [self.features(view) for view in views]
        features = Features(
            np.concatenate([p.dense for p in parts]),
            [row for p in parts for row in p.sparse],
            [span for p in parts for span in p.spans],
            [n for p in parts for n in p.to_end],
        )
        harmful = self.head.harmful_probability(features)
        firsts = np.cumsum([0] + [len(p.spans) for p in parts])[:-1]  # each view's row 0 (its whole)
        view_of = np.repeat(np.arange(len(parts)), [len(p.spans) for p in parts])
        read = [i for i, first in enumerate(firsts) if harmful[first] >= escalate_at]
        spans = [views[i].whole for i in read]
        worst = int(np.argmax(harmful))
        tail = self.intent.encoder.body_tokens if self.intent else 0
        covered = view_of[worst] in read and features.to_end[worst] <= tail
        if harmful[worst] >= escalate_at and worst not in firsts and not covered:
            spans.append(features.spans[worst])
        return FastScore(score=float(harmful[worst]), spans=spans)

    def judge(
        self, conversation: ConversationText, *, escalate_at: float | None = None, block_at: float | None = None
    ) -> ClassifierVerdict:
        """Let through what the first stage scores below `escalate_at`; the second stage decides the rest."""
        if self.intent is None:
            fast = self.fast(conversation)
            threshold = self.head.meta.threshold if block_at is None else block_at
            return ClassifierVerdict(score=fast.score, category="benign", flagged=fast.score >= threshold, stage="fast")
        meta = self.intent.meta
        fast = self.fast(conversation, meta.escalate_at if escalate_at is None else escalate_at)
        if not fast.spans:
            return ClassifierVerdict(score=fast.score, category="benign", flagged=False, stage="fast")
        worst = max(self.intent.judge(fast.spans), key=lambda verdict: verdict.score)
        threshold = meta.threshold if block_at is None else block_at
        return ClassifierVerdict(
            score=worst.score, category=worst.category, flagged=worst.score >= threshold, stage="intent"
        )

    def intent_score(self, conversation: ConversationText, escalate_at: float = 0.0) -> float:
        """The second stage's score on what the first escalates at `escalate_at` (0 when it escalates nothing)."""
        assert self.intent is not None
        spans = self.fast(conversation, escalate_at).spans
        return max(v.score for v in self.intent.judge(spans)) if spans else 0.0

    def features(self, conversation: ConversationText) -> Features:
        return conversation_features(self.table, conversation, self.head.idf)


@cache
def shipped_classifier() -> SafetyClassifier:
    """The classifier trained into the repo (loaded once per process)."""
    return SafetyClassifier.load()
