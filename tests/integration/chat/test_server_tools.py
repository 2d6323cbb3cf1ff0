"""Server-side tools end to end: the real `openai` SDK against a real gateway on loopback, a scripted worker that
calls tools (tests/support/stand_ins/tool_worker.py), the real sandbox and calculator, SQLite stores. Round trips
streamed and not, the sandbox's limits seen through the API, quotas, the round bound, client tools ending the loop, bad
input, billing summed over rounds, the audit and the metrics."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from functions.app import create_app
from functions.safety.untrusted_context import QUOTE_NOTE
from functions.sandbox.bubblewrap import bwrap_works
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import SafetyOverrides, Tier
from shared.server_tool_settings import SandboxSettings, ServerToolSettings, ToolQuota
from shared.settings import Settings
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.ledger import SQLiteLedger
from shared.storage.sqlite.tool_audit import SQLiteToolAudit
from shared.storage.timestamps import utc_now
from shared.storage.tool_audit import ToolRunRecord
from tests.support.injection import held_out_attack_the_screen_flags
from tests.support.servers import serve
from tests.support.stand_ins.tool_worker import answer, last_tool_result, tool_call, tool_names, tool_worker

CALC_QUOTA = 3
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def script(body: dict[str, Any]) -> dict[str, Any]:
    """Dispatch on the first user message, `kind:argument`."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    kind, _, argument = user.partition(":")
    if kind == "printed":  # runs the code, then answers with the tool message exactly as it reached the model
        last = body["messages"][-1]
        return answer(last["content"]) if last.get("role") == "tool" else tool_call("python", {"code": argument})
    result = last_tool_result(body)
    if kind == "calc":
        return (
            answer(f"The answer is {result.get('value', result)}")
            if result
            else tool_call("calculator", {"expression": argument})
        )
    if kind == "python":
        return answer("Tool said: " + json.dumps(result)) if result else tool_call("python", {"code": argument})
    if kind == "pyargs":  # the python tool's whole arguments, as hex of JSON (the user's message carries no code for
        # the safety pre-filter to read)
        arguments = json.loads(bytes.fromhex(argument))
        return answer("Tool said: " + json.dumps(result)) if result else tool_call("python", arguments)
    if kind == "forever":  # calls the calculator for as long as it is offered
        return tool_call("calculator", {"expression": "1+1"}) if "calculator" in tool_names(body) else answer("Done.")
    if kind == "stubborn":  # a broken worker: calls it even once it is withdrawn
        return tool_call("calculator", {"expression": "1+1"})
    if kind == "weather":
        return tool_call("get_weather", {"city": "Lisbon"})
    if kind == "both":
        mine, theirs = tool_call("calculator", {"expression": "2+2"}), tool_call("get_weather", {"city": "Porto"})
        return {**mine, "tool_calls": mine["tool_calls"] + theirs["tool_calls"]}
    return answer("plain")


@dataclass
class Stack:
    url: str
    data_dir: Path
    worker: FastAPI
    store: SQLiteStore

    def key(self, tier: Tier = Tier.PLUS, safety: SafetyOverrides | None = None) -> tuple[str, str]:
        """A new tenant's id and API key (each test its own tenant: quotas are per tenant)."""
        tenant = self.store.create_tenant("t", tier, safety=safety)
        key = new_api_key()
        self.store.add_api_key(tenant.id, hash_api_key(key), "t")
        return tenant.id, key

    def sdk(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=60)

    def audit(self, tenant_id: str) -> list[ToolRunRecord]:
        audit = SQLiteToolAudit(self.data_dir / "fleetchat.db")
        try:
            now = utc_now()
            return audit.list_for_tenant(tenant_id, now - timedelta(hours=1), now + timedelta(minutes=1))
        finally:
            audit.close()

    def billed(self, tenant_id: str) -> int:
        """The prompt tokens in the tenant's ledger."""
        ledger = SQLiteLedger(self.data_dir / "fleetchat.db")
        try:
            rows = ledger.usage(tenant_id, utc_now() - timedelta(hours=1), utc_now() + timedelta(minutes=1))
        finally:
            ledger.close()
        return sum(r.prompt_tokens for r in rows)

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("server-tools")
    store = SQLiteStore(data_dir / "fleetchat.db")
    tools = ServerToolSettings(
        max_rounds=2,
        python_timeout_s=3,  # room for a bomb to meet its limit on a loaded machine
        quotas={
            "python": ToolQuota(runs=100, window_s=3600),
            "calculator": ToolQuota(runs=CALC_QUOTA, window_s=3600),
        },
        breaker_failure_threshold=50,
        # One sandbox at a time per tenant, a short wait for it; this stack's own machine places.
        sandbox=SandboxSettings(per_tenant=1, queue_s=0.3, slots_dir=data_dir / "sandbox-slots"),
    )
    worker = tool_worker(script)
    with serve(worker) as worker_url:
        urls = {"mini": [worker_url], "flagship": [worker_url]}
        settings = Settings(data_dir=data_dir, worker_urls=urls, pools=list(urls), server_tools=tools)
        with serve(create_app(settings, store=store)) as url:
            yield Stack(url, data_dir, worker, store)
    store.close()


def _ask(stack: Stack, key: str, prompt: str, **extra: Any) -> Any:
    extra_body = {"server_tools": extra.pop("server_tools", ["calculator", "python"]), **extra.pop("extra_body", {})}
    return stack.sdk(key).chat.completions.create(
        model="flagship", messages=[{"role": "user", "content": prompt}], extra_body=extra_body, **extra
    )


def test_a_calculator_round_trip_bills_every_round_and_is_audited(stack: Stack) -> None:
    tenant, key = stack.key()
    seen = len(stack.worker.state.bodies)
    before = stack.metric("fleetchat_gateway_server_tool_runs_total", tool="calculator", status="ok")
    completion = _ask(stack, key, "calc:6*7", extra_body={"store": True})
    assert completion.choices[0].message.content == "The answer is 42"
    assert completion.model_extra["conversation"]["stored"] is True  # the final answer is the stored turn
    assert completion.choices[0].finish_reason == "stop"
    first, second = stack.worker.state.bodies[seen:]
    # The worker was offered the tools, called non-streamed, and got the result back as a tool message.
    assert {"calculator", "python"} <= set(tool_names(first)) and first["stream"] is False
    assert "server_tools" not in first
    call = second["messages"][-2]["tool_calls"][0]
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": '{"status": "ok", "value": 42}',
    }
    usages = stack.worker.state.usages[seen:]
    assert completion.usage.prompt_tokens == sum(u["prompt_tokens"] for u in usages)
    assert completion.usage.completion_tokens == 10
    assert completion.model_extra["server_tool_runs"][0]["status"] == "ok"
    assert stack.billed(tenant) == completion.usage.prompt_tokens
    [record] = stack.audit(tenant)
    assert (record.tool, record.status, record.exit_code) == ("calculator", "ok", None)
    assert record.input is None and record.output is None  # the plus tier's policy keeps no content
    after = stack.metric("fleetchat_gateway_server_tool_runs_total", tool="calculator", status="ok")
    assert after == before + 1
    assert stack.metric("fleetchat_gateway_server_tool_seconds_count", tool="calculator") >= 1


def test_streamed_the_final_answer_arrives_as_a_stream_with_the_summed_usage(stack: Stack) -> None:
    _, key = stack.key()
    seen = len(stack.worker.state.bodies)
    chunks = list(_ask(stack, key, "calc:2**10", stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The answer is 1024"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens == sum(
        u["prompt_tokens"] for u in stack.worker.state.usages[seen:]
    )


def test_a_program_that_loops_forever_is_killed_and_the_request_ends_cleanly(stack: Stack) -> None:
    if not bwrap_works():
        pytest.skip("bubblewrap not installed (.ci/run installs it)")
    tenant, key = stack.key()
    started = time.monotonic()
    completion = _ask(stack, key, "python:while True:\n    pass")
    assert time.monotonic() - started < 30  # bounded by the 3 s tool timeout, not hung
    result = json.loads(completion.choices[0].message.content.removeprefix("Tool said: "))
    assert result["status"] == "timeout" and "time limit" in result["error"]
    [record] = stack.audit(tenant)
    assert record.status == "timeout" and record.exit_code is None


def _tool_said(completion: Any) -> dict[str, Any]:
    return json.loads(completion.choices[0].message.content.removeprefix("Tool said: "))


def test_a_run_reads_the_callers_file_and_offers_what_it_writes_for_download(stack: Stack) -> None:
    if not bwrap_works():
        pytest.skip("bubblewrap not installed (.ci/run installs it)")
    _, key = stack.key()
    client = stack.sdk(key)
    upload = client.files.create(file=("sales.txt", b"3\n4\n5\n"), purpose="user_data")
    code = (
        "total = sum(int(line) for line in open('/mnt/data/sales.txt'))\n"
        "open('/mnt/data/out/summary.md', 'w').write(f'# Sales\\n\\nTotal: {total}\\n')\n"
        "open('/mnt/data/out/picture.png', 'wb').write(bytes(range(256)))\n"
        "print(total)\n"
    )
    completion = _ask(stack, key, "pyargs:" + json.dumps({"code": code, "files": [upload.id]}).encode().hex())
    result = _tool_said(completion)
    assert result["status"] == "ok" and result["output"].strip() == "12"
    [kept] = result["files"]
    assert kept["filename"] == "summary.md" and kept["bytes"] == len("# Sales\n\nTotal: 12\n")
    assert "picture.png" in result["files_dropped"][0]  # scanned by type as an upload is: not a supported kind
    [run] = completion.model_extra["server_tool_runs"]
    assert run["files"] == [kept]
    assert client.files.content(kept["file_id"]).content == b"# Sales\n\nTotal: 12\n"
    listed = client.files.retrieve(kept["file_id"])
    assert listed.purpose == "assistants_output" and listed.expires_at is not None
    # Another tenant's file id is not the caller's: told to the model, nothing run.
    _, other = stack.key()
    refused = _tool_said(
        _ask(stack, other, "pyargs:" + json.dumps({"code": "print(1)", "files": [upload.id]}).encode().hex())
    )
    assert refused["status"] == "error" and upload.id in refused["error"]


def test_a_fork_bomb_and_a_memory_bomb_are_contained_audited_and_the_gateway_keeps_answering(stack: Stack) -> None:
    if not bwrap_works():
        pytest.skip("bubblewrap not installed (.ci/run installs it)")
    bombs = {
        "processes": "import os\nwhile True:\n    os.fork()\n",
        "memory": (
            "import os, time\nfor _ in range(16):\n    if os.fork() == 0:\n"
            "        hoard = [bytearray(10 << 20) for _ in range(40)]\n        time.sleep(10)\ntime.sleep(10)\n"
        ),
    }
    for limit, code in bombs.items():
        tenant, key = stack.key()
        _, plain_key = stack.key()
        with ThreadPoolExecutor(2) as pool:
            attack = pool.submit(_ask, stack, key, "python:" + code)
            answered = 0
            while not attack.done():  # plain requests through the same gateway while the bomb runs
                assert _ask(stack, plain_key, "hello", server_tools=[]).choices[0].message.content == "plain"
                answered += 1
            result = _tool_said(attack.result())
        assert answered >= 1 and limit in result.get("limits_hit", []), result
        [record] = stack.audit(tenant)
        assert record.tool == "python" and record.limits_hit == [limit]


def test_a_tenant_past_its_sandboxes_at_once_gets_a_429_and_the_refusal_is_audited(stack: Stack) -> None:
    if not bwrap_works():
        pytest.skip("bubblewrap not installed (.ci/run installs it)")
    tenant, key = stack.key()
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(_ask, stack, key, "python:import time\ntime.sleep(1.2)\nprint('done')")
        time.sleep(0.5)  # the first run holds the tenant's one place
        with pytest.raises(openai.RateLimitError) as busy:
            _ask(stack, key, "python:print('second')")
        assert _tool_said(slow.result())["status"] == "ok"
    assert busy.value.body["code"] == "sandbox_busy" and busy.value.response.headers["retry-after"]
    statuses = sorted(r.status.value for r in stack.audit(tenant))
    assert statuses == ["busy", "ok"]
    _, other = stack.key()  # another tenant's places are its own
    assert _tool_said(_ask(stack, other, "python:print(1)"))["status"] == "ok"


def test_the_sandbox_sees_neither_the_data_dir_nor_the_network(stack: Stack) -> None:
    if not bwrap_works():
        pytest.skip("bubblewrap not installed (.ci/run installs it)")
    _, key = stack.key()
    port = int(stack.url.rsplit(":", 1)[1])
    code = (
        "import os, socket\n"
        f"for path in ({str(stack.data_dir)!r}, {str(stack.data_dir / 'fleetchat.db')!r}):\n"
        "    try:\n        open(path, 'rb'); print('READ', path)\n"
        "    except OSError as exc:\n        print('denied', type(exc).__name__)\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
        "except OSError as exc:\n    print('no socket', exc)\n"
    )
    completion = _ask(stack, key, "python:" + code)
    output = json.loads(completion.choices[0].message.content.removeprefix("Tool said: "))["output"]
    assert "READ" not in output and "CONNECTED" not in output
    assert output.count("denied FileNotFoundError") == 2 and "no socket" in output


def test_a_tool_result_carrying_planted_instructions_reaches_the_model_quoted(stack: Stack) -> None:
    if not bwrap_works():
        pytest.skip("bubblewrap not installed (.ci/run installs it)")
    _, key = stack.key()
    attack = held_out_attack_the_screen_flags()
    # Hex in the code, so the user's own message carries no injection for the pre-filter to block: only the program's
    # output does, which is what a tool result is.
    completion = _ask(stack, key, f"printed:print(bytes.fromhex('{attack.encode().hex()}').decode())")
    seen = completion.choices[0].message.content  # the model's view of the python tool's result
    assert seen.startswith(QUOTE_NOTE) and json.dumps(attack)[1:200] in seen  # the output, JSON-escaped
    [run] = completion.model_extra["server_tool_runs"]
    assert run["tool"] == "python" and run["status"] == "ok" and run["quoted"] is True
    plain = _ask(stack, key, "printed:print(6 * 7)").choices[0].message.content
    assert not plain.startswith(QUOTE_NOTE) and "42" in plain


def test_quota_exhaustion_is_told_to_the_model_counted_and_audited(stack: Stack) -> None:
    tenant, key = stack.key()
    if (into := time.time() % 3600) > 3570:  # the counting window (an hour) must not turn over mid-test
        time.sleep(3601 - into)
    for _ in range(CALC_QUOTA):
        assert _ask(stack, key, "calc:1+1").choices[0].message.content == "The answer is 2"
    before = stack.metric("fleetchat_gateway_server_tool_runs_total", tool="calculator", status="quota")
    refused = _ask(stack, key, "calc:1+1")
    assert "quota exhausted" in refused.choices[0].message.content
    assert refused.model_extra["server_tool_runs"][0]["status"] == "quota"
    assert stack.metric("fleetchat_gateway_server_tool_runs_total", tool="calculator", status="quota") == before + 1
    statuses = [r.status.value for r in stack.audit(tenant)]
    assert statuses.count("ok") == CALC_QUOTA and statuses.count("quota") == 1
    _, other = stack.key()  # another tenant's quota is its own
    assert _ask(stack, other, "calc:1+1").choices[0].message.content == "The answer is 2"


def test_the_round_bound_withdraws_the_tools_then_fails_a_worker_that_ignores_it(stack: Stack) -> None:
    _, key = stack.key()
    seen = len(stack.worker.state.bodies)
    completion = _ask(stack, key, "forever:", server_tools=["python", "calculator"])
    assert completion.choices[0].message.content == "Done."
    bodies = stack.worker.state.bodies[seen:]
    assert len(bodies) == 3 and "tools" not in bodies[-1]  # 2 rounds, then one without the tools
    # With tools of the client's, only the server's are withdrawn, and a tool_choice naming one gives way.
    seen = len(stack.worker.state.bodies)
    forced = {"type": "function", "function": {"name": "calculator"}}
    assert _ask(stack, key, "forever:", tools=[WEATHER], tool_choice=forced).choices[0].message.content == "Done."
    last = stack.worker.state.bodies[-1]
    assert len(stack.worker.state.bodies) - seen == 3 and stack.worker.state.bodies[seen]["tool_choice"] == forced
    assert tool_names(last) == ["get_weather"] and last["tool_choice"] == "auto"
    # A call to a tool nobody offered (neither the gateway nor the client) is not run: after one repair attempt it is
    # the client's clear error (functions/chat/tool_arguments.py), never a call to a function the client does not have.
    _, key = stack.key()
    with pytest.raises(openai.UnprocessableEntityError) as unoffered:
        _ask(stack, key, "stubborn:", server_tools=["python"])
    assert unoffered.value.body["code"] == "invalid_tool_call"
    tenant, key = stack.key()
    seen = len(stack.worker.state.usages)
    with pytest.raises(openai.APIStatusError) as failed:
        _ask(stack, key, "stubborn:")
    assert failed.value.status_code == 502
    assert failed.value.body["code"] == "server_tool_rounds_exceeded"
    # The rounds that ran are billed, though the request failed.
    assert stack.billed(tenant) == sum(u["prompt_tokens"] for u in stack.worker.state.usages[seen:]) > 0


def test_a_call_to_a_client_tool_ends_the_loop_and_goes_back_to_the_client(stack: Stack) -> None:
    _, key = stack.key()
    completion = _ask(stack, key, "weather:", tools=[WEATHER])
    [call] = completion.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and completion.choices[0].finish_reason == "tool_calls"
    both = _ask(stack, key, "both:", tools=[WEATHER])
    assert [c.function.name for c in both.choices[0].message.tool_calls] == ["get_weather"]  # ours dropped unrun
    streamed = list(_ask(stack, key, "weather:", tools=[WEATHER], stream=True))
    deltas = [d for c in streamed if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_weather" and deltas[0].id
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"city": "Lisbon"}


def test_enterprise_content_audit_keeps_the_input_and_output(stack: Stack) -> None:
    tenant, key = stack.key(Tier.ENTERPRISE, SafetyOverrides(audit_raw_content=True))
    _ask(stack, key, "calc:3*3")
    [record] = stack.audit(tenant)
    assert json.loads(record.input or "") == {"expression": "3*3"} and '"value": 9' in (record.output or "")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"server_tools": ["shell"]}, "server_tools[0]"),
        ({"server_tools": "python"}, "server_tools"),
        ({"server_tools": ["calculator"], "tools": [{"type": "function", "function": {"name": "calculator"}}]},
         "tools[0].function.name"),
    ],
)  # fmt: skip
def test_bad_server_tools_are_a_400_naming_the_param_and_reach_no_worker(
    stack: Stack, extra: dict[str, Any], param: str
) -> None:
    tenant, key = stack.key()
    seen = len(stack.worker.state.bodies)
    with pytest.raises(openai.BadRequestError) as refused:
        stack.sdk(key).chat.completions.create(
            model="flagship", messages=[{"role": "user", "content": "calc:1"}], extra_body=extra
        )
    assert refused.value.body["param"] == param
    assert len(stack.worker.state.bodies) == seen and stack.audit(tenant) == []
