"""Conversation -> classifier inputs. Row 0 judges the conversation as a whole: dense [whole context, latest user
turn] plus the hashed n-grams of the whole; a long context adds one row per window, judged as a turn on its own
(the shape a one-turn conversation has), so a request buried in benign text cannot be averaged away."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.safety.conversation_text import ConversationText
from functions.safety.ngrams import sparse_row
from functions.safety.token_table import TokenTable

WINDOW_TOKENS = 64
WINDOW_STRIDE = 32
# The latest turn is judged on its last tokens (a longer turn is covered by the windows).
LAST_TURN_TOKENS = 256

SparseRow = tuple[np.ndarray, np.ndarray]


@dataclass
class Features:
    dense: np.ndarray  # [rows, 2 x table.dim]
    sparse: list[SparseRow]  # one per row
    spans: list[str]  # each row's text: the whole conversation, then each window
    to_end: list[int]  # tokens from each row's start to the end of the conversation


def conversation_features(table: TokenTable, conversation: ConversationText, idf: np.ndarray) -> Features:
    whole = conversation.whole
    ids, offsets = table.encode(whole)
    last_ids = table.ids(conversation.last)[-LAST_TURN_TOKENS:] if conversation.last else ids[-LAST_TURN_TOKENS:]
    dense = [np.concatenate([table.embed_ids(ids), table.embed_ids(last_ids)])]
    sparse = [sparse_row(ids, whole, idf)]
    spans = [whole]
    to_end = [int(ids.size)]
    if ids.size > WINDOW_TOKENS:
        starts = [*range(0, ids.size - WINDOW_TOKENS, WINDOW_STRIDE), ids.size - WINDOW_TOKENS]
        for window, start in zip(table.embed_windows(ids, WINDOW_TOKENS, WINDOW_STRIDE), starts, strict=True):
            end = start + WINDOW_TOKENS
            text = whole[offsets[start][0] : offsets[end - 1][1]]
            dense.append(np.concatenate([window, window]))
            sparse.append(sparse_row(ids[start:end], text, idf))
            spans.append(text)
            to_end.append(int(ids.size) - start)
    return Features(np.stack(dense), sparse, spans, to_end)
