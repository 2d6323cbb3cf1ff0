"""Batch lines' ledger entries (`price_class="batch"`) are summed apart from interactive ones in `totals` and in
`usage`, against SQLite and DynamoDB (moto): the meter exporter bills them on the batch meters, at the batch price."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.storage.ledger import EMBEDDING_MODEL_PREFIX, LedgerEntry, LedgerStore, Outcome, PriceClass

T0 = datetime(2026, 11, 20, 10, 30, tzinfo=UTC)


def _entry(
    request_id: str, model: str, prompt: int, completion: int = 0, cached: int = 0, price: PriceClass = "standard"
) -> LedgerEntry:
    return LedgerEntry(
        request_id=request_id, tenant_id="ten_a", key_id="key_1", model=model, prompt_tokens=prompt,
        completion_tokens=completion, cached_tokens=cached, outcome=Outcome.COMPLETED, created_at=T0,
        price_class=price,
    )  # fmt: skip


def test_batch_tokens_are_totalled_apart_and_usage_shows_the_price_class(ledger: LedgerStore) -> None:
    ledger.record(_entry("r1", "mini", prompt=100, completion=20, cached=30))
    ledger.record(_entry("b1", "mini", prompt=50, completion=7, cached=10, price="batch"))
    ledger.record(_entry("b2", "mini", prompt=5, completion=1, price="batch"))
    ledger.record(_entry("b3", EMBEDDING_MODEL_PREFIX + "minilm", prompt=300, price="batch"))
    ledger.record(_entry("e1", EMBEDDING_MODEL_PREFIX + "minilm", prompt=40))
    [totals] = ledger.totals(T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    assert totals.requests == 5
    assert (totals.prompt_tokens, totals.completion_tokens, totals.cached_tokens, totals.embedding_tokens) == (
        100, 20, 30, 40,
    )  # fmt: skip
    assert (
        totals.batch_prompt_tokens, totals.batch_completion_tokens, totals.batch_cached_tokens,
        totals.batch_embedding_tokens,
    ) == (55, 8, 10, 300)  # fmt: skip
    rows = ledger.usage("ten_a", T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    by_class = {(row.model, row.price_class): (row.requests, row.prompt_tokens) for row in rows}
    assert by_class == {
        ("mini", "standard"): (1, 100),
        ("mini", "batch"): (2, 55),
        (EMBEDDING_MODEL_PREFIX + "minilm", "standard"): (1, 40),
        (EMBEDDING_MODEL_PREFIX + "minilm", "batch"): (1, 300),
    }
