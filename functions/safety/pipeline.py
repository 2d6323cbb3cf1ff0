"""The safety pipeline as the chat route uses it: screen a conversation before routing (with the configured guard,
`guard.py`), hand out a stream guard per answer, and turn every block or halt into an audit record (PII-redacted,
per-tier retention) and a metric."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from anyio import to_thread

from functions.accounts.auth import Caller
from functions.metrics.gateway import GatewayMetrics
from functions.safety.care import CareDecision, care_for
from functions.safety.categories import Category
from functions.safety.classifier.output_classifier import OutputClassifier
from functions.safety.findings import SafetyFinding
from functions.safety.guard import Guard
from functions.safety.pii import PiiDetector
from functions.safety.rules import RULES_VERSION
from functions.safety.stream_guard import StreamGuard
from functions.spooled_writer import SafetyAuditWriter
from shared.errors import ContentPolicyViolationError
from shared.fleet.tables import safety_for
from shared.storage.safety_audit import SafetyAction, SafetyAuditRecord, SafetyDetector, SafetyLayer
from shared.storage.timestamps import utc_now
from shared.wire.schemas import ChatCompletionRequest

log = logging.getLogger("fleetchat.safety")

AUDIT_EXCERPT_CHARS = 2000
REFUSAL = "This request was blocked by the content policy ({category})."
SELF_HARM_HELP = (
    " If you are thinking about harming yourself, please reach out to someone you trust or a crisis line"
    " (in the US call or text 988; elsewhere see findahelpline.com)."
)


class SafetyPipeline:
    def __init__(
        self,
        pre_guard: Guard,
        pii: PiiDetector,
        audit: SafetyAuditWriter,
        metrics: GatewayMetrics,
        output: OutputClassifier | None = None,
    ) -> None:
        self.pre_guard = pre_guard
        self.pii = pii
        self.audit = audit
        self.metrics = metrics
        self.output = output  # the learned output check every stream guard uses (None: rules and PII only)

    @property
    def policy_version(self) -> str:
        """The pre-filter's policy: what a block is audited under."""
        return self.pre_guard.policy_version

    @property
    def post_policy_version(self) -> str:
        """The post-filter's policy (output rules, and the output check where one is trained): what a halt is
        audited under."""
        output = f"+out-{self.output.meta.version}" if self.output is not None else ""
        return f"{RULES_VERSION}{output}"

    async def screen(
        self, caller: Caller, request: ChatCompletionRequest, request_id: str, model: str, *, care: bool = False
    ) -> CareDecision | None:
        """Raise 400 content_policy_violation (after auditing it) if the conversation must not reach a model, or 503
        when a remote guard cannot judge it and the fail policy is closed. With `care` (a chat that can answer with
        the supportive reply), a self-harm ask that asks for no method is not refused: the decision to answer it so
        is returned, audited as `cared`."""
        start = time.perf_counter()
        finding = await self.pre_guard.check(request.messages)
        self.metrics.safety_latency.labels(SafetyLayer.PRE.value).observe(time.perf_counter() - start)
        if care and (decision := care_for(finding, request.messages)) is not None:
            cared = finding or SafetyFinding(
                layer=SafetyLayer.PRE, detector=SafetyDetector.RULES, category=Category.SELF_HARM.value, score=1.0,
                rule="self-harm-disclosure", excerpt=request.messages[-1].text() if request.messages else "",
            )  # fmt: skip
            await self.record(cared, SafetyAction.CARED, caller, request_id, model)
            return decision
        if finding is None:
            return None
        self.metrics.safety_blocks.labels(finding.layer.value, finding.detector.value, finding.category).inc()
        await self.record(finding, SafetyAction.BLOCKED, caller, request_id, model)
        message = REFUSAL.format(category=finding.category)
        if finding.category.startswith("self-harm"):
            message += SELF_HARM_HELP
        raise ContentPolicyViolationError(message, param="messages")

    def guard(self, caller: Caller) -> StreamGuard:
        policy = safety_for(caller.tenant.tier, caller.tenant.safety)
        return StreamGuard(self.pii if policy.block_outbound_pii else None, self.output)

    async def halted(self, finding: SafetyFinding, caller: Caller, request_id: str, model: str) -> None:
        self.metrics.safety_halts.labels(finding.layer.value, finding.detector.value, finding.category).inc()
        await self.record(finding, SafetyAction.HALTED, caller, request_id, model)

    async def record(
        self, finding: SafetyFinding, action: SafetyAction, caller: Caller, request_id: str, model: str
    ) -> None:
        tenant = caller.tenant
        policy = safety_for(tenant.tier, tenant.safety)
        now = utc_now()
        content = self.pii.redact(finding.excerpt[-AUDIT_EXCERPT_CHARS:]) if policy.audit_raw_content else None
        record = SafetyAuditRecord(
            request_id=request_id,
            tenant_id=tenant.id,
            key_id=caller.key.id,
            at=now,
            layer=finding.layer,
            detector=finding.detector,
            category=finding.category,
            score=round(finding.score, 4),
            policy_version=finding.policy_version
            or (self.policy_version if finding.layer is SafetyLayer.PRE else self.post_policy_version),
            action=action,
            model=model,
            content=content,
            expires_at=now + timedelta(days=policy.audit_retention_days),
        )
        log.info(
            "safety %s: request %s of %s, %s/%s %s (%.3f)",
            action.value,
            request_id,
            tenant.id,
            finding.layer.value,
            finding.detector.value,
            finding.category,
            finding.score,
        )
        if not await to_thread.run_sync(self.audit.record, record):
            self.metrics.safety_audit_failures.inc()
