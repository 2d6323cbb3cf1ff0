"""`GET /health` (liveness), `GET /healthz` (readiness: each pool's replicas) and `GET /metrics` (Prometheus).

The names are the field's: vLLM and load generators such as guidellm probe `/health`; a gateway that is up but has no
healthy replica for a pool is live (do not restart it) and not ready (do not send it traffic)."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from functions.api.deps import HttpClientDep, MetricsDep, WorkerUrlsDep

router = APIRouter(tags=["health"])


class ReplicaHealth(BaseModel):
    pool: str
    replica: int
    healthy: bool


class GatewayHealth(BaseModel):
    status: str
    replicas: list[ReplicaHealth]


async def _probe(client: httpx.AsyncClient, url: str) -> bool:
    try:
        response = await client.get(f"{url}/health", timeout=2.0)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


class Liveness(BaseModel):
    status: str = "ok"


@router.get("/health")
async def health() -> Liveness:
    """200 while the gateway process serves requests; it asks nothing of the workers or the stores."""
    return Liveness()


@router.get(
    "/healthz",
    response_model=GatewayHealth,
    responses={503: {"model": GatewayHealth, "description": "A pool has no healthy replica (status `degraded`)."}},
)
async def healthz(urls: WorkerUrlsDep, client: HttpClientDep) -> JSONResponse:
    """200 when every pool has at least one healthy replica, 503 otherwise (worker URLs are not disclosed)."""
    flat = [(pool, i, url) for pool, replicas in urls.items() for i, url in enumerate(replicas)]
    results = await asyncio.gather(*(_probe(client, url) for _, _, url in flat))
    replicas = [ReplicaHealth(pool=p, replica=i, healthy=ok) for (p, i, _), ok in zip(flat, results, strict=True)]
    ok = all(any(r.healthy for r in replicas if r.pool == pool) for pool in urls)
    body = GatewayHealth(status="ok" if ok else "degraded", replicas=replicas)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"description": "Prometheus text exposition.", "content": {"text/plain": {}}}},
)
async def metrics(gateway_metrics: MetricsDep) -> Response:
    return Response(gateway_metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
