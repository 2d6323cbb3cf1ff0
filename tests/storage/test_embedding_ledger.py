"""Embedding ledger entries (`embedding:<pool>`) and re-rank entries (`rerank:<pool>`) are summed apart from chat's
in `totals`, against SQLite and DynamoDB (moto): the meter exporter bills each on its own meter and never as chat
prompt tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.storage.ledger import EMBEDDING_MODEL_PREFIX, RERANK_MODEL_PREFIX, LedgerEntry, LedgerStore, Outcome

T0 = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)


def _entry(request_id: str, model: str, prompt: int, completion: int = 0, cached: int = 0) -> LedgerEntry:
    return LedgerEntry(
        request_id=request_id, tenant_id="ten_a", key_id="key_1", model=model, prompt_tokens=prompt,
        completion_tokens=completion, cached_tokens=cached, outcome=Outcome.COMPLETED, created_at=T0,
    )  # fmt: skip


def test_totals_keep_embedding_tokens_apart_from_chat_tokens(ledger: LedgerStore) -> None:
    ledger.record(_entry("r1", "mini", prompt=100, completion=20, cached=30))
    ledger.record(_entry("r2", EMBEDDING_MODEL_PREFIX + "text-embedding-minilm", prompt=700))
    ledger.record(_entry("r3", EMBEDDING_MODEL_PREFIX + "text-embedding-minilm", prompt=45))
    ledger.record(_entry("r4", "moderation:fleetchat-embedded", prompt=9))
    [totals] = ledger.totals(T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    assert (totals.requests, totals.prompt_tokens, totals.completion_tokens, totals.cached_tokens) == (4, 109, 20, 30)
    assert totals.embedding_tokens == 745
    # Per-model usage still shows embedding entries under their own model name.
    usage = {row.model: row.prompt_tokens for row in ledger.usage("ten_a", T0 - timedelta(hours=1), T0 + timedelta(1))}
    assert usage[EMBEDDING_MODEL_PREFIX + "text-embedding-minilm"] == 745


def test_totals_keep_rerank_tokens_apart_from_chat_and_embedding_tokens(ledger: LedgerStore) -> None:
    ledger.record(_entry("r1", "mini", prompt=100, completion=20))
    ledger.record(_entry("r2", EMBEDDING_MODEL_PREFIX + "text-embedding-minilm", prompt=50))
    ledger.record(_entry("r3", RERANK_MODEL_PREFIX + "rerank-minilm", prompt=1200))
    ledger.record(_entry("r4", RERANK_MODEL_PREFIX + "rerank-minilm", prompt=34))
    [totals] = ledger.totals(T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    assert (totals.requests, totals.prompt_tokens, totals.completion_tokens) == (4, 100, 20)
    assert (totals.embedding_tokens, totals.rerank_tokens) == (50, 1234)
