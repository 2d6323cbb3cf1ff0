"""`JudgeClient`: grades one answer by calling an OpenAI-compatible chat-completions endpoint with the rubric.

Plain httpx, not the `openai` SDK: the SDK here runs on its own HTTP stack (httpx2) and cannot share the gateway's
`httpx.AsyncClient`, whose connection pool the shadow judge reuses. Transient failures (connection errors, timeouts,
408/409/429/5xx) are retried a bounded number of times with jittered exponential backoff (tenacity); each attempt is
bounded by `timeout_s`. Whatever goes wrong, `judge` returns a `JudgeVerdict` whose `error` says why; only
cancellation propagates.

Example::

    client = JudgeClient(JudgeEndpoint(base_url="http://127.0.0.1:8101/v1", model="flagship"))
    verdict = await client.judge(JudgeRequest(question="2+2?", answer="4"))
    verdict.scores.overall if verdict.scores else verdict.error
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from pydantic import BaseModel, Field, SecretStr
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

from functions.judging.rubric import messages_for, parse_scores
from functions.judging.verdict import JudgeRequest, JudgeVerdict
from shared.fleet.tables import tables
from shared.settings import Settings

_RETRIED_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
# Sent with every judge call: a fleetchat gateway used as the judge (FLEETCHAT_JUDGE_URL pointing at one) does not
# hand the judge's own answers to its shadow judge, which would grade grades.
JUDGE_CALL_HEADER = "x-fleetchat-judge-call"


class JudgeEndpoint(BaseModel):
    base_url: str  # OpenAI-compatible, including /v1 (e.g. http://127.0.0.1:8101/v1)
    model: str
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    attempts: int = Field(default=3, ge=1, le=10)  # tries of a transient failure
    max_tokens: int = Field(default=256, ge=16)  # the JSON reply and a short rationale


def judge_endpoint(settings: Settings) -> JudgeEndpoint:
    """The judge named in settings: `judge_url` when set, else the first worker of `judge_pool` (ValueError when
    that pool has no worker URL)."""
    if settings.judge.url:
        base_url = settings.judge.url
    elif (
        hosted := tables().external_pools.get(settings.judge.pool)
    ) is not None:  # the operator file's hosted endpoint
        key = hosted.external.api_key()
        return JudgeEndpoint(
            base_url=hosted.external.base_url,
            model=settings.judge.model or hosted.external.model,
            api_key=SecretStr(key) if key else None,
            timeout_s=settings.judge.timeout_s,
            attempts=settings.judge.attempts,
        )
    else:
        replicas = settings.resolved_worker_urls().get(settings.judge.pool)
        if not replicas:
            raise ValueError(f"the judge pool {settings.judge.pool!r} has no worker; set FLEETCHAT_JUDGE_URL")
        base_url = replicas[0].rstrip("/") + "/v1"
    return JudgeEndpoint(
        base_url=base_url,
        model=settings.judge.model or settings.judge.pool,
        api_key=settings.judge.api_key,
        timeout_s=settings.judge.timeout_s,
        attempts=settings.judge.attempts,
    )


class _Transient(Exception):
    """A failure worth another try (HTTP status or transport error)."""


class JudgeClient:
    def __init__(self, endpoint: JudgeEndpoint, *, http: httpx.AsyncClient | None = None) -> None:
        self.endpoint = endpoint
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient()
        self._url = endpoint.base_url.rstrip("/") + "/chat/completions"
        self._headers = {JUDGE_CALL_HEADER: "1"}
        if endpoint.api_key:
            self._headers["authorization"] = f"Bearer {endpoint.api_key.get_secret_value()}"

    async def judge(self, request: JudgeRequest) -> JudgeVerdict:
        """The judge's verdict on one answer; never raises for a failed call or a reply it cannot parse."""
        model = self.endpoint.model
        start = time.perf_counter()
        try:
            raw = await self._reply(request)
        except Exception as exc:
            return JudgeVerdict(
                scores=None, raw="", error=_describe(exc), judge_model=model, latency_s=time.perf_counter() - start
            )
        scores, error = parse_scores(raw)
        return JudgeVerdict(
            scores=scores, raw=raw, error=error, judge_model=model, latency_s=time.perf_counter() - start
        )

    async def _reply(self, request: JudgeRequest) -> str:
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": messages_for(request),
            "temperature": 0,  # grades should not depend on sampling luck
            "max_tokens": self.endpoint.max_tokens,
            "stream": False,
        }
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.endpoint.attempts),
            wait=wait_random_exponential(multiplier=0.5, max=8),
            retry=retry_if_exception(lambda exc: isinstance(exc, _Transient)),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                payload = await self._post(body)
        return _content_of(payload)

    async def _post(self, body: dict[str, Any]) -> Any:
        try:
            response = await self._http.post(
                self._url, json=body, headers=self._headers, timeout=self.endpoint.timeout_s
            )
        except httpx.TransportError as exc:  # connect errors, timeouts, a dropped connection
            raise _Transient(f"judge did not answer ({type(exc).__name__})") from exc
        if response.status_code in _RETRIED_STATUS:
            raise _Transient(f"judge answered HTTP {response.status_code}")
        if response.status_code == 404:
            raise ValueError("judge answered HTTP 404 (is its URL the base including /v1, and the model right?)")
        if response.status_code != 200:
            raise ValueError(f"judge answered HTTP {response.status_code}")
        return response.json()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()


def _content_of(payload: Any) -> str:
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError("judge reply is not a chat completion") from exc
    if not isinstance(content, str):
        raise ValueError("judge reply has no text content")
    return content


def _describe(exc: Exception) -> str:
    """A short reason for the verdict; never the request (it may hold user text) or a key."""
    if isinstance(exc, ValueError) and not isinstance(exc, httpx.HTTPError):
        return str(exc) if str(exc).startswith("judge ") else f"judge reply unreadable ({type(exc).__name__})"
    return str(exc) if isinstance(exc, _Transient) else f"judge call failed ({type(exc).__name__})"
