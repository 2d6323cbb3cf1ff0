"""Image input through the gateway (real HTTP, the openai SDK, SQLite): OpenAI `image_url` parts reach a pool whose
deployed model sees, as checked data URIs (a URL fetched by the gateway, never by a worker), are stored with the turn
and sent again with the history; a pool that does not see, a bad image and an image on a private address are clear
400s that bill nothing and reach no worker.

The worker is a stand-in that records what it was sent (no model that sees runs on this machine): this checks the
gateway's handling of images, not a model's reading of them."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import RedirectResponse, Response
from PIL import Image

from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.pool_tables import deployed_model_changed
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker


def png(width: int = 8, height: int = 6, colour: str = "red") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "blue").save(buffer, format="JPEG")
    return buffer.getvalue()


def data_uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def asking(*urls: str, text: str = "What is in this picture?") -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return [{"role": "user", "content": parts}]


@pytest.fixture
def seeing_tables() -> Iterator[None]:
    """`mini` deployed with a model that takes two images a prompt; `flagship` as built in (text only)."""
    with deployed_model_changed("mini", max_images_per_prompt=2):
        yield


@pytest.fixture
def worker() -> Iterator[tuple[str, FastAPI]]:
    app = stand_in_worker("w", echo=True)
    with serve(app) as url:
        yield url, app


@pytest.fixture
def pictures() -> Iterator[str]:
    """A web server with a PNG, a JPEG served as `image/png`, a redirect to the PNG, and a page that is no image."""
    app = FastAPI()

    @app.get("/cat.png")
    def cat() -> Response:
        return Response(png(colour="orange"), media_type="image/png")

    @app.get("/mislabelled.png")
    def mislabelled() -> Response:
        return Response(jpeg(), media_type="image/png")

    @app.get("/moved")
    def moved() -> RedirectResponse:
        return RedirectResponse("/cat.png")

    @app.get("/page")
    def page() -> Response:
        return Response("<html>not an image</html>", media_type="text/html")

    with serve(app) as url:
        yield url


def seeing_gateway(gateway_for: GatewayFactory, url: str, **overrides: Any) -> Gateway:
    return gateway_for({"mini": [url], "flagship": [url]}, environment="deployed", session_secret="s" * 32, **overrides)


def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0, timeout=30)


def refused(api: openai.OpenAI, messages: list[dict[str, Any]], model: str = "mini", **extra: Any) -> dict:
    with pytest.raises(openai.BadRequestError) as raised:
        api.chat.completions.create(model=model, messages=messages, extra_body=extra or None)  # type: ignore[arg-type]
    return raised.value.body  # type: ignore[return-value]


def test_a_pool_that_does_not_see_refuses_images_and_bills_nothing(
    gateway_for: GatewayFactory, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = gateway_for({"mini": [url], "flagship": [url]})  # local: the packaged model reads text only
    api = client(gateway)
    assert {m.id: m.model_dump()["capabilities"]["vision"] for m in api.models.list().data if m.id in ("mini",)} == {
        "mini": False
    }
    error = refused(api, asking(data_uri(png())))
    assert error["code"] == "image_input_unsupported" and error["param"] == "messages"
    assert "does not take images" in error["message"] and "No model here does" in error["message"]
    assert app.state.bodies == []  # no worker saw it
    usage = httpx.get(f"{gateway.url}/v1/usage", headers=gateway.headers(), timeout=10).json()
    assert usage.get("total_tokens", 0) == 0


def test_a_seeing_pool_gets_the_image_as_a_checked_data_uri(
    gateway_for: GatewayFactory, seeing_tables: None, worker: tuple[str, FastAPI], pictures: str
) -> None:
    url, app = worker
    gateway = seeing_gateway(gateway_for, url, images={"fetch_private_addresses": True})
    api = client(gateway)
    vision = {m.id: m.model_dump()["capabilities"]["vision"] for m in api.models.list().data}
    assert vision["mini"] is True and vision["flagship"] is False

    image = png()
    answer = api.chat.completions.create(model="mini", messages=asking(data_uri(image)))  # type: ignore[arg-type]
    assert (answer.choices[0].message.content or "").startswith("echo: ")  # the stand-in answered
    sent = app.state.bodies[-1]["messages"][-1]["content"]
    assert sent == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": data_uri(image)}},
    ]

    # A URL is fetched by the gateway (a redirect followed, checked again): the worker gets its bytes, never the URL.
    api.chat.completions.create(model="mini", messages=asking(f"{pictures}/moved"))  # type: ignore[arg-type]
    assert app.state.bodies[-1]["messages"][-1]["content"][1]["image_url"]["url"] == data_uri(png(colour="orange"))

    # The flagship is asked by name: it does not see, and mini is named as one that does.
    error = refused(api, asking(data_uri(image)), model="flagship")
    assert error["code"] == "image_input_unsupported" and "Models that do here: mini" in error["message"]


@pytest.mark.parametrize(
    ("url", "code"),
    [
        (data_uri(jpeg(), "image/png"), "invalid_image_format"),  # the bytes decide, not the header
        (data_uri(b"GIF89a not really", "image/gif"), "invalid_image"),
        ("data:image/png;base64,***", "invalid_image"),
        (data_uri(b"%PDF-1.4", "application/pdf"), "invalid_image_format"),
        ("ftp://example.com/cat.png", "invalid_image_url"),
        (data_uri(png(9000, 1)), "image_too_large"),
    ],
)
def test_a_bad_image_is_a_400_naming_its_part(
    gateway_for: GatewayFactory, seeing_tables: None, worker: tuple[str, FastAPI], url: str, code: str
) -> None:
    gateway = seeing_gateway(gateway_for, worker[0])
    error = refused(client(gateway), asking(url))
    assert (error["code"], error["param"]) == (code, "messages.0.content.1.image_url.url")
    assert worker[1].state.bodies == []


def test_limits_on_count_size_role_and_addresses(
    gateway_for: GatewayFactory, seeing_tables: None, worker: tuple[str, FastAPI], pictures: str
) -> None:
    gateway = seeing_gateway(gateway_for, worker[0], images={"max_bytes": 2048})
    api = client(gateway)
    image = data_uri(png())
    assert refused(api, asking(image, image, image))["code"] == "too_many_images"  # the pool takes two
    assert refused(api, asking(data_uri(png(200, 200, "white") + b"\0" * 4096)))["code"] == "image_too_large"
    assistant = [{"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": image}}]}]
    assert "user messages only" in refused(api, [*asking(image), *assistant])["message"]
    # A private address (here the loopback server) is never fetched: a worker-side or gateway-side SSRF is refused.
    error = refused(api, asking(f"{pictures}/cat.png"))
    assert error["code"] == "invalid_image_url" and "public addresses only" in error["message"]
    assert worker[1].state.bodies == []


def test_fetched_urls_that_are_not_images_are_refused(
    gateway_for: GatewayFactory, seeing_tables: None, worker: tuple[str, FastAPI], pictures: str
) -> None:
    gateway = seeing_gateway(gateway_for, worker[0], images={"fetch_private_addresses": True})
    api = client(gateway)
    assert refused(api, asking(f"{pictures}/page"))["code"] == "invalid_image_format"
    assert refused(api, asking(f"{pictures}/mislabelled.png"))["code"] == "invalid_image_format"
    assert refused(api, asking(f"{pictures}/missing.png"))["code"] == "image_fetch_failed"


def test_a_stored_image_is_kept_with_its_turn_and_sent_again_with_the_history(
    gateway_for: GatewayFactory, seeing_tables: None, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    gateway = seeing_gateway(gateway_for, url)
    api = client(gateway)
    image = data_uri(png())
    first = api.chat.completions.create(
        model="mini",
        messages=asking(image),
        extra_body={"store": True},  # type: ignore[arg-type]
    )
    conversation_id = first.model_dump()["conversation"]["id"]
    first_prompt = app.state.bodies[-1]["messages"]
    api.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": "And its colour?"}],
        extra_body={"conversation_id": conversation_id},
    )  # fmt: skip
    second_prompt = app.state.bodies[-1]["messages"]
    assert second_prompt[: len(first_prompt)] == first_prompt  # the image again, the same bytes: the prefix is kept
    detail = httpx.get(
        f"{gateway.url}/v1/conversations/{conversation_id}", headers=gateway.headers(), timeout=10
    ).json()
    question = detail["messages"][0]
    assert question["content"] == "What is in this picture?"
    assert question["content_parts"][1] == {"type": "image_url", "image_url": {"url": image, "detail": None}}
    assert detail["messages"][2]["content_parts"] is None  # a text-only message stays text
    markdown = httpx.get(
        f"{gateway.url}/v1/conversations/{conversation_id}/export", params={"format": "markdown"},
        headers=gateway.headers(), timeout=10,
    ).text  # fmt: skip
    assert "What is in this picture?\n_(1 image attached: in the JSON export.)_" in markdown

    # The conversation now holds an image: a model that does not see cannot continue it.
    error = refused(api, [{"role": "user", "content": "Go on"}], model="flagship", conversation_id=conversation_id)
    assert error["code"] == "image_input_unsupported"


def test_the_responses_api_takes_an_input_image_as_chat_does(
    gateway_for: GatewayFactory, seeing_tables: None, worker: tuple[str, FastAPI]
) -> None:
    url, app = worker
    api = client(seeing_gateway(gateway_for, url))
    image = data_uri(png())
    part = {"type": "input_image", "image_url": image, "detail": "low"}
    answer = api.responses.create(
        model="mini", input=[{"role": "user", "content": [{"type": "input_text", "text": "What is it?"}, part]}]
    )  # type: ignore[list-item]
    assert answer.status == "completed"
    assert app.state.bodies[-1]["messages"][-1]["content"] == [
        {"type": "text", "text": "What is it?"},
        {"type": "image_url", "image_url": {"url": image, "detail": "low"}},
    ]
    with pytest.raises(openai.BadRequestError) as refused:  # flagship reads text only
        api.responses.create(model="flagship", input=[{"role": "user", "content": [part]}])  # type: ignore[list-item]
    assert refused.value.body["code"] == "image_input_unsupported"  # type: ignore[index]
