"""What a client sees of the gateway's own tool calls, end to end (the real `openai` SDK, a real gateway on loopback,
the scripted tool-calling worker, the real sandbox): each call streamed as it starts and as it ends before the answer,
a timeout said so, the code and output the post-filter flags kept back, the calls stored with the turn and exported,
and the tools a tier offers (a 403 for the others, the list in the session)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import httpx
import openai
import pytest

from functions.sandbox.bubblewrap import bwrap_works
from shared.fleet.tiers import Tier
from shared.storage.sqlite.safety_audit import SQLiteSafetyAudit
from shared.storage.timestamps import utc_now
from tests.integration.chat.test_server_tools import Stack, _ask, stack  # noqa: F401 (a fixture)

needs_sandbox = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap not installed (.ci/run installs it)")

HARMFUL = (
    "Sure, I can walk you through it. To put together a pipe bomb you will need a steel pipe, two end caps and "
    "a fuse, and then you pack it tightly before you seal the second cap."
)


def _runs(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c.model_extra["server_tool_run"] for c in chunks if (c.model_extra or {}).get("server_tool_run")]


def _text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _hex_args(arguments: dict[str, Any]) -> str:
    """The python tool's arguments as the script's `pyargs:` prompt (so the user's message carries no code)."""
    return "pyargs:" + json.dumps(arguments).encode().hex()


@needs_sandbox
def test_streamed_each_run_is_told_as_it_starts_and_ends_before_the_answer(stack: Stack) -> None:  # noqa: F811
    _, key = stack.key()
    code = "print(6 * 7)"
    chunks = list(_ask(stack, key, "python:" + code, stream=True))
    started, ended = _runs(chunks)
    assert started["status"] == "running" and json.loads(started["arguments"]) == {"code": code}
    assert "result" not in started and started["tool_call_id"] == ended["tool_call_id"]
    assert ended["status"] == "ok" and ended["result"]["output"].strip() == "42" and ended["result"]["exit_code"] == 0
    assert ended["duration_ms"] >= 0 and json.loads(ended["arguments"]) == {"code": code}
    # One stream: one id, a choice on every chunk (a client reading choices[0] never meets an empty list), no usage
    # for a client that did not ask for it, the runs before the first word of the answer.
    assert len({c.id for c in chunks}) == 1 and all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)
    first_text = next(i for i, c in enumerate(chunks) if c.choices[0].delta.content)
    run_chunks = [i for i, c in enumerate(chunks) if (c.model_extra or {}).get("server_tool_run")]
    assert max(run_chunks) < first_text
    assert _text(chunks).startswith("Tool said: ")
    [finish] = [c for c in chunks if c.choices[0].finish_reason]
    assert finish.choices[0].finish_reason == "stop" and finish.model_extra["server_tool_runs"] == [ended]
    # Asked for usage: null on every chunk but the last, which has the rounds' sum.
    with_usage = list(_ask(stack, key, "python:" + code, stream=True, stream_options={"include_usage": True}))
    assert [c.usage is not None for c in with_usage].count(True) == 1 and with_usage[-1].usage.prompt_tokens > 0


@needs_sandbox
def test_a_run_that_times_out_says_so_in_the_stream_and_in_the_completion(stack: Stack) -> None:  # noqa: F811
    _, key = stack.key()
    chunks = list(_ask(stack, key, "python:while True:\n    pass", stream=True))
    ended = _runs(chunks)[-1]
    assert ended["status"] == "timeout" and "time limit" in ended["result"]["error"]
    assert ended["duration_ms"] >= 2_500  # the stack's 3 s limit, not an early failure


@needs_sandbox
def test_code_and_output_the_post_filter_flags_never_reach_the_client(stack: Stack) -> None:  # noqa: F811
    tenant, key = stack.key()
    completion = _ask(stack, key, _hex_args({"code": f"print({HARMFUL!r})"}))
    [run] = completion.model_extra["server_tool_runs"]
    assert run["content_filtered"] is True and run["arguments"] == "" and "result" not in run
    assert run["status"] == "ok"  # it ran; the client is not shown what it was
    assert "steel pipe" not in json.dumps(completion.model_dump())
    audit = SQLiteSafetyAudit(stack.data_dir / "fleetchat.db")
    try:
        records = audit.list_for_tenant(tenant, utc_now() - timedelta(hours=1), utc_now() + timedelta(minutes=1))
    finally:
        audit.close()
    assert [r.action.value for r in records] == ["withheld"]
    # An ordinary program is shown whole.
    plain = _ask(stack, key, "python:print('hello')").model_extra["server_tool_runs"][0]
    assert plain["result"]["output"] == "hello\n" and "content_filtered" not in plain


@needs_sandbox
def test_a_stored_turn_keeps_its_runs_for_the_chat_and_the_export(stack: Stack) -> None:  # noqa: F811
    _, key = stack.key()
    client = stack.sdk(key)
    code = "open('/mnt/data/out/table.md', 'w').write('| a |\\n|---|\\n| 1 |\\n')\nprint('stored run')"
    chunks = list(_ask(stack, key, _hex_args({"code": code}), stream=True, extra_body={"store": True}))
    [conversation] = [c.model_extra["conversation"] for c in chunks if (c.model_extra or {}).get("conversation")]
    auth = {"Authorization": f"Bearer {key}"}
    detail = httpx.get(f"{stack.url}/v1/conversations/{conversation['id']}", headers=auth, timeout=10).json()
    [run] = detail["messages"][-1]["server_tool_runs"]
    # Stored as the client saw it (the conversation API also spells out the flags that are false).
    assert {k: v for k, v in run.items() if v not in (False, [])} == _runs(chunks)[-1]
    assert run["result"]["output"] == "stored run\n" and json.loads(run["arguments"]) == {"code": code}
    [kept] = run["files"]
    assert client.files.content(kept["file_id"]).content == b"| a |\n|---|\n| 1 |\n"
    markdown = httpx.get(
        f"{stack.url}/v1/conversations/{conversation['id']}/export", params={"format": "markdown"}, headers=auth
    ).text
    assert "print('stored run')" in markdown and "```python" in markdown and "table.md" in markdown
    # Not streamed, the same.
    completion = _ask(stack, key, "python:print('again')", extra_body={"store": True})
    stored = httpx.get(f"{stack.url}/v1/conversations/{completion.model_extra['conversation']['id']}", headers=auth)
    [again] = stored.json()["messages"][-1]["server_tool_runs"]
    assert {k: v for k, v in again.items() if v not in (False, [])} == completion.model_extra["server_tool_runs"][0]


def test_a_tier_offers_its_tools_and_refuses_the_others(stack: Stack) -> None:  # noqa: F811
    _, free = stack.key(Tier.FREE)
    seen = len(stack.worker.state.bodies)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _ask(stack, free, "python:print(1)", server_tools=["calculator", "python"])
    assert refused.value.body["code"] == "server_tool_not_in_tier"
    assert refused.value.body["param"] == "server_tools[1]" and len(stack.worker.state.bodies) == seen
    calculated = stack.sdk(free).chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "calc:1+1"}], extra_body={"server_tools": ["calculator"]}
    )
    assert calculated.choices[0].message.content == "The answer is 2"

    def offered(key: str) -> list[str]:
        session = httpx.get(f"{stack.url}/v1/session", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        return session.json()["server_tools"]

    assert offered(free) == ["calculator"]
    assert offered(stack.key(Tier.PLUS)[1]) == (["calculator", "python"] if bwrap_works() else ["calculator"])


@needs_sandbox
def test_a_tenant_out_of_sandbox_places_mid_stream_gets_an_error_event(stack: Stack) -> None:  # noqa: F811
    _, key = stack.key()
    with ThreadPoolExecutor(2) as pool:
        slow = pool.submit(_ask, stack, key, "python:import time\ntime.sleep(1.5)\nprint('done')")
        time.sleep(0.5)  # the first run holds the tenant's one place
        received: list[Any] = []
        with pytest.raises(openai.APIError) as failed:
            for chunk in _ask(stack, key, "python:print('second')", stream=True):
                received.append(chunk)
        assert slow.result().model_extra["server_tool_runs"][0]["status"] == "ok"
    # The stream had begun (the call was told as it started), so the 429 arrives in-band, with its code.
    assert [run["status"] for run in _runs(received)] == ["running"]
    assert failed.value.code == "sandbox_busy"
