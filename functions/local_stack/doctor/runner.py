"""Runs every check group concurrently, each bounded in time, and renders the report (lines or JSON)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from functools import partial

from functions.local_stack.doctor.aws_checks import check_bucket, check_key, check_table, guarded, table_specs
from functions.local_stack.doctor.config_checks import check_config, load_settings
from functions.local_stack.doctor.control_state_checks import check_control_state
from functions.local_stack.doctor.local_checks import check_data_dir, check_sqlite, check_web_build
from functions.local_stack.doctor.results import GROUPS, CheckResult, DoctorReport, Group, Status, bounded
from functions.local_stack.doctor.sandbox_checks import check_sandbox
from functions.local_stack.doctor.stripe_checks import check_api, check_mode
from functions.local_stack.doctor.worker_checks import check_workers
from shared.settings import Settings

DEFAULT_TIMEOUT_S = 5.0
# A table check makes three calls, each under the timeout; a local check touches only the disk.
CALLS_PER_TABLE = 3


async def diagnose(
    make_settings: Callable[[], Settings], *, timeout_s: float = DEFAULT_TIMEOUT_S, skip: Collection[Group] = ()
) -> DoctorReport:
    """Every check of the groups not skipped. Settings that do not validate end the run: nothing else can be read."""
    settings, results = load_settings(make_settings)
    if settings is None:
        return DoctorReport(results=results)
    if "config" not in skip:
        results += check_config(settings)
    pending: list[Awaitable[list[CheckResult]]] = []
    if "stores" not in skip:
        pending += _store_checks(settings, timeout_s)
    if "stripe" not in skip:
        results += check_mode(settings)
        pending.append(bounded("stripe", "API", partial(check_api, settings, timeout_s), 2 * timeout_s))
    if "sandbox" not in skip:
        pending.append(bounded("sandbox", "runner", partial(check_sandbox, settings), 4 * timeout_s))
    if "web" not in skip:
        pending.append(bounded("web", "web build", partial(check_web_build, settings), timeout_s))
    if "workers" not in skip:
        pending.append(check_workers(settings, timeout_s))
    for found in await asyncio.gather(*pending):
        results += found
    # Stable order for people and diffs: by group, then as each group reported.
    return DoctorReport(results=sorted(results, key=lambda r: GROUPS.index(r.group)))


def _store_checks(settings: Settings, timeout_s: float) -> list[Awaitable[list[CheckResult]]]:
    checks: list[Awaitable[list[CheckResult]]] = []
    if "sqlite" in (settings.conversation_store, settings.accounts_store):
        local = partial(lambda s: check_data_dir(s) + check_sqlite(s), settings)
        checks.append(bounded("stores", "sqlite", local, timeout_s))
    for spec in table_specs(settings):
        label = f"table {spec.name}"
        check = guarded(label, partial(check_table, settings, spec, timeout_s))
        checks.append(bounded("stores", label, check, CALLS_PER_TABLE * timeout_s + 1))
    if settings.conversation_store == "aws":
        label = f"bucket {settings.conversations_bucket}"
        check = guarded(label, partial(check_bucket, settings, timeout_s))
        checks.append(bounded("stores", label, check, CALLS_PER_TABLE * timeout_s + 1))
        label = f"KMS key {settings.conversations_kms_key_id}"
        checks.append(bounded("stores", label, guarded(label, partial(check_key, settings, timeout_s)), 2 * timeout_s))
    checks.append(bounded("stores", "control state", partial(check_control_state, settings, timeout_s), 2 * timeout_s))
    return checks


def render(report: DoctorReport) -> list[str]:
    counts = report.counts()
    summary = f"{counts[Status.OK]} ok, {counts[Status.WARN]} warning(s), {counts[Status.FAIL]} failure(s)"
    return [result.line() for result in report.results] + [summary]
