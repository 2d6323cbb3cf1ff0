"""Image input: every `image_url` part checked and made a data URI before anything is stored, screened or sent.

A data URI is decoded and its bytes must be the type it declares (PNG, JPEG, WebP or GIF, read from the bytes' own
signature by the `filetype` library, never trusted from the header) and open as an image within the size limits
(Pillow reads the header only: a decompression bomb is refused before it is decoded). An `https://` (or `http://`)
URL is fetched by the gateway, never by a worker: from public addresses only (every address the name resolves to must
be public, each redirect is checked again), within the time and size limits, and becomes a data URI of what it held.
So a worker, the stored conversation and every later turn see the same bytes, and a worker never makes a request a
client chose.

Which pools see is the pool table's (shared/fleet/pools.py `sees`); a request with an image for a pool that does not is
a 400 (`ChatService.check_images`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import filetype
import httpx

from shared.errors import InvalidRequestError
from shared.settings import ImageSettings
from shared.wire.schemas import ChatCompletionRequest, ChatMessage, ImageContentPart, ImageUrl

MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
_DATA_URI = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)(?:;[\w.+-]+=[\w.+-]+)*;base64,(?P<data>.*)$", re.DOTALL)
_MAX_REDIRECTS = 3


@dataclass(frozen=True)
class CheckedImage:
    media_type: str
    data: bytes
    width: int
    height: int

    def data_uri(self) -> str:
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode()}"


def has_images(request: ChatCompletionRequest) -> bool:
    return any(m.images() for m in request.messages)


def count_images(messages: list[ChatMessage]) -> int:
    return sum(len(m.images()) for m in messages)


def sniffed_type(data: bytes) -> str | None:
    """The image type the bytes' own signature says (the `filetype` library, as uploaded files are read), or None."""
    guess = filetype.guess(data)
    return guess.mime if guess is not None and guess.mime in MEDIA_TYPES else None


def check_image(data: bytes, declared: str | None, limits: ImageSettings, param: str) -> CheckedImage:
    """The image, or a 400 naming `param`: a supported type its bytes confirm, within the byte and pixel limits."""
    if len(data) > limits.max_bytes:
        raise InvalidRequestError(
            f"The image is {len(data):,} bytes; at most {limits.max_bytes:,} are taken.",
            param=param,
            code="image_too_large",
        )
    actual = sniffed_type(data)
    if actual is None:
        raise InvalidRequestError(
            "The image is not a PNG, JPEG, WebP or GIF file.", param=param, code="invalid_image_format"
        )
    if declared is not None and declared.lower().replace("image/jpg", "image/jpeg") != actual:
        raise InvalidRequestError(
            f"The image says it is {declared} but its bytes are {actual}.", param=param, code="invalid_image_format"
        )
    width, height = _dimensions(data, param)
    if max(width, height) > limits.max_side_px or width * height > limits.max_pixels:
        raise InvalidRequestError(
            f"The image is {width}x{height} pixels; at most {limits.max_side_px} a side and "
            f"{limits.max_pixels:,} in all are taken.",
            param=param,
            code="image_too_large",
        )
    return CheckedImage(actual, data, width, height)


def _dimensions(data: bytes, param: str) -> tuple[int, int]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header: nothing is decoded yet
            return image.size
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise InvalidRequestError("The image could not be read.", param=param, code="invalid_image") from exc


def decode_data_uri(url: str, limits: ImageSettings, param: str) -> CheckedImage:
    match = _DATA_URI.match(url)
    if match is None:
        raise InvalidRequestError(
            "An image URL must be https:// (or http://) or a base64 data URI (data:image/png;base64,...).",
            param=param,
            code="invalid_image_url",
        )
    if match["type"].lower() not in (*MEDIA_TYPES, "image/jpg"):
        raise InvalidRequestError(
            f"Images of type {match['type']} are not taken: PNG, JPEG, WebP or GIF.",
            param=param,
            code="invalid_image_format",
        )
    encoded = match["data"]
    if len(encoded) > (limits.max_bytes + 2) // 3 * 4 + 4:
        raise InvalidRequestError(f"The image is over {limits.max_bytes:,} bytes.", param=param, code="image_too_large")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequestError("The image's base64 data is malformed.", param=param, code="invalid_image") from exc
    return check_image(data, match["type"], limits, param)


class ImageFetcher:
    """Fetches `http(s)://` images for the gateway, from public addresses only."""

    def __init__(self, limits: ImageSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.limits = limits
        self._transport = transport

    async def fetch(self, url: str, param: str) -> CheckedImage:
        async with httpx.AsyncClient(
            timeout=self.limits.fetch_timeout_s, follow_redirects=False, transport=self._transport
        ) as client:
            for _ in range(_MAX_REDIRECTS + 1):
                await self._check_public(url, param)
                async with client.stream("GET", url, headers={"accept": ", ".join(MEDIA_TYPES)}) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    if response.status_code != 200:
                        raise _unfetched(f"the server answered {response.status_code}", param)
                    data = await self._body(response, param)
                    declared = response.headers.get("content-type", "").split(";")[0].strip() or None
                    if declared is not None and not declared.startswith("image/"):
                        declared = None  # a server's generic type: the bytes decide
                    return check_image(data, declared, self.limits, param)
            raise _unfetched("too many redirects", param)

    async def _body(self, response: httpx.Response, param: str) -> bytes:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.limits.max_bytes:
                raise InvalidRequestError(
                    f"The image is over {self.limits.max_bytes:,} bytes.", param=param, code="image_too_large"
                )
        return bytes(body)

    async def _check_public(self, url: str, param: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidRequestError(
                "An image URL must be https:// (or http://) or a base64 data URI.",
                param=param,
                code="invalid_image_url",
            )
        if self.limits.fetch_private_addresses:
            return
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            found = await asyncio.get_running_loop().getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise _unfetched("its host name does not resolve", param) from exc
        addresses = {ipaddress.ip_address(info[4][0]) for info in found}
        if not addresses or not all(a.is_global for a in addresses):
            raise InvalidRequestError(
                "Images are fetched from public addresses only.", param=param, code="invalid_image_url"
            )


def _unfetched(why: str, param: str) -> InvalidRequestError:
    return InvalidRequestError(f"The image could not be fetched: {why}.", param=param, code="image_fetch_failed")


async def inline_images(
    request: ChatCompletionRequest, limits: ImageSettings, fetcher: ImageFetcher
) -> ChatCompletionRequest:
    """The request with every image part a checked data URI (a fetched URL's bytes, a data URI re-encoded as checked),
    or a 400 naming the part; the request unchanged when it has none."""
    if not has_images(request):
        return request
    total = 0
    messages: list[ChatMessage] = []
    for i, message in enumerate(request.messages):
        if not message.images() or not isinstance(message.content, list):
            messages.append(message)
            continue
        parts = []
        for j, part in enumerate(message.content):
            if isinstance(part, ImageContentPart):
                param = f"messages.{i}.content.{j}.image_url.url"
                url = part.image_url.url
                is_data = url.startswith("data:")
                image = decode_data_uri(url, limits, param) if is_data else await fetcher.fetch(url, param)
                total += len(image.data)
                if total > limits.max_request_bytes:
                    raise InvalidRequestError(
                        f"The request's images are over {limits.max_request_bytes:,} bytes together.",
                        param=param,
                        code="image_too_large",
                    )
                checked = ImageUrl(url=image.data_uri(), detail=part.image_url.detail)
                part = ImageContentPart(type="image_url", image_url=checked)
            parts.append(part)
        messages.append(message.model_copy(update={"content": parts}))
    return request.model_copy(update={"messages": messages})
