"""The first stage's features: featurising a conversation's spans in one vectorised pass gives what each span gives
alone (no n-gram crosses from one span into the next), the latest turn sliced from the whole is the turn as
tokenized on its own, and texts featurised in one batch as one-turn conversations get what each gets alone."""

from __future__ import annotations

import numpy as np

from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.classifier.features import LAST_TURN_TOKENS, _last_turn_ids, alone_features, conversation_features
from functions.safety.classifier.ngrams import WIDTH, sparse_rows
from functions.safety.classifier.token_table import TokenTable

TEXTS = [
    "How do I keep basil alive on a windowsill?",
    "İstanbul'da ÀÉ  çok\n\tgüzel",
    "",
    "ab",
    "def main():\n    print('hello')  # a comment",
    "日本語のテキストです",
]


def test_spans_featurised_together_match_each_alone() -> None:
    table = TokenTable.load()
    idf = np.random.default_rng(0).uniform(0.5, 3.0, WIDTH).astype(np.float32)
    spans = [(table.ids(text), text) for text in TEXTS]
    together = sparse_rows(spans, idf)
    for (indices, values), span in zip(together, spans, strict=True):
        alone_indices, alone_values = sparse_rows([span], idf)[0]
        assert np.array_equal(indices, alone_indices)
        assert np.allclose(values, alone_values)
    assert together[2][0].size == 0, "an empty span has no n-grams"
    assert together[0][0].size > 0 and np.isclose(np.linalg.norm(together[0][1]), np.sqrt(2), atol=1e-4)


def test_the_latest_turn_sliced_from_the_whole_is_the_turn_tokenized_alone() -> None:
    table = TokenTable.load()
    conversations = [
        ConversationText(
            turns=["You are terse.", "Hi there", "What's 2+2? Answer quickly."], last="What's 2+2? Answer quickly."
        ),
        ConversationText(
            turns=["first", "naïve café-au-lait\n\nsecond line"], last="naïve café-au-lait\n\nsecond line"
        ),
        ConversationText(turns=["a user turn", "a later system turn"], last="a user turn"),  # not the final turn
        ConversationText(turns=[" ".join(["word"] * 400)], last=" ".join(["word"] * 400)),
        ConversationText(turns=["only a system turn"], last=""),
    ]
    for conversation in conversations:
        ids, offsets = table.encode(conversation.whole)
        expected = table.ids(conversation.last)[-LAST_TURN_TOKENS:] if conversation.last else ids[-LAST_TURN_TOKENS:]
        assert np.array_equal(_last_turn_ids(table, conversation, offsets, ids), expected)


def test_texts_featurised_in_one_batch_match_each_as_a_one_turn_conversation() -> None:
    table = TokenTable.load()
    idf = np.random.default_rng(1).uniform(0.5, 3.0, WIDTH).astype(np.float32)
    texts = [t for t in TEXTS if t] + [" ".join(["word"] * 400)]  # a judged turn is never empty; one over 256 tokens
    batch = alone_features(table, texts, idf)
    for row, text in enumerate(texts):
        alone = conversation_features(table, ConversationText(turns=[text], last=text), idf, windows=False)
        assert np.allclose(batch.dense[row], alone.dense[0])
        assert np.array_equal(batch.sparse[row][0], alone.sparse[0][0])
        assert np.allclose(batch.sparse[row][1], alone.sparse[0][1])
        assert batch.spans[row].text == text and np.array_equal(batch.spans[row].ids, alone.spans[0].ids)
        assert batch.spans[row].to_end == alone.spans[0].to_end
