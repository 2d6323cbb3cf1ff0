"""The web chat in real Chromium resumes an answer whose connection broke mid-stream: it reconnects with
`Last-Event-ID` to the gateway's resume endpoint and shows the whole answer, once, without asking for it again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import assistant, sign_in, wait_status
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

pytestmark = pytest.mark.browser

SCRIPT = "Lisbon in three days: Alfama and the castle first, then Belem and its tower, and Sintra on the third day. "


@pytest.fixture
def lisbon(gateway_for: GatewayFactory) -> Iterator[tuple[Gateway, Any]]:  # noqa: F811
    worker = scripted_worker(SCRIPT, delay_s=0.01)
    with serve(worker) as url:
        yield gateway_for({"flagship": [url], "mini": [url]}), worker


def test_a_stream_cut_mid_answer_is_resumed_not_restarted(page: Any, lisbon: tuple[Gateway, Any]) -> None:
    gateway, worker = lisbon
    cut: dict[str, int] = {}

    def break_half_way(route: Any) -> None:
        """The network drops the answer half-way: the browser gets the first half of the events, then the end."""
        response = route.fetch()
        events = response.body().split(b"\n\n")
        cut["events"] = len(events)
        half = b"\n\n".join(events[: len(events) // 2]) + b"\n\n"
        route.fulfill(status=response.status, headers=response.headers, body=half)

    page.route("**/v1/chat/completions", break_half_way)
    resumed: list[str] = []
    page.on(
        "request",
        lambda request: (
            resumed.append(request.headers.get("last-event-id", "")) if request.url.endswith("/stream") else None
        ),
    )
    sign_in(page, gateway.url, gateway.key)
    composer = page.get_by_test_id("composer")
    composer.fill("Three days in Lisbon?")
    composer.press("Enter")
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    assert cut["events"] > 10  # the cut really was mid-answer
    shown = " ".join(assistant(page).locator(".message-body").inner_text().split())
    assert shown == " ".join(SCRIPT.split())
    assert len(resumed) == 1 and int(resumed[0]) > 0  # one resume, after the last event received
    assert worker.state.calls == 1  # resumed, never asked again
    assert page.get_by_test_id("error").count() == 0
    screenshot(page, "14-resumed-after-a-network-blip")
