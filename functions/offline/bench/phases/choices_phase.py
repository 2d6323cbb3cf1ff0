"""Benchmark phase: what sharing a prompt's KV between `n` choices saves. Each round sends a fresh long prompt (cold in
the prefix cache) as one request with `n` choices, and another fresh prompt of the same length as `n` concurrent
requests of one choice each; both generate the same tokens (`ignore_eos`). The ratio of the two wall times (separate /
shared) in the same round cancels most of a shared machine's drift. Reported as the median of the rounds' ratios
(above 1.0: the shared prompt is cheaper) in `choices.json` and as one line in the report's notes."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path

from openai import AsyncOpenAI
from rich.progress import Progress

RESULT_FILE = "choices.json"
PASSAGE = (
    "The harbour town wakes slowly: fishing boats knock against the quay, gulls argue over the nets, the bakery on the "
    "corner lights its ovens and the first ferry sounds its horn across the grey water. "
)


def _prompt(repeats: int) -> list[dict[str, str]]:
    """A prompt no request sent before (a new ticket number), so its KV is computed, not found in the cache."""
    return [{"role": "user", "content": f"Ticket {uuid.uuid4().hex}. " + PASSAGE * repeats + "Describe the scene."}]


async def _timed(
    client: AsyncOpenAI, model: str, n: int, requests: int, max_tokens: int, repeats: int
) -> tuple[float, int, int]:
    """(Seconds until every choice of `requests` concurrent requests of `n` choices each ended, prompt tokens
    billed, prompt tokens served from the cache); one fresh prompt for them all."""
    messages = _prompt(repeats)
    started = time.perf_counter()
    answers = await asyncio.gather(
        *(
            client.chat.completions.create(
                model=model, messages=messages, n=n, max_tokens=max_tokens, temperature=1.0,  # type: ignore[arg-type]
                extra_body={"ignore_eos": True},
            )
            for _ in range(requests)
        )
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    usages = [a.usage for a in answers if a.usage is not None]
    generated = sum(u.completion_tokens for u in usages)
    if generated != n * requests * max_tokens:
        raise RuntimeError(f"expected {n * requests * max_tokens} tokens, got {generated}")
    cached = sum(u.prompt_tokens_details.cached_tokens or 0 for u in usages if u.prompt_tokens_details is not None)
    return elapsed, sum(u.prompt_tokens for u in usages), cached


async def choices_phase(
    client: AsyncOpenAI, model: str, out_dir: Path, progress: Progress, *, quick: bool = False
) -> str:
    """Run the phase; returns the report's note line (never raises: a failure is the note)."""
    # A long prompt and a short answer: where sharing the prompt matters (a few-shot prompt sampled n times).
    rounds, n, max_tokens, repeats = (2, 4, 8, 20) if quick else (4, 4, 8, 40)
    ratios: list[float] = []
    times: dict[str, list[float]] = {"shared": [], "separate": []}
    prompt_tokens: dict[str, list[tuple[int, int]]] = {"shared": [], "separate": []}  # (billed, from the cache)
    task = progress.add_task(f"n={n} choices: one request vs {n} requests", total=rounds)
    try:
        for _ in range(rounds):
            for name, (choices, requests) in (("shared", (n, 1)), ("separate", (1, n))):
                seconds, billed, cached = await _timed(client, model, choices, requests, max_tokens, repeats)
                times[name].append(seconds)
                prompt_tokens[name].append((billed, cached))
            ratios.append(times["separate"][-1] / times["shared"][-1])
            progress.advance(task)
        ratio = statistics.median(ratios)
        out_dir.mkdir(parents=True, exist_ok=True)
        report = {
            "n": n, "max_tokens": max_tokens, "seconds": times, "prompt_tokens_billed_and_cached": prompt_tokens,
            "round_ratios": ratios, "ratio": ratio,
        }  # fmt: skip
        prompt = prompt_tokens["shared"][-1][0]
        (out_dir / RESULT_FILE).write_text(json.dumps(report, indent=2))
        return (
            f"n={n} choices: {n} separate requests take {ratio:.2f}x the time of one request with n={n} (median of "
            f"{len(ratios)} rounds; {statistics.median(times['shared']):.2f} s vs "
            f"{statistics.median(times['separate']):.2f} s for {n} x {max_tokens} tokens on a fresh "
            f"{prompt}-token prompt)"
        )
    except Exception as exc:  # a phase failure must not throw away the phases already measured
        return f"choices phase failed: {type(exc).__name__}: {exc}"
    finally:
        progress.remove_task(task)
