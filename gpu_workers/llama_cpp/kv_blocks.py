"""Paged bookkeeping of a llama.cpp KV cache: which blocks of tokens each sequence holds, which are shared, and the
block-hash index that finds a new prompt's longest cached prefix.

llama.cpp's unified KV cache is a pool of cells, one per token, each tagged with the sequences that use it;
`llama_memory_seq_cp(src, dst, 0, n)` tags `dst` onto `src`'s first `n` cells without copying anything. This module
mirrors that in blocks of `page_size` tokens (vLLM's paged-attention view): a full block gets a key chained from the
previous block's key and its own tokens, so equal keys mean an equal prefix; a block shared by several sequences
is counted once; a block no sequence holds is free. The engine asks it what to copy (`match`), tells it what
changed (`attach`, `extend`, `release`), and reads how full the cache is (`used_tokens`).

Example::

    blocks = KvBlocks(capacity_tokens=16_384, page_size=16)
    blocks.extend(0, prompt_ids)               # sequence 0 prefilled its prompt
    src, n = blocks.match(other_prompt_ids)    # -> (0, 32): copy 32 tokens of sequence 0's KV
    blocks.attach(1, src, n)                   # after llama_memory_seq_cp(src, 1, 0, n)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(eq=False)
class Block:
    tokens: list[int] = field(default_factory=list)
    key: int | None = None  # set once full: hash of (previous block's key, tokens)
    holders: set[int] = field(default_factory=set)


@dataclass
class _SeqState:
    blocks: list[Block] = field(default_factory=list)
    tokens: int = 0  # tokens of this sequence in the KV cache


class KvBlocks:
    def __init__(self, capacity_tokens: int, page_size: int = 16) -> None:
        if page_size < 1 or capacity_tokens < page_size:
            raise ValueError("capacity must hold at least one block")
        self.capacity_tokens = capacity_tokens
        self.page_size = page_size
        self._seqs: dict[int, _SeqState] = {}
        # key -> the live blocks with that key: one, unless the same prefix was computed twice (two cold requests at
        # once, a sequence copied back from the decode lane); the others stay findable when one is freed.
        self._index: dict[int, list[Block]] = {}
        self._used = 0

    # -- reading ----------------------------------------------------------------------------------------------------

    @property
    def used_tokens(self) -> int:
        """KV cells in use: every live block's tokens, a shared block once."""
        return self._used

    def free_tokens(self) -> int:
        return self.capacity_tokens - self._used

    def tokens_of(self, seq: int) -> int:
        state = self._seqs.get(seq)
        return state.tokens if state else 0

    def match(self, prompt: Sequence[int]) -> tuple[int | None, int]:
        """The live sequence holding the longest block-aligned prefix of `prompt`, and that prefix's length. At least
        one prompt token is left out (its logits start the answer), so a fully cached prompt matches one block less."""
        usable = (len(prompt) - 1) // self.page_size
        found: Block | None = None
        depth = 0
        key: int | None = None
        for i in range(usable):
            chunk = list(prompt[i * self.page_size : (i + 1) * self.page_size])
            key = hash((key, tuple(chunk)))
            block = next((b for b in self._index.get(key, ()) if b.holders and b.tokens == chunk), None)
            if block is None:
                break
            found, depth = block, i + 1
        if found is None:
            return None, 0
        return min(found.holders), depth * self.page_size

    # -- changes ----------------------------------------------------------------------------------------------------

    def attach(self, seq: int, src: int, n_tokens: int) -> None:
        """`seq` (new, empty) now shares `src`'s first `n_tokens` (a multiple of the page size)."""
        if n_tokens % self.page_size:
            raise ValueError("shared prefixes are whole blocks")
        source = self._seqs[src]
        state = self._seqs.setdefault(seq, _SeqState())
        if state.tokens:
            raise ValueError(f"sequence {seq} is not empty")
        state.blocks = source.blocks[: n_tokens // self.page_size]
        for block in state.blocks:
            block.holders.add(seq)
        state.tokens = n_tokens

    def extend(self, seq: int, new_tokens: Sequence[int]) -> None:
        """`seq`'s KV grew by `new_tokens` (decoded this step); full blocks become findable by `match`."""
        state = self._seqs.setdefault(seq, _SeqState())
        for token in new_tokens:
            if not state.blocks or len(state.blocks[-1].tokens) == self.page_size:
                state.blocks.append(Block(holders={seq}))
            tail = state.blocks[-1]
            tail.tokens.append(int(token))
            self._used += 1
            if len(tail.tokens) == self.page_size:
                previous = state.blocks[-2].key if len(state.blocks) > 1 else None
                tail.key = hash((previous, tuple(tail.tokens)))
                self._index.setdefault(tail.key, []).append(tail)
        state.tokens += len(new_tokens)

    def release(self, seq: int) -> None:
        """`seq`'s cells were removed (`llama_memory_seq_rm`): blocks nobody else holds are free again."""
        state = self._seqs.pop(seq, None)
        if state is None:
            return
        for block in state.blocks:
            block.holders.discard(seq)
            if not block.holders:
                self._used -= len(block.tokens)
                if block.key is not None:
                    self._unindex(block)

    def _unindex(self, block: Block) -> None:
        assert block.key is not None
        kept = [b for b in self._index.get(block.key, ()) if b is not block]
        if kept:
            self._index[block.key] = kept
        else:
            self._index.pop(block.key, None)
