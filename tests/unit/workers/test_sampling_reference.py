"""The numpy sampling steps (gpu_workers/llama_cpp/sampling.py), which constrained requests use and the C chain is
tested against, on hand-computed cases with vLLM's documented meanings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_workers.engine import SamplingParams
from gpu_workers.llama_cpp.sampling import draw, draw_distribution, logprobs_of, processed_logits


def params(**fields: object) -> SamplingParams:
    return SamplingParams(max_tokens=8, **fields)  # type: ignore[arg-type]


def test_the_repetition_penalty_divides_positive_and_multiplies_negative_logits_seen_in_prompt_or_answer() -> None:
    raw = np.array([2.0, -2.0, 3.0, 1.0], dtype=np.float32)
    out = processed_logits(raw, params(repetition_penalty=2.0), prompt=[0], output=[1], ban=())
    assert out.tolist() == [1.0, -4.0, 3.0, 1.0]


def test_frequency_and_presence_penalties_count_the_answer_only() -> None:
    raw = np.zeros(4, dtype=np.float32)
    out = processed_logits(
        raw, params(frequency_penalty=0.5, presence_penalty=1.0), prompt=[3, 3, 3], output=[1, 1, 2], ban=()
    )
    assert out.tolist() == [0.0, -(2 * 0.5 + 1.0), -(0.5 + 1.0), 0.0]


def test_bias_then_ban() -> None:
    raw = np.zeros(4, dtype=np.float32)
    out = processed_logits(raw, params(logit_bias={1: 5.0, 2: -100.0}), prompt=[], output=[], ban=[3])
    assert out[1] == 5.0 and out[2] == -100.0 and out[3] == -math.inf


def test_min_p_top_k_and_top_p_cut_the_distribution_after_temperature() -> None:
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.07, 0.03]))
    assert np.count_nonzero(draw_distribution(logits, params(temperature=1.0, min_p=0.2))) == 3  # >= 0.1
    assert np.count_nonzero(draw_distribution(logits, params(temperature=1.0, top_k=2))) == 2
    nucleus = draw_distribution(logits, params(temperature=1.0, top_p=0.8))
    assert np.count_nonzero(nucleus) == 3  # 0.5 + 0.25 < 0.8 <= 0.5 + 0.25 + 0.15
    assert nucleus[0] == pytest.approx(0.5 / 0.9)
    hot = draw_distribution(logits, params(temperature=2.0))
    assert hot[0] == pytest.approx(math.sqrt(0.5) / np.sqrt([0.5, 0.25, 0.15, 0.07, 0.03]).sum())


def test_greedy_ignores_the_generator_and_a_seed_repeats_a_draw() -> None:
    logits = np.array([0.0, 3.0, 1.0])
    assert draw(logits, params(temperature=0), np.random.default_rng(1)) == 1
    draws = [draw(logits, params(temperature=1.0), np.random.default_rng(7)) for _ in range(3)]
    assert len(set(draws)) == 1


def test_logprobs_are_the_raw_log_softmax_best_first() -> None:
    raw = np.array([1.0, 3.0, 2.0, -1.0], dtype=np.float32)
    entry = logprobs_of(raw, token=2, top=2)
    expected = raw - math.log(np.exp(raw.astype(np.float64)).sum())
    assert entry.logprob == pytest.approx(expected[2])
    assert [t for t, _ in entry.top] == [1, 2]
    assert entry.top[0][1] == pytest.approx(expected[1])
    assert logprobs_of(raw, token=0, top=0).top == []
