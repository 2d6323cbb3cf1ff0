"""Images in the web chat, in real Chromium against the real gateway: attached with the paperclip, pasted into the box
and dropped on the chat, shown as thumbnails, sent with the message as `image_url` parts to a model that sees, shown
with the message and again after a reload; a model that does not see says so instead of taking them. Desktop and
phone widths.

The gateway runs as deployed with `mini` given a model that sees, in front of a stand-in worker that records what it
was sent (no model that sees runs on this machine): the chat's handling of images, not a model's reading of them."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from PIL import Image

from tests.browser.conftest import screenshot
from tests.browser.test_web_chat import sign_in, wait_status
from tests.browser.test_web_chat_branches import no_sideways_scroll, until, users, viewport  # noqa: F401 (fixtures)
from tests.integration.conftest import Gateway, GatewayFactory, gateway_for  # noqa: F401 (a fixture)
from tests.support.pool_tables import deployed_model_changed
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker

pytestmark = pytest.mark.browser


def png_bytes(colour: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (24, 16), colour).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def seeing(gateway_for: GatewayFactory) -> Iterator[tuple[Gateway, FastAPI]]:  # noqa: F811
    """`mini` deployed with a model that takes four images a prompt; `flagship` reads text only."""
    worker = stand_in_worker("w", echo=True)
    with deployed_model_changed("mini", max_images_per_prompt=4), serve(worker) as url:
        yield gateway_for({"flagship": [url], "mini": [url]}, environment="deployed", session_secret="s" * 32), worker


def paste_image(page: Any, data: bytes, name: str) -> None:
    page.evaluate(
        """([b64, name]) => {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name, { type: "image/png" }));
            const box = document.querySelector('[data-testid="composer"]');
            const paste = { clipboardData: transfer, bubbles: true, cancelable: true };
            box.dispatchEvent(new ClipboardEvent("paste", paste));
        }""",
        [base64.b64encode(data).decode(), name],
    )


def drop_image(page: Any, data: bytes, name: str) -> None:
    page.evaluate(
        """([b64, name]) => {
            const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name, { type: "image/png" }));
            const main = document.querySelector("main");
            for (const type of ["dragenter", "dragover", "drop"]) {
                main.dispatchEvent(new DragEvent(type, { dataTransfer: transfer, bubbles: true, cancelable: true }));
            }
        }""",
        [base64.b64encode(data).decode(), name],
    )


def chips(page: Any) -> Any:
    return page.get_by_test_id("image-chip")


def test_images_go_with_a_message_to_a_model_that_sees(
    page: Any,
    seeing: tuple[Gateway, FastAPI],
    viewport: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    gateway, worker = seeing
    sign_in(page, gateway.url, gateway.key)
    page.get_by_test_id("model").select_option("flagship")
    paste_image(page, png_bytes("red"), "red.png")
    note = page.get_by_test_id("image-note")
    note.wait_for()
    assert "flagship does not take images" in note.inner_text() and "mini" in note.inner_text()
    assert chips(page).count() == 0

    page.get_by_test_id("model").select_option("mini")
    picked = tmp_path / "green.png"
    picked.write_bytes(png_bytes("green"))
    page.get_by_test_id("attach-input").set_input_files(str(picked))  # the paperclip
    paste_image(page, png_bytes("red"), "red.png")  # pasted into the box
    drop_image(page, png_bytes("blue"), "blue.png")  # dropped on the chat
    until(lambda: chips(page).count() == 3, "three thumbnails wait in the composer")
    page.get_by_role("button", name="Remove image 2 (red.png)").click()
    until(lambda: chips(page).count() == 2, "the removed one is gone")
    no_sideways_scroll(page, viewport)
    screenshot(page, f"images-composer-{viewport}")

    composer = page.get_by_test_id("composer")
    composer.fill("What colours are these?")
    composer.press("Enter")
    assert wait_status(page, ("done",), timeout_ms=30_000) == "done"
    sent = worker.state.bodies[-1]["messages"][-1]["content"]
    assert sent[0] == {"type": "text", "text": "What colours are these?"}
    urls = [part["image_url"]["url"] for part in sent[1:]]
    expected = [f"data:image/png;base64,{base64.b64encode(png_bytes(c)).decode()}" for c in ("green", "blue")]
    assert urls == expected
    assert chips(page).count() == 0  # sent: the composer is empty again
    shown = users(page).last.get_by_test_id("message-image")
    assert shown.count() == 2 and shown.first.get_attribute("src") == expected[0]
    screenshot(page, f"images-sent-{viewport}")

    page.reload()
    page.get_by_test_id("composer").wait_for()
    until(lambda: users(page).last.get_by_test_id("message-image").count() == 2, "the stored images are shown again")
    assert users(page).last.get_by_test_id("message-image").last.get_attribute("src") == expected[1]
