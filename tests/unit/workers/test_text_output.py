"""Incremental detokenization and stop strings (one character per token makes splits explicit)."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_workers.server.text_output import TextAssembler

VOCAB = {i: ch for i, ch in enumerate("abcdefghijklmnopqrstuvwxyz .!END")}
IDS = {ch: i for i, ch in VOCAB.items()}


def decode(ids: Sequence[int]) -> str:
    return "".join(VOCAB[i] for i in ids)


def ids(text: str) -> list[int]:
    return [IDS[c] for c in text]


def run(stop: list[str], pieces: list[str]) -> tuple[list[str], TextAssembler]:
    assembler = TextAssembler(decode, stop)
    out = [assembler.feed(ids(p)) for p in pieces]
    out.append(assembler.flush())
    return out, assembler


def test_without_stops_everything_streams_immediately() -> None:
    out, assembler = run([], ["hel", "lo", " world"])
    assert out == ["hel", "lo", " world", ""]
    assert not assembler.stopped


def test_stop_string_split_across_tokens_is_never_shown() -> None:
    out, assembler = run(["END"], ["hello E", "N", "D more"])
    assert "".join(out) == "hello "
    assert assembler.stopped
    assert "E" not in "".join(out)


def test_held_back_prefix_is_released_when_it_does_not_complete() -> None:
    out, assembler = run(["END"], ["ab E", "x"])
    assert out[0] == "ab "  # "E" might start "END": held
    assert out[1] == "Ex"
    assert not assembler.stopped


def test_held_back_tail_is_flushed_at_the_end() -> None:
    out, _ = run(["END"], ["ab EN"])
    assert out == ["ab ", "EN"]


def test_earliest_of_several_stops_wins() -> None:
    out, _ = run(["c", "b"], ["aabbcc"])
    assert "".join(out) == "aa"


def test_incomplete_utf8_is_held_until_complete() -> None:
    pieces = {1: b"\xe2", 2: b"\x82", 3: b"\xac", 4: b"!"}

    def byte_decode(token_ids: Sequence[int]) -> str:
        return b"".join(pieces[i] for i in token_ids).decode("utf-8", errors="replace")

    assembler = TextAssembler(byte_decode)
    assert assembler.feed([1]) == ""
    assert assembler.feed([2]) == ""
    assert assembler.feed([3]) == "€"
    assert assembler.feed([4]) == "!"
