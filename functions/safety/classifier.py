"""The learned layer of the safety gate: scores a conversation (or a span of output) per moderation category."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from functions.safety.conversation_text import ConversationText
from functions.safety.deobfuscate import deobfuscate
from functions.safety.features import Features, conversation_features
from functions.safety.head import ClassifierHead
from functions.safety.token_table import MODEL_DIR, TokenTable


class ClassifierVerdict(BaseModel):
    score: float  # 1 - p(benign), on the most harmful view
    category: str  # the most likely harmful category on that view
    flagged: bool  # score >= the trained threshold


class SafetyClassifier:
    def __init__(self, table: TokenTable, head: ClassifierHead) -> None:
        self.table = table
        self.head = head

    @classmethod
    def load(cls, directory: Path = MODEL_DIR) -> SafetyClassifier:
        return cls(TokenTable.load(directory), ClassifierHead.load(directory))

    @property
    def version(self) -> str:
        return self.head.meta.version

    @property
    def threshold(self) -> float:
        return self.head.meta.threshold

    def judge(self, conversation: ConversationText) -> ClassifierVerdict:
        """The worst view of the conversation, as written and with obfuscation undone."""
        features = self.features(conversation)
        plain = ConversationText(
            turns=[deobfuscate(t) for t in conversation.turns], last=deobfuscate(conversation.last)
        )
        if plain != conversation:
            extra = self.features(plain)
            features = Features(np.concatenate([features.dense, extra.dense]), features.sparse + extra.sparse)
        harmful = self.head.harmful_probability(features)
        worst = int(np.argmax(harmful))
        categories = self.head.category_probabilities(features.dense[worst : worst + 1])[0]
        category = self.head.meta.labels[1 + int(np.argmax(categories[1:]))]
        score = float(harmful[worst])
        return ClassifierVerdict(score=score, category=category, flagged=score >= self.threshold)

    def features(self, conversation: ConversationText) -> Features:
        return conversation_features(self.table, conversation, self.head.idf)

    def judge_text(self, text: str) -> ClassifierVerdict:
        """A span of generated text, judged as a turn on its own."""
        return self.judge(ConversationText(turns=[text], last=text))


@cache
def shipped_classifier() -> SafetyClassifier:
    """The classifier trained into the repo (loaded once per process)."""
    return SafetyClassifier.load()
