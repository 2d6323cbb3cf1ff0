"""The code interpreter in the web chat, in real Chromium against the real gateway, the real sandbox and a scripted
worker that calls the python tool: the switch (offered on the plus tier), a run shown while it runs and then with its
code, output and a downloadable file, before the answer; a run that times out says so; a reopened conversation
shows its runs; at desktop and phone widths."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from functions.sandbox.bubblewrap import bwrap_works
from shared.server_tool_settings import SandboxSettings, ServerToolSettings
from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import assistant, send, sign_in, wait_status
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.servers import serve
from tests.support.stand_ins.tool_worker import answer, last_tool_result, tool_call, tool_worker

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not bwrap_works(), reason="bubblewrap not installed (.ci/run installs it)"),
]

TABLE_PROGRAM = (
    "import time\n"
    "time.sleep(1.5)  # long enough to be seen running\n"
    "rows = [(n, n * n) for n in range(1, 6)]\n"
    "with open('/mnt/data/out/squares.md', 'w') as out:\n"
    "    out.write('| n | n² |\\n|---|---|\\n' + ''.join(f'| {n} | {s} |\\n' for n, s in rows))\n"
    "print(sum(s for _, s in rows))\n"
)
SQUARES_MD = "| n | n² |\n|---|---|\n" + "".join(f"| {n} | {n * n} |\n" for n in range(1, 6))


def script(body: dict[str, Any]) -> dict[str, Any]:
    """Runs a program chosen by the last user message, then answers with what it printed."""
    asked = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    result = last_tool_result(body)
    if result is not None:
        printed = (result.get("output") or "").strip()
        return answer(f"The program printed **{printed}**." if result["status"] == "ok" else "The program timed out.")
    code = "while True:\n    pass\n" if "forever" in asked else TABLE_PROGRAM
    return tool_call("python", {"code": code})


@pytest.fixture
def coder(gateway_for: GatewayFactory, tmp_path: Path) -> Iterator[Gateway]:  # noqa: F811
    tools = ServerToolSettings(python_timeout_s=3, sandbox=SandboxSettings(slots_dir=tmp_path / "slots"))
    with serve(tool_worker(script)) as url:
        yield gateway_for({"flagship": [url], "mini": [url]}, server_tools=tools)


def test_a_run_is_shown_as_it_runs_then_with_its_code_output_and_file(page: Any, coder: Gateway) -> None:
    sign_in(page, coder.url, coder.key)
    toggle = page.get_by_test_id("code-toggle")
    assert toggle.get_attribute("aria-pressed") == "false"
    toggle.click()
    assert toggle.get_attribute("aria-pressed") == "true"
    send(page, "Square the numbers 1 to 5 and give me a table")
    run = page.get_by_test_id("tool-run").first
    run.wait_for()
    # Seen while it runs: the code is on screen before any output or answer.
    page.wait_for_selector('[data-testid="tool-run"][data-status="running"]', timeout=20_000)
    assert "time.sleep(1.5)" in run.get_by_test_id("tool-run-code").inner_text()
    assert run.get_by_test_id("tool-run-output").count() == 0
    screenshot(page, "40-code-interpreter-running")
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    assert run.get_attribute("data-status") == "ok"
    assert run.get_by_test_id("tool-run-label").inner_text().startswith("Ran in")
    assert run.get_by_test_id("tool-run-output").inner_text().splitlines()[-1].strip() == "55"
    assert "The program printed 55." in assistant(page).inner_text()
    # The file it wrote, downloadable with the session the page holds.
    link = run.get_by_test_id("tool-run-file")
    assert link.inner_text().strip() == "squares.md"
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "squares.md"
    assert Path(download.value.path()).read_text(encoding="utf-8") == SQUARES_MD
    screenshot(page, "41-code-interpreter-done")
    # Reopened, the answer still shows its run (stored with the turn), and the switch kept its place.
    page.reload()
    page.get_by_test_id("conversation").first.click()
    wait_status(page, ("done",))
    stored = page.get_by_test_id("tool-run").first
    stored.wait_for()
    assert stored.get_attribute("data-status") == "ok" and "55" in stored.get_by_test_id("tool-run-output").inner_text()
    assert page.get_by_test_id("code-toggle").get_attribute("aria-pressed") == "true"
    page.set_viewport_size({"width": 390, "height": 844})
    stored.scroll_into_view_if_needed()
    assert stored.is_visible()
    screenshot(page, "42-code-interpreter-phone")


def test_a_run_that_times_out_says_so(page: Any, coder: Gateway) -> None:
    sign_in(page, coder.url, coder.key)
    page.get_by_test_id("code-toggle").click()
    send(page, "Count forever")
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    run = page.get_by_test_id("tool-run").first
    assert run.get_attribute("data-status") == "timeout"
    assert run.get_by_test_id("tool-run-label").inner_text().startswith("Timed out after")
    assert "time limit" in run.get_by_test_id("tool-run-output").inner_text()
    screenshot(page, "43-code-interpreter-timeout")


def test_the_switch_is_offered_only_where_the_tier_has_the_tool(page: Any, coder: Gateway) -> None:
    session = httpx.get(f"{coder.url}/v1/session", headers={"Authorization": f"Bearer {coder.key}"}, timeout=10)
    assert session.json()["server_tools"] == ["calculator", "python"]
    sign_in(page, coder.url, coder.key)
    assert page.get_by_test_id("code-toggle").count() == 1
    # Without python on offer (a tier without it, or no sandbox here) the page offers no switch.
    page.route(
        "**/v1/session",
        lambda route: route.fulfill(
            status=200,
            content_type="application/json",
            body=json.dumps({**session.json(), "server_tools": ["calculator"]}),
        ),
    )
    page.reload()
    page.get_by_test_id("composer").wait_for()
    assert page.get_by_test_id("code-toggle").count() == 0
