"""HTTP client to the workers (ours or `vllm serve`): non-streaming calls and streams, with retries before the first
byte and each replica's circuit breaker told how it did.

Retries happen only before any byte reached the client: a connect error, a first-byte timeout or a 5xx without an
error body moves the request to the next candidate replica after a jittered backoff (tenacity). An answer the worker
meant (a 4xx, or a 5xx with an OpenAI error body) is final. After the first byte, a broken stream raises
`UpstreamBrokeError` from `UpstreamStream.raw_events()`; functions/chat/streams/continuation.py decides what the client
sees (a continuation on another replica, or an in-band error event then `[DONE]`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_random_exponential

from functions.control.replica_breakers import ReplicaBreaker, ReplicaBreakers
from functions.control.routing import PoolRouter
from functions.metrics.failover import FailoverMetrics
from shared.errors import FleetchatError, ServiceUnavailableError, UpstreamError, error_from_upstream
from shared.fleet.tables import upstream_request
from shared.settings import Settings, UpstreamSettings, WorkerSettings
from shared.wire.sse import DONE

log = logging.getLogger("fleetchat.gateway")


@dataclass(frozen=True)
class UpstreamPolicy:
    """Timeouts and retry budget of worker calls (settings: FLEETCHAT_WORKER_*, FLEETCHAT_UPSTREAM_*)."""

    timeout_s: float  # a non-streamed answer, whole
    connect_timeout_s: float
    first_byte_timeout_s: float  # a stream's response headers
    inter_chunk_timeout_s: float  # silence between two events of a stream
    attempts: int
    backoff_s: float
    backoff_max_s: float

    @classmethod
    def of(cls, worker: WorkerSettings, upstream: UpstreamSettings) -> UpstreamPolicy:
        return cls(
            timeout_s=worker.timeout_s,
            connect_timeout_s=worker.connect_timeout_s,
            first_byte_timeout_s=worker.first_byte_timeout_s,
            inter_chunk_timeout_s=worker.inter_chunk_timeout_s,
            attempts=upstream.attempts,
            backoff_s=upstream.backoff_s,
            backoff_max_s=upstream.backoff_max_s,
        )

    @classmethod
    def defaults(cls) -> UpstreamPolicy:
        """The sections' defaults, without reading the environment."""
        return cls.of(WorkerSettings.model_construct(), UpstreamSettings.model_construct())


class UpstreamBrokeError(Exception):
    """A worker stream that ended without `[DONE]`: the connection broke, or the worker fell silent."""


@dataclass
class UpstreamStream:
    """An open worker stream whose status was 200: iterate `raw_events()` to relay it."""

    replica: str
    response: httpx.Response
    breaker: ReplicaBreaker | None = None

    async def raw_events(self) -> AsyncIterator[bytes]:
        """The worker's SSE events up to and including `[DONE]`; raises UpstreamBrokeError when the stream broke or
        stalled past the inter-chunk timeout (the replica's breaker counts it)."""
        try:
            buffer = b""
            async for piece in self.response.aiter_bytes():
                buffer += piece
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    if event.strip() == b"data: [DONE]":
                        yield DONE
                        return
                    yield event + b"\n\n"
            reason = "ended without [DONE]"
        except httpx.HTTPError as exc:  # ReadTimeout: the worker stalled past the inter-chunk timeout
            reason = type(exc).__name__
        finally:
            await self.response.aclose()
        # Reached only when the worker vanished mid-stream; a cancelled or closed relay never gets here.
        log.warning("worker stream from %s broke: %s", self.replica, reason)
        if self.breaker is not None:
            self.breaker.failed()
        raise UpstreamBrokeError(reason)


class NoReplicaReachableError(ServiceUnavailableError):
    """No replica of the pool could take the request before its first byte (unreachable, stalled, broken, or held
    back by its breaker); a worker that answered, even with an error it meant, is not this."""


class _ReplicaFailedError(Exception):
    """This replica failed before the first byte: try the next one."""


class _HeldBackError(Exception):
    """This replica's breaker let nothing through: try the next one at once."""


class WorkerClient:
    def __init__(
        self,
        client: httpx.AsyncClient,
        breakers: ReplicaBreakers | None = None,
        policy: UpstreamPolicy | None = None,
        metrics: FailoverMetrics | None = None,
        *,
        balanced: bool = False,
    ) -> None:
        self._client = client
        self.breakers = breakers if breakers is not None else ReplicaBreakers({})
        self.policy = policy or UpstreamPolicy.defaults()
        self._metrics = metrics
        # Each replica URL is a load balancer over many containers (a deployed Modal Server): a broken stream marks
        # one container gone, not the URL (functions/chat/streams/continuation.py).
        self.balanced = balanced

    async def complete(
        self,
        pool: str,
        replicas: list[str],
        body: dict[str, Any],
        headers: dict[str, str],
        path: str = "/v1/chat/completions",  # or /v1/embeddings (an embedding pool)
        method: str = "POST",  # GET: `body` is not sent (vLLM's /tokenizer_info)
    ) -> dict[str, Any]:
        _, response = await self._first_answer(pool, replicas, body, headers, stream=False, path=path, method=method)
        try:
            await response.aread()
            payload = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise UpstreamError("The model worker returned an unreadable response.") from exc
        finally:
            await response.aclose()
        return payload

    async def open_stream(
        self,
        pool: str,
        replicas: list[str],
        body: dict[str, Any],
        headers: dict[str, str],
        path: str = "/v1/chat/completions",  # or /v1/completions
    ) -> UpstreamStream:
        replica, response = await self._first_answer(pool, replicas, body, headers, stream=True, path=path)
        return UpstreamStream(replica, response, self.breakers.breaker(pool, replica))

    async def _first_answer(
        self,
        pool: str,
        replicas: list[str],
        body: dict[str, Any],
        headers: dict[str, str],
        *,
        stream: bool,
        path: str = "/v1/chat/completions",
        method: str = "POST",
    ) -> tuple[str, httpx.Response]:
        """The first replica's answer (status and headers), trying the next candidate on a failure before the first
        byte, at most `policy.attempts` failures, with full-jitter exponential backoff between tries."""
        policy = self.policy
        pending = iter(replicas)
        failures = 0
        jitter = wait_random_exponential(multiplier=policy.backoff_s, max=policy.backoff_max_s)

        def wait(state: RetryCallState) -> float:
            held = state.outcome is not None and isinstance(state.outcome.exception(), _HeldBackError)
            return 0.0 if held else jitter(state)

        def stop(state: RetryCallState) -> bool:
            return state.attempt_number >= len(replicas) or failures >= policy.attempts

        def before_sleep(state: RetryCallState) -> None:
            failed = state.outcome is not None and isinstance(state.outcome.exception(), _ReplicaFailedError)
            if failed and self._metrics is not None:
                self._metrics.upstream_retries.labels(pool).inc()

        retrying = AsyncRetrying(
            retry=retry_if_exception_type((_ReplicaFailedError, _HeldBackError)),
            stop=stop,
            wait=wait,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    replica = next(pending)
                    try:
                        answer = await self._try(pool, replica, body, headers, stream=stream, path=path, method=method)
                        return replica, answer
                    except _ReplicaFailedError:
                        failures += 1
                        raise
        except (_ReplicaFailedError, _HeldBackError, StopIteration) as exc:
            raise NoReplicaReachableError(
                "No model worker is available right now. Please retry shortly.", retry_after_s=5
            ) from exc
        raise AssertionError("unreachable: tenacity either returned or raised")  # pragma: no cover

    async def _try(
        self,
        pool: str,
        replica: str,
        body: dict[str, Any],
        headers: dict[str, str],
        *,
        stream: bool,
        path: str = "/v1/chat/completions",
        method: str = "POST",
    ) -> httpx.Response:
        """One replica's answer; tells its breaker how it did (or frees its probe if there is no verdict)."""
        breaker = self.breakers.breaker(pool, replica)
        if not breaker.admit():
            raise _HeldBackError(replica)
        policy, verdict = self.policy, False
        # A stream's reads wait at most the inter-chunk timeout; a whole answer may take the worker timeout.
        read = policy.inter_chunk_timeout_s if stream else policy.timeout_s
        timeout = httpx.Timeout(policy.timeout_s, connect=policy.connect_timeout_s, read=read)
        url, body, headers = upstream_request(pool, replica, path, body, headers)  # an external pool: its URL, key
        sent = body if method == "POST" else None
        request = self._client.build_request(method, url, json=sent, headers=headers, timeout=timeout)
        try:
            try:
                # A worker that accepts and never answers must not hang the client: headers within the limit.
                with anyio.fail_after(policy.first_byte_timeout_s if stream else None):
                    response = await self._client.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError) as exc:
                verdict = True
                breaker.failed()
                log.warning("worker %s of %s unreachable: %s", replica, pool, type(exc).__name__)
                raise _ReplicaFailedError(replica) from exc
            except (TimeoutError, httpx.ReadTimeout) as exc:
                verdict = True
                breaker.failed()
                if not stream:  # a whole answer that took the worker timeout is not replayed elsewhere
                    raise UpstreamError("The model worker did not answer in time.") from exc
                log.warning("worker %s of %s sent nothing within the first-byte timeout", replica, pool)
                raise _ReplicaFailedError(replica) from exc
            except httpx.HTTPError as exc:
                verdict = True
                breaker.failed()
                raise UpstreamError("The model worker failed to answer.") from exc
            if response.status_code == 200:
                verdict = True
                breaker.succeeded()
                return response
            error, meant = await _error_of(response)
            verdict = True
            if response.status_code in (401, 403):  # it refused the gateway's credential: never the client's fault
                breaker.failed()
                log.error(
                    "worker %s of %s refused the gateway's credential (%s): check FLEETCHAT_WORKER_API_KEY and the "
                    "proxy token (docs/operations.md, Worker credentials)", replica, pool, response.status_code
                )  # fmt: skip
                raise _ReplicaFailedError(replica) from error
            if response.status_code >= 500 and not meant:  # a proxy's 502 page, a crashed handler: not an answer
                breaker.failed()
                log.warning("worker %s of %s answered %s without an error body", replica, pool, response.status_code)
                raise _ReplicaFailedError(replica) from error
            breaker.succeeded()  # the worker answered and meant it: the replica is up
            raise error
        finally:
            if not verdict:
                breaker.released()


async def _error_of(response: httpx.Response) -> tuple[FleetchatError, bool]:
    """The worker's error as a domain error, and whether it was an OpenAI error body (an answer the worker meant)."""
    try:
        await response.aread()
        body: Any = response.json()
    except (httpx.HTTPError, ValueError):
        body = ""
    finally:
        await response.aclose()
    meant = isinstance(body, dict) and isinstance(body.get("error"), dict)
    return error_from_upstream(response.status_code, body), meant


def routed_workers(
    settings: Settings, urls: dict[str, list[str]], client: httpx.AsyncClient, failover: FailoverMetrics | None = None
) -> tuple[PoolRouter, WorkerClient]:
    """A pool router and worker client over `urls` (an encoder service's pools: embeddings, re-ranking), each replica
    behind its breaker, with chat's retry policy."""
    breakers = ReplicaBreakers(
        urls, threshold=settings.breaker.failure_threshold, cooldown_s=settings.breaker.cooldown_s, metrics=failover
    )
    workers = WorkerClient(client, breakers, UpstreamPolicy.of(settings.worker, settings.upstream), failover)
    return PoolRouter(urls, breakers), workers
