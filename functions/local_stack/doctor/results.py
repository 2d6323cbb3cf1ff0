"""The doctor's result models, the bound every check runs under, and the one-line rendering of a result."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field, computed_field

Group = Literal["config", "stores", "stripe", "workers", "sandbox", "web"]
GROUPS: tuple[Group, ...] = ("config", "stores", "stripe", "workers", "sandbox", "web")


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"  # works, but not as it should be deployed (exit code stays 0)
    FAIL = "fail"  # will break requests or lose data: the exit code is 1


SYMBOLS = {Status.OK: "✓", Status.WARN: "!", Status.FAIL: "✗"}


class CheckResult(BaseModel):
    group: Group
    name: str  # what was checked, e.g. "table fleetchat-accounts"
    status: Status
    detail: str  # what was found
    hint: str | None = None  # how to fix it (set on every warning and failure)

    def line(self) -> str:
        text = f"{SYMBOLS[self.status]} {self.group}: {self.name}: {self.detail}"
        return text if self.hint is None else f"{text} — fix: {self.hint}"


def ok(group: Group, name: str, detail: str) -> CheckResult:
    return CheckResult(group=group, name=name, status=Status.OK, detail=detail)


def warn(group: Group, name: str, detail: str, hint: str) -> CheckResult:
    return CheckResult(group=group, name=name, status=Status.WARN, detail=detail, hint=hint)


def fail(group: Group, name: str, detail: str, hint: str) -> CheckResult:
    return CheckResult(group=group, name=name, status=Status.FAIL, detail=detail, hint=hint)


class DoctorReport(BaseModel):
    results: list[CheckResult] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def failed(self) -> bool:
        return any(r.status is Status.FAIL for r in self.results)

    def counts(self) -> dict[Status, int]:
        return {status: sum(r.status is status for r in self.results) for status in Status}


async def bounded(
    group: Group, name: str, check: Callable[[], list[CheckResult]], timeout_s: float
) -> list[CheckResult]:
    """Run a blocking check in a thread, giving up after `timeout_s`; an exception is a failure, never a crash.

    A thread cannot be cancelled: one that overruns is left to finish (its clients carry their own timeouts too)."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(check), timeout=timeout_s)
    except TimeoutError:
        return [fail(group, name, f"no answer within {timeout_s:g} s", "check the network path, or raise --timeout")]
    except Exception as exc:  # a check that crashes reports it and lets the others run
        return [fail(group, name, f"{type(exc).__name__}: {str(exc)[:300]}", "the check itself broke: see the error")]
