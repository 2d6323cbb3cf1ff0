"""`GET /v1/usage`: the calling tenant's token usage from the ledger, per UTC day and model, with totals, and its cost
at the models' list prices where the operator set them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from anyio import to_thread
from fastapi import APIRouter, Query

from functions.accounts.auth import CurrentTenant
from functions.api.deps import LedgerDep
from shared.errors import InvalidRequestError
from shared.service_api.account_api import UsageDay, UsageReport, UsageTotals
from shared.storage.timestamps import utc_now

router = APIRouter(prefix="/v1", tags=["usage"])

MAX_RANGE = timedelta(days=400)
TIME_HELP = "A date (2026-11-01), an ISO 8601 time, or Unix seconds; UTC."


def parse_time(value: str, param: str) -> datetime:
    text = value.strip()
    try:
        if text.lstrip("-").isdigit():
            return datetime.fromtimestamp(int(text), UTC)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, OverflowError, OSError) as exc:
        raise InvalidRequestError(f"Invalid value for '{param}': {TIME_HELP}", param=param) from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@router.get("/usage")
async def usage(
    tenant: CurrentTenant,
    ledger: LedgerDep,
    start: Annotated[str | None, Query(description=TIME_HELP + " Default: the start of this month.")] = None,
    end: Annotated[str | None, Query(description=TIME_HELP + " Exclusive. Default: now.")] = None,
) -> UsageReport:
    now = utc_now()
    begin = parse_time(start, "start") if start else now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    finish = parse_time(end, "end") if end else now + timedelta(seconds=1)
    if finish <= begin:
        raise InvalidRequestError("'end' must be later than 'start'.", param="end")
    if finish - begin > MAX_RANGE:
        raise InvalidRequestError(f"The range may span at most {MAX_RANGE.days} days.", param="start")
    rows = await to_thread.run_sync(ledger.usage, tenant.id, begin, finish)
    days = [UsageDay.of(row) for row in rows]
    totals, by_model = UsageTotals(), {}
    for day in days:
        totals.add(day)
        by_model.setdefault(day.model, UsageTotals()).add(day)
    return UsageReport(
        tenant_id=tenant.id,
        start=int(begin.timestamp()),
        end=int(finish.timestamp()),
        data=days,
        totals=totals,
        by_model=by_model,
    )
