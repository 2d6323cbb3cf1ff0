"""Whether the gateways can share their control state: the engine fits the deployment, and Redis answers."""

from __future__ import annotations

import asyncio
import time

from functions.local_stack.doctor.results import CheckResult, fail, ok, warn
from shared.settings import Settings
from shared.storage.factory import open_control_state

NAME = "control state"
_PROBE = "doctor-probe"


def check_control_state(settings: Settings, timeout_s: float) -> list[CheckResult]:
    """A blocking check (the doctor runs it in a thread): one write, read and delete on the configured engine."""
    config = settings.control_state
    if config.engine == "sqlite" and settings.environment == "deployed":
        return [
            warn(
                "stores",
                NAME,
                "SQLite: each gateway container keeps its own control.db, so resumes, Stop, brownout, breakers, "
                "canary rollbacks and the judge budget do not reach the other containers",
                "set FLEETCHAT_CONTROL_STATE_ENGINE=redis and FLEETCHAT_CONTROL_STATE_REDIS_URL (docs/operations.md)",
            )
        ]
    return asyncio.run(_round_trip(settings, timeout_s))


async def _round_trip(settings: Settings, timeout_s: float) -> list[CheckResult]:
    engine = settings.control_state.engine
    state = open_control_state(settings)
    try:
        started = time.perf_counter()
        async with asyncio.timeout(timeout_s):
            await state.put(_PROBE, "doctor", {"at": time.time()}, ttl_s=60)
            found = await state.records(_PROBE)
            await state.delete(_PROBE, "doctor")
        took_ms = (time.perf_counter() - started) * 1000
    except Exception as exc:
        where = "FLEETCHAT_CONTROL_STATE_REDIS_URL" if engine == "redis" else f"{settings.control_db_path}"
        return [fail("stores", NAME, f"{engine}: {type(exc).__name__}: {str(exc)[:200]}", f"check {where}")]
    finally:
        await state.aclose()
    if "doctor" not in found:
        return [fail("stores", NAME, f"{engine}: a record written was not read back", "check the engine's settings")]
    return [ok("stores", NAME, f"{engine}: write, read and delete in {took_ms:.1f} ms")]
