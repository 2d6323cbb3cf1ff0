"""HTTP client to the workers (ours or `vllm serve`): non-streaming calls and SSE relay with failover.

Failover happens only before the first byte reaches the client; after that, a broken upstream becomes an in-band
SSE error event followed by `[DONE]` — a stream never ends silently.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from shared.errors import FleetchatError, ServiceUnavailableError, UpstreamError, error_from_upstream
from shared.sse import DONE, sse_error

log = logging.getLogger("fleetchat.gateway")


@dataclass
class UpstreamStream:
    """An open worker stream whose status was 200: iterate `events()` to relay it."""

    replica: str
    response: httpx.Response

    async def events(self) -> AsyncIterator[bytes]:
        saw_done = False
        try:
            buffer = b""
            async for piece in self.response.aiter_bytes():
                buffer += piece
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    if event.strip() == b"data: [DONE]":
                        saw_done = True
                        yield DONE
                        return
                    yield event + b"\n\n"
        except httpx.HTTPError as exc:
            log.warning("worker stream from %s broke: %s", self.replica, type(exc).__name__)
        finally:
            await self.response.aclose()
        # Reached only when the worker vanished mid-stream; a cancelled or closed relay never gets here.
        if not saw_done:
            yield sse_error(UpstreamError("The model worker stopped before finishing this response."))
            yield DONE


class NoReplicaReachableError(ServiceUnavailableError):
    """No replica of the pool accepted a connection (a worker that answered, even with 503, is not this)."""


class WorkerClient:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def complete(self, replicas: list[str], body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        _, response = await self._first_answer(replicas, body, headers)
        try:
            await response.aread()
            payload = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise UpstreamError("The model worker returned an unreadable response.") from exc
        finally:
            await response.aclose()
        return payload

    async def open_stream(self, replicas: list[str], body: dict[str, Any], headers: dict[str, str]) -> UpstreamStream:
        replica, response = await self._first_answer(replicas, body, headers)
        return UpstreamStream(replica, response)

    async def _first_answer(
        self, replicas: list[str], body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[str, httpx.Response]:
        """Send to the first replica that answers; a 4xx/5xx answer is the final word (never retried elsewhere)."""
        last_error: Exception | None = None
        for replica in replicas:
            request = self._client.build_request("POST", f"{replica}/v1/chat/completions", json=body, headers=headers)
            try:
                response = await self._client.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                log.warning("worker %s unreachable: %s", replica, type(exc).__name__)
                last_error = exc
                continue
            except httpx.HTTPError as exc:
                raise UpstreamError("The model worker failed to answer.") from exc
            if response.status_code != 200:
                raise await _error_of(response)
            return replica, response
        raise NoReplicaReachableError(
            "No model worker is available right now. Please retry shortly.", retry_after_s=5
        ) from last_error


async def _error_of(response: httpx.Response) -> FleetchatError:
    try:
        await response.aread()
        body: Any = response.json()
    except (httpx.HTTPError, ValueError):
        body = ""
    finally:
        await response.aclose()
    return error_from_upstream(response.status_code, body)
