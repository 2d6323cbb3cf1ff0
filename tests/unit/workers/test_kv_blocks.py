"""The llama.cpp engine's paged KV bookkeeping: block keys, prefix matching, sharing and freeing."""

from __future__ import annotations

import pytest

from gpu_workers.llama_cpp.kv_blocks import KvBlocks

PAGE = 4


def tokens(n: int, start: int = 100) -> list[int]:
    return list(range(start, start + n))


def test_a_prompt_matches_the_whole_blocks_another_sequence_holds() -> None:
    blocks = KvBlocks(capacity_tokens=64, page_size=PAGE)
    blocks.extend(0, tokens(10))  # two full blocks and a partial one
    src, n = blocks.match([*tokens(10), 7, 8])
    assert (src, n) == (0, 8)  # the partial block is never shared


def test_a_fully_cached_prompt_leaves_its_last_block_to_compute() -> None:
    blocks = KvBlocks(capacity_tokens=64, page_size=PAGE)
    blocks.extend(0, tokens(12))
    assert blocks.match(tokens(12)) == (0, 8)  # the last token's logits start the answer
    assert blocks.match(tokens(13)) == (0, 12)


def test_a_different_token_ends_the_match_at_its_block() -> None:
    blocks = KvBlocks(capacity_tokens=64, page_size=PAGE)
    blocks.extend(0, tokens(12))
    other = tokens(12)
    other[5] = 1
    assert blocks.match([*other, 9]) == (0, 4)
    assert blocks.match([1, *tokens(12)]) == (None, 0)


def test_shared_blocks_are_counted_once_and_freed_with_their_last_holder() -> None:
    blocks = KvBlocks(capacity_tokens=64, page_size=PAGE)
    blocks.extend(0, tokens(8))
    blocks.attach(1, 0, 8)
    blocks.extend(1, [1, 2, 3])
    assert blocks.used_tokens == 11
    blocks.release(0)
    assert blocks.used_tokens == 11  # sequence 1 still holds the shared prefix
    assert blocks.match([*tokens(8), 5]) == (1, 8)  # and serves it now
    blocks.release(1)
    assert blocks.used_tokens == 0
    assert blocks.free_tokens() == 64
    assert blocks.match([*tokens(8), 5]) == (None, 0)


def test_attaching_needs_whole_blocks_and_an_empty_sequence() -> None:
    blocks = KvBlocks(capacity_tokens=64, page_size=PAGE)
    blocks.extend(0, tokens(8))
    with pytest.raises(ValueError):
        blocks.attach(1, 0, 6)
    blocks.extend(2, [1])
    with pytest.raises(ValueError):
        blocks.attach(2, 0, 4)


def test_the_index_survives_a_duplicate_prefix_being_freed() -> None:
    blocks = KvBlocks(capacity_tokens=64, page_size=PAGE)
    blocks.extend(0, tokens(8))
    blocks.extend(1, tokens(8))  # the same prefix computed twice (two cold requests at once)
    assert blocks.used_tokens == 16
    blocks.release(1)
    assert blocks.match([*tokens(8), 1]) == (0, 8)


def test_a_duplicate_prefix_stays_findable_when_the_first_is_freed() -> None:
    blocks = KvBlocks(capacity_tokens=64, page_size=PAGE)
    blocks.extend(0, tokens(8))
    blocks.extend(1, tokens(8))  # the same prefix again (a sequence copied back from the decode lane)
    blocks.release(0)  # the first one, which the index found until now
    assert blocks.match([*tokens(8), 1]) == (1, 8)
    blocks.release(1)
    assert blocks.match([*tokens(8), 1]) == (None, 0) and blocks.used_tokens == 0
