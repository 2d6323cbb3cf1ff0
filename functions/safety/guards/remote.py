"""Remote guards' HTTP: `RemoteEndpoint`, where a guard answers and how it is called — one JSON POST per attempt under a
deadline, tenacity's retries of transient failures, every failure ending as `GuardUnavailableError` (the fail policy
decides what that means).

Retrying is safe here: a guard only classifies, so a repeated POST changes nothing on its side. What is retried is
what another try can fix: no connection, a timeout, 429 and 5xx. A 4xx (a wrong key, an unknown model, an input the
guard will not take) or an answer that is not a JSON object is final.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from tenacity import AsyncRetrying, before_sleep_log, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_random_exponential

from functions.safety.guard import GuardUnavailableError

log = logging.getLogger("fleetchat.safety.guard")


class _Transient(Exception):
    """A 429 or 5xx answer: worth another try."""


def _transient(exc: BaseException) -> bool:
    # TransportError: refused connections and httpx's own timeouts; TimeoutError: the attempt's deadline.
    return isinstance(exc, httpx.TransportError | TimeoutError | _Transient)


@dataclass(frozen=True)
class RemoteEndpoint:
    """A remote guard's base URL (without `/v1`), the model named in each request, and how it is called."""

    client: httpx.AsyncClient  # the gateway's shared client
    base_url: str
    model: str
    api_key: str | None
    timeout_s: float  # per attempt, the whole exchange
    attempts: int

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` (with this endpoint's `model`) to `path` and return the JSON object answered;
        GuardUnavailableError after `attempts` tries."""
        url = f"{self.base_url.rstrip('/')}{path}"
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.attempts),
                # Short jittered waits: the request that waits on this guard is a live chat request.
                wait=wait_random_exponential(multiplier=0.1, max=1.0),
                retry=retry_if_exception(_transient),
                before_sleep=before_sleep_log(log, logging.WARNING),
                reraise=True,
            ):
                with attempt:
                    # httpx's timeout bounds each read, not the exchange: a guard trickling bytes would outlast it.
                    with anyio.fail_after(self.timeout_s):
                        response = await self.client.post(
                            url, json={"model": self.model, **body}, headers=headers, timeout=self.timeout_s
                        )
                    if response.status_code == 429 or response.status_code >= 500:
                        raise _Transient(f"guard answered {response.status_code}")
        except (httpx.HTTPError, TimeoutError, _Transient) as exc:
            raise GuardUnavailableError(f"guard at {url} unreachable: {exc!r}") from exc
        if response.status_code != 200:
            raise GuardUnavailableError(f"guard at {url} answered {response.status_code}: {response.text[:200]}")
        try:
            answer = response.json()
        except ValueError as exc:
            raise GuardUnavailableError(f"guard at {url} answered something that is not JSON") from exc
        if not isinstance(answer, dict):
            raise GuardUnavailableError(f"guard at {url} answered a JSON {type(answer).__name__}, not an object")
        return answer
