"""The grammar mask (gpu_workers/transformers_engine/structured_decoding.py) on SmolLM2's real tokenizer, driven the way
transformers' continuous batching drives it: one logits row per request sampling this step, request states that grow a
token at a time. Scores are random, so only the mask can make the answers valid."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
import torch

from gpu_workers.transformers_engine.structured_decoding import GrammarMasks
from shared.wire.output_schemas import GrammarError

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
PROMPT = [1, 2, 3]


@pytest.fixture(scope="module")
def vocab(tokenizer: Any) -> int:
    return len(tokenizer)


def masks_for(tokenizer: Any, rows: list[Any]) -> GrammarMasks:
    return GrammarMasks(tokenizer, [tokenizer.eos_token_id], lambda: rows)


def state(request_id: str) -> SimpleNamespace:
    return SimpleNamespace(request_id=request_id, initial_tokens=list(PROMPT), generated_tokens=[])


def sample(masks: GrammarMasks, rows: list[Any], vocab: int, generator: torch.Generator) -> list[int]:
    """One engine step: random logits for every row, the processor, then the argmax per row."""
    scores = torch.randn(len(rows), vocab, generator=generator)
    masked = masks(torch.zeros(len(rows), dtype=torch.long), scores)
    return [int(i) for i in masked.argmax(dim=-1)]


def decode_until_eos(masks: GrammarMasks, batch: list[Any], vocab: int, eos: int, seed: int) -> None:
    """Step the batch until every request sampled EOS; a finished request leaves the batch, as in the engine."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(400):
        sampled = sample(masks, batch, vocab, generator)
        for row, token in zip(list(batch), sampled, strict=True):
            if token == eos:
                batch.remove(row)
            else:
                row.generated_tokens.append(token)
        if all(row.request_id == "free" for row in batch):  # a free row samples EOS only by chance
            return
    raise AssertionError("no end of sequence within 400 steps")


def test_random_logits_through_the_mask_give_schema_valid_json(tokenizer: Any, vocab: int) -> None:
    flags = {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3}
    person, other = state("a"), state("b")
    batch = [person, state("free"), other]  # a free request between them keeps its own row
    masks = masks_for(tokenizer, batch)
    masks.register("a", PERSON, len(PROMPT))
    masks.register("b", flags, len(PROMPT))
    decode_until_eos(masks, batch, vocab, tokenizer.eos_token_id, seed=7)
    answer = json.loads(tokenizer.decode(person.generated_tokens))
    jsonschema.validate(answer, PERSON)
    assert list(answer) == ["name", "age", "tags"]  # written in the schema's order
    jsonschema.validate(json.loads(tokenizer.decode(other.generated_tokens)), flags)
    assert masks.discard("a") is None and masks.discard("b") is None


def test_an_unconstrained_row_in_the_same_batch_is_untouched(tokenizer: Any, vocab: int) -> None:
    rows = [state("free"), state("json")]
    masks = masks_for(tokenizer, rows)
    masks.register("json", PERSON, len(PROMPT))
    scores = torch.randn(2, vocab, generator=torch.Generator().manual_seed(1))
    before = scores.clone()
    masks(torch.zeros(2, dtype=torch.long), scores)
    assert torch.equal(scores[0], before[0])
    allowed = torch.isfinite(scores[1]).nonzero().flatten().tolist()
    assert allowed, "the constrained row must allow something"
    assert all(tokenizer.decode([t]).startswith("{") for t in allowed)  # an object starts with `{`


def test_with_no_constrained_request_the_processor_is_a_no_op(tokenizer: Any, vocab: int) -> None:
    rows = [state("free")]
    masks = masks_for(tokenizer, rows)
    scores = torch.randn(1, vocab)
    assert masks(torch.zeros(1, dtype=torch.long), scores) is scores
    assert len(masks) == 0


def test_end_of_sequence_only_once_the_value_is_complete(tokenizer: Any, vocab: int) -> None:
    row = state("r")
    masks = masks_for(tokenizer, [row])
    masks.register("r", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, len(PROMPT))
    eos = tokenizer.eos_token_id
    for token in tokenizer.encode('{"a": 12', add_special_tokens=False):
        scores = torch.zeros(1, vocab)
        masks(torch.zeros(1, dtype=torch.long), scores)
        assert torch.isfinite(scores[0, token]), f"{tokenizer.decode([token])!r} must be allowed"
        assert not torch.isfinite(scores[0, eos]), "EOS before the value is complete"
        row.generated_tokens.append(token)
    # `{"a": 12` could go on with digits or close; a letter cannot follow.
    scores = torch.zeros(1, vocab)
    masks(torch.zeros(1, dtype=torch.long), scores)
    (letter,) = tokenizer.encode("x", add_special_tokens=False)
    assert not torch.isfinite(scores[0, letter])
    row.generated_tokens.extend(tokenizer.encode("}", add_special_tokens=False))
    scores = torch.zeros(1, vocab)
    masks(torch.zeros(1, dtype=torch.long), scores)
    assert torch.isfinite(scores[0]).nonzero().flatten().tolist() == [eos]


def test_a_request_restored_after_offloading_keeps_its_place(tokenizer: Any, vocab: int) -> None:
    """transformers re-creates an offloaded request with its answer so far appended to the prompt."""
    row = state("r")
    masks = masks_for(tokenizer, [row])
    masks.register("r", {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, len(PROMPT))
    so_far = tokenizer.encode('{"a": 1', add_special_tokens=False)
    row.initial_tokens, row.generated_tokens = [*PROMPT, *so_far[:2]], so_far[2:]
    scores = torch.zeros(1, vocab)
    masks(torch.zeros(1, dtype=torch.long), scores)
    (close,) = tokenizer.encode("}", add_special_tokens=False)
    assert torch.isfinite(scores[0, close])


def test_a_token_the_grammar_never_allowed_fails_the_request_with_eos_only(tokenizer: Any, vocab: int) -> None:
    row = state("r")
    masks = masks_for(tokenizer, [row])
    masks.register("r", {"type": "object"}, len(PROMPT))
    row.generated_tokens.extend(tokenizer.encode("hello", add_special_tokens=False))
    scores = torch.zeros(1, vocab)
    masks(torch.zeros(1, dtype=torch.long), scores)
    assert torch.isfinite(scores[0]).nonzero().flatten().tolist() == [tokenizer.eos_token_id]
    assert "grammar" in (masks.discard("r") or "")


def test_a_schema_the_grammar_cannot_compile_is_refused(tokenizer: Any) -> None:
    masks = masks_for(tokenizer, [])
    with pytest.raises(GrammarError, match="look-around"):
        masks.register("r", {"type": "string", "pattern": "(?=a)b"}, 3)
    assert len(masks) == 0
