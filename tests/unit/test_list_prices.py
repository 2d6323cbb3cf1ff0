"""List prices (shared/fleet/tables.list_price): found for chat and embedding pools under the names the ledger uses,
and a day's usage priced as the meters count its tokens (cached tokens are part of the prompt's)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date

import pytest

from shared.fleet.tables import install_tables, list_price, tables
from shared.service_api.account_api import UsageDay, UsageTotals
from shared.storage.ledger import EMBEDDING_MODEL_PREFIX, UsageRow
from shared.wire.schemas import ModelPricing

CHAT = ModelPricing(input_usd_per_mtok=2.0, cached_input_usd_per_mtok=0.5, output_usd_per_mtok=8.0)
EMBEDDING = ModelPricing(input_usd_per_mtok=0.02, cached_input_usd_per_mtok=0.02, output_usd_per_mtok=0.0)


@pytest.fixture
def priced() -> Iterator[str]:
    """The built-in tables with list prices on `mini` and on the embedding pool (its name yielded)."""
    live = tables()
    embedding_name, embedding_pool = next(iter(live.embedding_pools.items()))
    install_tables(
        live.replaced(
            pools={**live.pools, "mini": live.pools["mini"].model_copy(update={"list_price": CHAT})},
            embedding_pools={
                **live.embedding_pools,
                embedding_name: embedding_pool.model_copy(update={"list_price": EMBEDDING}),
            },
        )
    )
    try:
        yield embedding_name
    finally:
        install_tables(live)


def test_prices_are_found_under_the_ledgers_model_names(priced: str) -> None:
    assert list_price("mini") == CHAT
    assert list_price(f"{EMBEDDING_MODEL_PREFIX}{priced}") == EMBEDDING  # how the ledger names embeddings
    assert list_price(priced) == EMBEDDING  # how /v1/models names them
    assert list_price("flagship") is None and list_price("no-such-model") is None


def test_a_day_is_priced_as_the_meters_count_its_tokens(priced: str) -> None:
    row = UsageRow(
        day=date(2026, 12, 1),
        model="mini",
        requests=3,
        prompt_tokens=1_000_000,
        completion_tokens=250_000,
        cached_tokens=400_000,
    )
    day = UsageDay.of(row)
    assert day.cost_usd == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.25 * 8.0)  # uncached, cached, output
    unpriced = UsageDay.of(row.model_copy(update={"model": "flagship"}))
    assert unpriced.cost_usd is None
    totals = UsageTotals()
    totals.add(day)
    totals.add(unpriced)
    assert totals.cost_usd == day.cost_usd and totals.requests == 6  # the priced models only


def test_batch_lines_are_priced_at_the_pools_batch_multiplier(priced: str) -> None:
    row = UsageRow(
        day=date(2026, 12, 1), model="mini", price_class="batch", requests=2, prompt_tokens=1_000_000,
        completion_tokens=250_000, cached_tokens=400_000,
    )  # fmt: skip
    day = UsageDay.of(row)
    assert day.price_class == "batch"
    assert day.cost_usd == pytest.approx(0.5 * (0.6 * 2.0 + 0.4 * 0.5 + 0.25 * 8.0))  # half price by default
    assert CHAT.model_copy(update={"batch_multiplier": 0.25}).for_batch().output_usd_per_mtok == pytest.approx(2.0)
