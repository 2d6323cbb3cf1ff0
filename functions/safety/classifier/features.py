"""Conversation -> classifier inputs. Row 0 judges the conversation as a whole: dense [whole context, latest user
turn] plus the hashed n-grams of the whole; a long context adds one row per window, judged as a turn on its own
(the shape a one-turn conversation has), so a request buried in benign text cannot be averaged away."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from functions.safety.classifier.conversation_text import ConversationText
from functions.safety.classifier.ngrams import sparse_rows
from functions.safety.classifier.token_table import TokenTable

WINDOW_TOKENS = 64
WINDOW_STRIDE = 32
# The latest turn is judged on its last tokens (a longer turn is covered by the windows).
LAST_TURN_TOKENS = 256

SparseRow = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Span:
    """One row's region of the conversation: the whole, or a window."""

    text: str
    ids: np.ndarray  # its MiniLM token ids (the later stages read these, not the text tokenized again)
    to_end: int  # tokens from its start to the end of the conversation


@dataclass
class Features:
    dense: np.ndarray  # [rows, 2 x table.dim]
    sparse: list[SparseRow]  # one per row
    spans: list[Span]  # one per row: the whole conversation, then each window


def conversation_features(
    table: TokenTable, conversation: ConversationText, idf: np.ndarray, *, windows: bool = True
) -> Features:
    """Row 0 (the whole) and, with `windows` and a context longer than one window, a row per window."""
    whole = conversation.whole
    ids, offsets = table.encode(whole)
    dense = [np.concatenate([table.embed_ids(ids), table.embed_ids(_last_turn_ids(table, conversation, offsets, ids))])]
    spans = [Span(whole, ids, int(ids.size))]
    if windows and ids.size > WINDOW_TOKENS:
        starts = [*range(0, ids.size - WINDOW_TOKENS, WINDOW_STRIDE), ids.size - WINDOW_TOKENS]
        for window, start in zip(table.embed_windows(ids, WINDOW_TOKENS, WINDOW_STRIDE), starts, strict=True):
            end = start + WINDOW_TOKENS
            text = whole[offsets[start][0] : offsets[end - 1][1]]
            dense.append(np.concatenate([window, window]))
            spans.append(Span(text, ids[start:end], int(ids.size) - start))
    return Features(np.stack(dense), sparse_rows([(s.ids, s.text) for s in spans], idf), spans)


def alone_features(table: TokenTable, texts: list[str], idf: np.ndarray) -> Features:
    """Each text's row as a one-turn conversation (`conversation_features(..., windows=False)` of it), all in one
    pass: one batched tokenizer call and one vectorised n-gram pass, for the many short pieces the turn and sentence
    reads score."""
    ids = table.ids_batch(texts)
    dense = [np.concatenate([table.embed_ids(row), table.embed_ids(row[-LAST_TURN_TOKENS:])]) for row in ids]
    spans = [Span(text, row, int(row.size)) for text, row in zip(texts, ids, strict=True)]
    return Features(np.stack(dense), sparse_rows([(s.ids, s.text) for s in spans], idf), spans)


def _last_turn_ids(
    table: TokenTable, conversation: ConversationText, offsets: list[tuple[int, int]], ids: np.ndarray
) -> np.ndarray:
    """The latest user turn's last tokens: sliced from the whole's when it is the final turn (turns are joined on a
    newline, where the tokenizer splits anyway), tokenized on its own otherwise."""
    if not conversation.last:
        return ids[-LAST_TURN_TOKENS:]
    if conversation.turns and conversation.turns[-1] == conversation.last:
        start = len(conversation.whole) - len(conversation.last)
        first = next((i for i in range(len(offsets) - 1, -1, -1) if offsets[i][0] < start), -1) + 1
        return ids[first:][-LAST_TURN_TOKENS:]
    return table.ids(conversation.last)[-LAST_TURN_TOKENS:]
