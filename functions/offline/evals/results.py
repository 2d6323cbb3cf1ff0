"""What an eval run records: the deployment's model versions, every suite's result, and the gate's verdict."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

from functions.offline.evals.suite import Metric, SuiteResult


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by time, unique: `20261124T221500Z-3f9a1c`."""
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    return f"{moment:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def version_key(model_versions: dict[str, str]) -> str:
    """One string for a set of pool versions; baselines are kept per key (`flagship=...;mini=...`)."""
    return ";".join(f"{pool}={version}" for pool, version in sorted(model_versions.items()))


class Finding(BaseModel):
    """One reason a run fails its gate."""

    kind: Literal["threshold", "regression", "suite_error"]
    suite: str
    metric: str | None = None
    value: float | None = None
    baseline: float | None = None
    limit: float | None = None  # the threshold, or the baseline worsened by its tolerance
    message: str


class Gate(BaseModel):
    passed: bool
    baseline_run_id: str | None = None  # None: no baseline for these model versions yet (only thresholds gated)
    findings: list[Finding] = Field(default_factory=list)
    compared: int = 0  # metrics compared with the baseline


class EvalRun(BaseModel):
    run_id: str
    started_at: datetime
    finished_at: datetime | None = None
    base_url: str
    local: bool
    model_versions: dict[str, str]  # pool -> model version, as the deployment reports it (GET /v1/models)
    suites: list[SuiteResult] = Field(default_factory=list)
    gate: Gate | None = None
    options: dict[str, object] = Field(default_factory=dict)  # e.g. limit, suites asked for

    @property
    def version_key(self) -> str:
        return version_key(self.model_versions)

    def metrics(self) -> dict[str, Metric]:
        return {metric.name: metric for suite in self.suites for metric in suite.metrics}


class HistoryEntry(BaseModel):
    """One line of history.jsonl: enough to draw the trend and list runs without opening every run."""

    run_id: str
    started_at: datetime
    version_key: str
    passed: bool | None
    suites: list[str]
    errors: list[str] = Field(default_factory=list)  # suites that errored
    metrics: dict[str, float]

    @classmethod
    def of(cls, run: EvalRun) -> HistoryEntry:
        return cls(
            run_id=run.run_id,
            started_at=run.started_at,
            version_key=run.version_key,
            passed=None if run.gate is None else run.gate.passed,
            suites=[suite.suite for suite in run.suites],
            errors=[suite.suite for suite in run.suites if suite.error],
            metrics={name: metric.value for name, metric in run.metrics().items()},
        )
