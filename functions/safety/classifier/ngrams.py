"""Hashed n-gram features for the classifier's linear scorer: MiniLM word-piece unigrams and bigrams, and
character 3-5-grams, each hashed into a fixed number of buckets (no vocabulary to ship), sublinear tf x idf,
L2-normalised per block. Vectorised with numpy over all of a conversation's spans at once."""

from __future__ import annotations

import itertools

import numpy as np

BUCKETS = 1 << 16  # per block; block 0: word pieces, block 1: characters
WIDTH = 2 * BUCKETS
CHAR_NGRAMS = (3, 4, 5)
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing
_SHIFT = np.uint64(64 - 16)
_PRIME = np.uint64(1_000_003)


def _bucket(keys: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return ((keys.astype(np.uint64) * _MULTIPLIER) >> _SHIFT).astype(np.int64)


def _rows_of(lengths: list[int]) -> np.ndarray:
    """Which span each element of the spans' concatenation belongs to."""
    return np.repeat(np.arange(len(lengths)), lengths)


def piece_buckets(spans: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(span, bucket) of every word-piece unigram and bigram of each span's ids (block 0)."""
    ids = np.concatenate(spans) if spans else np.zeros(0, np.int64)
    rows = _rows_of([s.size for s in spans])
    keys = ids.astype(np.uint64) + np.uint64(1)
    within = rows[:-1] == rows[1:]  # a bigram never crosses from one span into the next
    with np.errstate(over="ignore"):
        bigrams = (keys[:-1] * _PRIME + keys[1:] + np.uint64(1 << 40))[within]
    return np.concatenate([rows, rows[:-1][within]]), _bucket(np.concatenate([keys, bigrams]))


def char_buckets(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(span, bucket) of every character 3-, 4- and 5-gram of each lower-cased text with its words space-padded
    (block 1)."""
    encoded = [(" " + " ".join(text.lower().split()) + " ").encode("utf-8") for text in texts]
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(np.uint64)
    rows = _rows_of([len(e) for e in encoded])
    all_rows, all_keys = [], []
    keys = np.zeros(data.size, np.uint64)
    with np.errstate(over="ignore"):
        for n in range(1, max(CHAR_NGRAMS) + 1):
            if data.size < n:
                break
            # keys[i] = sum over j < n of data[i + j] * 257**j (wrapping), for every start i of an n-gram
            keys = keys[: data.size - n + 1] + data[n - 1 :] * (np.uint64(257) ** np.uint64(n - 1))
            if n in CHAR_NGRAMS:
                within = rows[: data.size - n + 1] == rows[n - 1 :]  # the n-gram lies inside one text
                all_rows.append(rows[: data.size - n + 1][within])
                all_keys.append(keys[within] + np.uint64(n << 48))
    if not all_keys:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(all_rows), _bucket(np.concatenate(all_keys)) + BUCKETS


def sparse_rows(spans: list[tuple[np.ndarray, str]], idf: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(bucket indices, values) of each (token ids, text) span: sublinear tf x idf, each block L2-normalised.
    All spans in one vectorised pass: a long context's windows cost about what one span does."""
    piece_rows, piece = piece_buckets([ids for ids, _ in spans])
    char_rows, chars = char_buckets([text for _, text in spans])
    combined = np.concatenate([piece_rows, char_rows]) * WIDTH + np.concatenate([piece, chars])
    if len(spans) * WIDTH < np.iinfo(np.int32).max:
        combined = combined.astype(np.int32)  # sorts faster
    unique, counts = np.unique(combined, return_counts=True)  # sorted: by span, then bucket (block 0 first)
    unique = unique.astype(np.int64)
    rows, buckets = unique // WIDTH, unique % WIDTH
    weights = (1.0 + np.log(counts)) * idf[buckets]
    groups = rows * 2 + (buckets >= BUCKETS)
    norms = np.sqrt(np.bincount(groups, weights=weights * weights, minlength=2 * len(spans)))
    values = (weights / np.maximum(norms[groups], 1e-6)).astype(np.float32)
    bounds = np.searchsorted(rows, np.arange(len(spans) + 1))
    return [(buckets[a:b], values[a:b]) for a, b in itertools.pairwise(bounds)]


def document_frequency_idf(rows: list[tuple[np.ndarray, np.ndarray]], documents: int) -> np.ndarray:
    """Smoothed idf per bucket from the training spans' bucket sets (1 for buckets never seen)."""
    df = np.zeros(WIDTH, np.float64)
    for indices, _ in rows:
        df[indices] += 1
    return (np.log((1 + documents) / (1 + df)) + 1.0).astype(np.float32)
