"""Run one server-side tool call for a tenant: its breaker, its quota, the run under its timeout, the metrics and
the audit record. Every call ends as a result the model can read (a refusal or a failure included) and one audit
record, whatever happened.

Order: the breaker first (an open breaker costs no quota), then the quota (a charge in the shared rate-limit store,
so every gateway replica enforces one limit), then the run. A run that finds no sandbox place (functions/sandbox/
slots.py) is audited as `busy` and ends the request with its 429.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from anyio import CancelScope, to_thread
from pydantic import ValidationError

from functions.chat.server_tools.context import RunContext
from functions.chat.server_tools.metrics import ServerToolMetrics
from functions.chat.server_tools.tools import ServerTool, ToolOutcome
from functions.control.replica_breakers import ReplicaBreaker
from functions.sandbox.slots import SandboxBusyError
from functions.spooled_writer import SpooledWriter
from shared.server_tool_settings import ServerToolSettings
from shared.storage.conversations import StoreUnavailableError
from shared.storage.limits import RateLimitStore, WindowCharge
from shared.storage.timestamps import utc_now
from shared.storage.tool_audit import ToolRunRecord, ToolRunStatus

log = logging.getLogger("fleetchat.server_tools")


@dataclass(frozen=True)
class ToolRun:
    """One call's result: the `role: "tool"` message content, and what the client may see of it
    (functions/chat/server_tools/display.py)."""

    call_id: str
    tool: str
    status: ToolRunStatus
    content: str
    duration_ms: int
    files: tuple[dict[str, Any], ...] = ()  # the files it offered and the gateway kept (their ids, for download)
    arguments: str = ""  # as the model wrote them
    result: dict[str, Any] = field(default_factory=dict)  # what the tool returned, less its status and files


class ToolRunner:
    def __init__(
        self,
        settings: ServerToolSettings,
        tools: Mapping[str, ServerTool],
        limits: RateLimitStore,
        audit: SpooledWriter[ToolRunRecord],
        metrics: ServerToolMetrics,
        redact: Callable[[str], str] = lambda text: text,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.tools = tools
        self.limits = limits
        self.audit = audit
        self.metrics = metrics
        self.redact = redact
        self.breakers = {
            name: ReplicaBreaker(settings.breaker_failure_threshold, settings.breaker_cooldown_s, clock)
            for name in tools
        }

    async def run(self, call_id: str, name: str, arguments_text: str, context: RunContext) -> ToolRun:
        started_at, started = utc_now(), time.perf_counter()
        try:
            outcome, ran = await self._outcome(name, arguments_text, context)
        except SandboxBusyError as exc:  # no place to run it: audited, then the request's 429
            busy = _refused(ToolRunStatus.BUSY, exc.message)
            await self._finish(call_id, name, busy, arguments_text, context, started_at, started, ran=False)
            raise
        except BaseException:  # cancelled (the client left; the sandbox is killed): the call is still audited
            with CancelScope(shield=True):
                cancelled = _refused(ToolRunStatus.ERROR, "cancelled: the request ended")
                await self._finish(call_id, name, cancelled, arguments_text, context, started_at, started, ran=True)
            raise
        return await self._finish(call_id, name, outcome, arguments_text, context, started_at, started, ran=ran)

    async def _outcome(self, name: str, arguments_text: str, context: RunContext) -> tuple[ToolOutcome, bool]:
        """The call's outcome, and whether the tool ran (a refusal does not)."""
        breaker = self.breakers[name]
        if not breaker.admit():
            retry = max(0.0, (breaker.opened_at or 0.0) + breaker.cooldown_s - breaker.clock())
            message = f"the {name} tool kept failing and is paused; retry in {retry:.0f} s"
            return _refused(ToolRunStatus.BREAKER_OPEN, message), False
        try:
            charged = await self._charge(name, context.tenant_id)
            if not charged:
                breaker.released()
                quota = self.settings.quotas[name]
                message = (f"quota exhausted: {quota.runs} {name} runs per {quota.window_s} s for this tenant; try "
                           "again later or answer without the tool")  # fmt: skip
                return _refused(ToolRunStatus.QUOTA, message), False
            outcome = await self._run(self.tools[name], arguments_text, context)
        except SandboxBusyError:
            breaker.released()  # busy is no verdict on the tool
            raise
        except Exception:  # a bug or an OS failure around the tool: the tool's failure, told plainly
            log.exception("the %s tool failed", name)
            outcome = ToolOutcome(status=ToolRunStatus.ERROR, result={"error": "the tool failed"}, tool_failed=True)
        except BaseException:
            breaker.released()  # no verdict on the tool: free the half-open probe
            raise
        if outcome.tool_failed:
            breaker.failed()
        else:
            breaker.succeeded()
        return outcome, True

    async def _finish(
        self,
        call_id: str,
        name: str,
        outcome: ToolOutcome,
        arguments_text: str,
        context: RunContext,
        started_at: datetime,
        started: float,
        *,
        ran: bool,
    ) -> ToolRun:
        """Count, time and audit the call; what the model gets."""
        seconds = time.perf_counter() - started
        self.metrics.runs.labels(name, outcome.status.value).inc()
        if ran:
            self.metrics.seconds.labels(name).observe(seconds)
        content = json.dumps({"status": outcome.status.value, **outcome.result}, ensure_ascii=False)
        files = tuple(outcome.result.get("files") or ())
        result = {key: value for key, value in outcome.result.items() if key != "files"}
        run = ToolRun(call_id, name, outcome.status, content, round(seconds * 1000), files, arguments_text, result)
        await self._audit(run, outcome, arguments_text, started_at, context)
        return run

    async def _run(self, tool: ServerTool, arguments_text: str, context: RunContext) -> ToolOutcome:
        try:
            arguments = tool.arguments.model_validate_json(arguments_text or "{}")
        except ValidationError as exc:  # the model's mistake: told precisely, so the next round can fix it
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            return ToolOutcome(status=ToolRunStatus.ERROR, result={"error": f"invalid arguments: {problems}"})
        return await tool.run(arguments, context)

    async def _charge(self, name: str, tenant_id: str) -> bool:
        quota = self.settings.quotas.get(name)
        if quota is None:
            return True
        window = int(time.time()) // quota.window_s * quota.window_s
        charge = WindowCharge(scope=f"tool:{name}:tenant:{tenant_id}", window_start=window, window_s=quota.window_s,
                              requests=1, tokens=0, max_requests=quota.runs, max_tokens=0)  # fmt: skip
        try:
            outcome = await to_thread.run_sync(self.limits.charge, [charge])
        except StoreUnavailableError:
            # As admission does: a store that cannot answer now does not stop the service (the breaker and the
            # per-run limits still hold).
            log.warning("tool quota store unavailable: a %s run was not counted", name)
            return True
        return outcome.admitted

    async def _audit(
        self, run: ToolRun, outcome: ToolOutcome, arguments_text: str, at: datetime, context: RunContext
    ) -> None:
        limit = self.settings.audit_content_chars
        keep = context.audit_content and limit > 0
        record = ToolRunRecord(
            run_id=ToolRunRecord.new_id(),
            request_id=context.request_id,
            tenant_id=context.tenant_id,
            key_id=context.key_id,
            at=at,
            tool=run.tool,
            status=run.status,
            duration_ms=run.duration_ms,
            exit_code=outcome.exit_code,
            limits_hit=outcome.limits_hit,
            input=self.redact(arguments_text[:limit]) if keep else None,
            output=self.redact(run.content[:limit]) if keep else None,
        )
        try:  # durable, or spooled to the local file and replayed later (functions/spooled_writer.py)
            await to_thread.run_sync(self.audit.record, record)
        except Exception:  # never lose the answer over the audit: logged loudly
            log.exception("a %s run's audit record could not be written", run.tool)


def _refused(status: ToolRunStatus, message: str) -> ToolOutcome:
    return ToolOutcome(status=status, result={"error": message})
