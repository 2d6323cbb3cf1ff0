"""`/admin/v1/canaries`: each pool's canary version and its recent error rates, and the operator's reset of a canary
that was rolled back (admin key only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel

from functions.accounts.auth import current_admin
from functions.api.deps import CanariesDep
from functions.api.openapi_description import error_responses
from functions.control.canary import CanaryStatus

router = APIRouter(prefix="/admin/v1", tags=["admin"], dependencies=[Depends(current_admin)])

PoolName = Annotated[str, Path(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]


class CanaryList(BaseModel):
    data: list[CanaryStatus]


@router.get("/canaries")
async def list_canaries(canaries: CanariesDep) -> CanaryList:
    return CanaryList(data=canaries.statuses())


@router.post("/canaries/{pool}/reset", responses=error_responses(404))
async def reset_canary(pool: PoolName, canaries: CanariesDep) -> CanaryStatus:
    """Put a rolled-back canary back into service on every gateway replica (its error windows start afresh). 404: the
    pool has no canary."""
    return await canaries.reset(pool)
