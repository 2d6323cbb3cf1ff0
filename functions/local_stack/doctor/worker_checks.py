"""Worker reachability: every replica of every pool (canaries and the Llama Guard pool included) answers
`GET /health` and serves, by `GET /v1/models`, the model its pool's name stands for."""

from __future__ import annotations

import asyncio

import httpx
from pydantic import BaseModel, ConfigDict

from functions.local_stack.doctor.results import CheckResult, fail, ok
from functions.local_stack.worker_key import presenting_stack_key
from shared.settings import Settings
from shared.wire.worker_auth import FleetWorkerAuth


class Replica(BaseModel):
    model_config = ConfigDict(frozen=True)

    pool: str  # what the check is filed under
    url: str
    model: str  # the id /v1/models must list (a pool's workers serve under the pool's name)


def replicas(settings: Settings) -> list[Replica]:
    found = [Replica(pool=p, url=u, model=p) for p, urls in settings.resolved_worker_urls().items() for u in urls]
    for pool, canary in settings.canaries.items():
        found += [Replica(pool=f"{pool} canary", url=url, model=pool) for url in canary.worker_urls]
    if settings.guard.kind == "llama_guard" and settings.guard.url:
        model = settings.guard.model or "llama-guard"
        found.append(Replica(pool="guard", url=settings.guard.url, model=model))
    return found


async def check_replica(client: httpx.AsyncClient, replica: Replica) -> CheckResult:
    base, name = replica.url.rstrip("/"), f"{replica.pool} {replica.url}"
    try:
        health = await client.get(f"{base}/health")
        if health.status_code != 200:
            hint = "see the worker's log; a pool scaled to zero may still be starting (raise --timeout)"
            return fail("workers", name, f"/health answered {health.status_code}", hint)
        listed = await client.get(f"{base}/v1/models")
        if listed.status_code == 401:
            hint = "the stack's key is the data dir's worker_api_key; deployed, the fleetchat-workers secret"
            return fail("workers", name, "refused the worker key (401)", hint)
        listed.raise_for_status()
        served = [str(card.get("id")) for card in listed.json().get("data", [])]
    except httpx.TimeoutException:
        hint = "the worker is down or starting (a cold GPU start takes minutes): retry with a larger --timeout"
        return fail("workers", name, "no answer in time", hint)
    except httpx.HTTPError as exc:
        hint = "start it (`fleetchat up`) or correct FLEETCHAT_WORKER_URLS"
        return fail("workers", name, f"unreachable: {type(exc).__name__}", hint)
    except ValueError:
        return fail("workers", name, "/v1/models is not an OpenAI model list", "point the URL at the worker itself")
    if replica.model not in served:
        hint = f"`fleetchat worker --pool {replica.model}` locally, vLLM `--served-model-name {replica.model}` deployed"
        return fail("workers", name, f"serves {served or 'nothing'}, not {replica.model}", hint)
    return ok("workers", name, f"healthy, serves {replica.model}")


async def check_workers(settings: Settings, timeout_s: float) -> list[CheckResult]:
    """All replicas at once; each request bounded by `timeout_s` (connect, read, and the whole check)."""
    found = replicas(settings)
    presenting = presenting_stack_key(settings)
    auth = FleetWorkerAuth(presenting.own_worker_urls(), presenting.worker.credential_headers())
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), follow_redirects=True, auth=auth) as client:

        async def bounded(replica: Replica) -> CheckResult:
            try:
                return await asyncio.wait_for(check_replica(client, replica), timeout=2 * timeout_s)
            except TimeoutError:
                return fail("workers", f"{replica.pool} {replica.url}", "no answer in time", "raise --timeout")

        return list(await asyncio.gather(*(bounded(replica) for replica in found)))
