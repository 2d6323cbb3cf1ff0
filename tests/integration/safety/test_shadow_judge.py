"""The shadow judge on the live path: a real gateway on loopback in front of scripted `mini` and `flagship` workers and
a scripted judge, driven by the openai SDK. Sampled answers get graded and the metrics move; worse `mini` answers
raise the delta and the alert; a stalled judge never holds up a response and a full queue drops and counts; the
budget drops and counts; PII never reaches the judge; eval-tenant traffic and a share of 0 send nothing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from anyio import to_thread
from fastapi import FastAPI

from functions.app import create_app
from functions.judging.client import JUDGE_CALL_HEADER
from functions.judging.shadow import shadow_judge_for
from functions.metrics.gateway import (
    SHADOW_JUDGE_ALERT,
    SHADOW_JUDGE_DELTA,
    SHADOW_JUDGE_QUEUE_DEPTH,
    SHADOW_JUDGE_SAMPLES,
    SHADOW_JUDGE_SCORE,
    GatewayMetrics,
)
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.metric_names import counter_sample
from shared.settings import Settings
from shared.storage.accounts import Tenant, TenantPurpose
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.control_state import SQLiteControlState
from shared.wire.schemas import ChatMessage
from tests.support import prom
from tests.support.servers import serve
from tests.support.stand_ins.scripted_judge import scripted_judge
from tests.support.stand_ins.scripted_worker import scripted_worker

GOOD = "The capital of France is Paris."
SAMPLES = counter_sample(SHADOW_JUDGE_SAMPLES)


@dataclass
class Stack:
    url: str
    key: str
    eval_key: str
    judge: FastAPI

    def client(self, key: str | None = None) -> openai.OpenAI:
        # A bounded wait: a response held up by the judge fails the test instead of hanging it.
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key or self.key, max_retries=0, timeout=30)

    def ask(self, model: str, text: str = "What is the capital of France?", *, stream: bool = False) -> str:
        """One chat completion, read to its end; the answer's text."""
        messages: Any = [{"role": "user", "content": text}]
        if not stream:
            return self.client().chat.completions.create(model=model, messages=messages).choices[0].message.content
        chunks = self.client().chat.completions.create(model=model, messages=messages, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    def samples(self, pool: str, outcome: str) -> float:
        return prom.labelled(self.url, SAMPLES, pool=pool, outcome=outcome)

    def wait_samples(self, expected: dict[tuple[str, str], float]) -> None:
        """Wait (bounded) until each (pool, outcome) counter reaches its value; fail with what was seen."""
        deadline = time.monotonic() + 30
        while True:
            seen = {labels: self.samples(*labels) for labels in expected}
            if all(seen[labels] >= value for labels, value in expected.items()):
                assert seen == expected
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"shadow judge samples {seen}, expected {expected}")
            time.sleep(0.05)


StackFactory = Callable[..., Stack]


@pytest.fixture
def stack_for(tmp_path: Path) -> Iterator[StackFactory]:
    built: list[Path] = []
    with ExitStack() as running:

        def build(*, mini: str = GOOD, flagship: str = GOOD, judge: FastAPI | None = None, **settings: Any) -> Stack:
            workers = {
                "mini": [running.enter_context(serve(scripted_worker(mini, chunk_chars=8, delay_s=0)))],
                "flagship": [running.enter_context(serve(scripted_worker(flagship, chunk_chars=8, delay_s=0)))],
            }
            judge = judge or scripted_judge()
            judge_url = running.enter_context(serve(judge))
            data_dir = tmp_path / f"gateway-{len(built)}"
            built.append(data_dir)
            data_dir.mkdir()
            store = SQLiteStore(data_dir / "fleetchat.db")
            keys = []
            for name, purpose in (("customer", TenantPurpose.CUSTOMER), ("eval", TenantPurpose.EVAL)):
                tenant = store.create_tenant(name, Tier.PLUS, purpose=purpose)
                keys.append(new_api_key())
                store.add_api_key(tenant.id, hash_api_key(keys[-1]), name)
            config = {"judge": {"url": f"{judge_url}/v1", "model": "judge-model"}}
            shadow_judge = {"share": 1.0, **settings.pop("shadow_judge", {})}
            app = create_app(
                Settings(
                    data_dir=data_dir,
                    worker_urls=workers,
                    pools=list(workers),
                    shadow_judge=shadow_judge,
                    **{**config, **settings},
                ),
                store=store,
            )
            return Stack(running.enter_context(serve(app)), keys[0], keys[1], judge)

        yield build


def test_sampled_answers_are_graded_and_the_metrics_move(stack_for: StackFactory) -> None:
    stack = stack_for()
    for model in ("mini", "flagship"):
        assert stack.ask(model) == GOOD
        assert stack.ask(model, stream=True) == GOOD
    stack.wait_samples({("mini", "scored"): 2, ("flagship", "scored"): 2})
    for pool in ("mini", "flagship"):
        assert prom.labelled(stack.url, SHADOW_JUDGE_SCORE, pool=pool, criterion="overall") == 5.0
    assert prom.sample(stack.url, SHADOW_JUDGE_DELTA) == 0.0
    assert prom.sample(stack.url, SHADOW_JUDGE_ALERT) == 0.0
    assert stack.judge.state.calls == 4
    assert {body["model"] for body in stack.judge.state.bodies} == {"judge-model"}
    assert stack.judge.state.graded == [("What is the capital of France?", GOOD)] * 4


def test_worse_mini_answers_move_the_delta_and_raise_the_alert_once(
    stack_for: StackFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fleetchat.shadow_judge")
    stack = stack_for(
        mini="The capital of France is Lyon. WRONG",
        shadow_judge={"min_samples": 3},
    )
    for _ in range(2):
        stack.ask("mini")
        stack.ask("flagship", stream=True)
    stack.wait_samples({("mini", "scored"): 2, ("flagship", "scored"): 2})
    assert prom.sample(stack.url, SHADOW_JUDGE_DELTA) == pytest.approx(5 - 11 / 3)
    assert prom.sample(stack.url, SHADOW_JUDGE_ALERT) == 0.0  # a real delta, but too few scores yet
    assert prom.labelled(stack.url, SHADOW_JUDGE_SCORE, pool="mini", criterion="accuracy") == 1.0

    stack.ask("mini", stream=True)
    stack.ask("flagship")
    stack.wait_samples({("mini", "scored"): 3, ("flagship", "scored"): 3})
    assert prom.sample(stack.url, SHADOW_JUDGE_ALERT) == 1.0
    stack.ask("mini")
    stack.wait_samples({("mini", "scored"): 4})
    assert prom.sample(stack.url, SHADOW_JUDGE_ALERT) == 1.0
    warnings = [r for r in caplog.records if r.name == "fleetchat.shadow_judge" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "mini scores 1.33 below flagship" in warnings[0].getMessage()


def test_a_stalled_judge_never_holds_up_a_response_and_a_full_queue_drops(stack_for: StackFactory) -> None:
    gate = threading.Event()
    judge = scripted_judge(gate=gate)
    stack = stack_for(
        judge=judge,
        shadow_judge={"workers": 1, "queue_size": 2},
    )
    try:
        assert stack.ask("mini") == GOOD
        assert judge.state.entered.wait(timeout=30)  # the judge now holds the first sample and does not answer
        answers = [stack.ask("mini", stream=i % 2 == 0) for i in range(5)]
        # Every response completed while the judge was still blocked on its first call.
        assert answers == [GOOD] * 5 and not gate.is_set() and judge.state.graded == []
        assert judge.state.calls == 1
        # One sample in flight, two queued, three dropped and counted.
        assert prom.sample(stack.url, SHADOW_JUDGE_QUEUE_DEPTH) == 2
        assert stack.samples("mini", "dropped_queue_full") == 3
    finally:
        gate.set()
    stack.wait_samples({("mini", "scored"): 3, ("mini", "dropped_queue_full"): 3})
    assert judge.state.calls == 3 and prom.sample(stack.url, SHADOW_JUDGE_QUEUE_DEPTH) == 0


def test_a_spent_budget_drops_and_an_unreadable_grade_fails(stack_for: StackFactory) -> None:
    judge = scripted_judge(reply=lambda question, answer: "A fine answer, I would give it a good grade.")
    stack = stack_for(
        judge=judge,
        shadow_judge={"calls_per_minute": 2, "workers": 1},
    )
    for _ in range(4):
        stack.ask("flagship")
    stack.wait_samples({("flagship", "failed"): 2, ("flagship", "dropped_budget"): 2})
    assert judge.state.calls == 2 and stack.samples("flagship", "scored") == 0


def test_pii_never_reaches_the_judge(stack_for: StackFactory) -> None:
    answer = "Sure, I will write to jane.doe@example.com and call +1 415 555 2671 tomorrow."
    stack = stack_for(mini=answer)
    # The ask is plainly a support request, but "...; my card is 4111 ..." alone scores 0.349 against the 0.328 block
    # threshold and is refused (docs/safety.md, known failures); this test is about the judge, not the pre-filter.
    question = (
        "Please contact jane.doe@example.com or +1 415 555 2671 about the refund for my card 4111 1111 1111 1111."
    )
    assert stack.ask("mini", question) == answer  # the client gets its answer as it is
    assert stack.ask("mini", question, stream=True) == answer
    stack.wait_samples({("mini", "scored"): 2})
    sent = str(stack.judge.state.bodies)
    for secret in ("jane.doe@example.com", "415 555 2671", "4111 1111 1111 1111"):
        assert secret not in sent
    graded_question, graded_answer = stack.judge.state.graded[0]
    assert graded_answer == "Sure, I will write to [EMAIL] and call [PHONE] tomorrow."
    assert graded_question == "Please contact [EMAIL] or [PHONE] about the refund for my card [CARD]."


def test_a_share_of_zero_eval_traffic_and_judge_calls_send_nothing(stack_for: StackFactory) -> None:
    off = stack_for(
        shadow_judge={"share": 0.0},
    )
    for model in ("mini", "flagship"):
        assert off.ask(model) == GOOD and off.ask(model, stream=True) == GOOD
    on = stack_for()
    for model in ("mini", "flagship"):
        on.client(on.eval_key).chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}])
    # A judge call (this gateway serving as a judge) is never graded either.
    judged = {"extra_headers": {JUDGE_CALL_HEADER: "1"}}
    on.client().chat.completions.create(model="flagship", messages=[{"role": "user", "content": "Hi"}], **judged)
    on.ask("mini")  # a customer's answer behind the others: once it is graded, the others were skipped
    on.wait_samples({("mini", "scored"): 1})
    assert on.judge.state.calls == 1 and on.samples("flagship", "scored") == 0
    assert off.judge.state.calls == 0 and prom.sample(off.url, SAMPLES) == 0


async def test_shutdown_cancels_a_worker_blocked_on_the_judge(tmp_path: Path) -> None:
    gate = threading.Event()
    judge = scripted_judge(gate=gate)

    def shadow_workers() -> list[asyncio.Task[Any]]:
        return [task for task in asyncio.all_tasks() if task.get_name().startswith("shadow-judge")]

    with serve(judge) as url:
        try:
            settings = Settings(
                data_dir=tmp_path,
                judge={"url": f"{url}/v1"},
                shadow_judge={"share": 1.0},
            )
            metrics = GatewayMetrics()
            async with httpx.AsyncClient() as http:

                async def run() -> list[asyncio.Task[Any]]:
                    async with shadow_judge_for(
                        settings, http, metrics, SQLiteControlState(tmp_path / "control.db")
                    ) as shadow:
                        tenant = Tenant(id="t", name="t", tier=Tier.PLUS, created_at=datetime.now(UTC))
                        shadow.offer(tenant, "mini", [ChatMessage(role="user", content="Hi?")], "Hello.")
                        assert await to_thread.run_sync(judge.state.entered.wait, 30)
                        return shadow_workers()

                # Leaving the block must cancel the worker stuck in the judge call, not wait for the judge.
                workers = await asyncio.wait_for(run(), timeout=30)
            assert len(workers) == settings.shadow_judge.workers and all(task.cancelled() for task in workers)
            assert shadow_workers() == [] and not gate.is_set()
            scored = {"pool": "mini", "outcome": "scored"}
            assert metrics.registry.get_sample_value(SAMPLES, scored) is None
        finally:
            gate.set()
