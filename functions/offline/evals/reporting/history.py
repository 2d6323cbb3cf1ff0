"""Runs, history and baselines in a reports store: `runs/RUN_ID.json`, `history.jsonl`, `baselines.json`."""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

from functions.offline.evals.reporting.store import ReportStore
from functions.offline.evals.results import EvalRun, HistoryEntry

HISTORY = "history.jsonl"
BASELINES = "baselines.json"


def run_name(run_id: str, ext: str = "json") -> str:
    return f"runs/{run_id}.{ext}"


class Baselines(BaseModel):
    """The accepted run per model-version key."""

    by_version: dict[str, str] = Field(default_factory=dict)


class RunNotFoundError(LookupError):
    pass


class RunBook:
    """Reads and writes runs, the history and baselines in one reports store."""

    def __init__(self, store: ReportStore) -> None:
        self.store = store

    def save_run(self, run: EvalRun) -> str:
        name = run_name(run.run_id)
        self.store.put(name, run.model_dump_json(indent=2).encode(), "application/json")
        return self.store.location(name)

    def append_history(self, run: EvalRun) -> None:
        self.store.append_line(HISTORY, HistoryEntry.of(run).model_dump_json())

    def history(self) -> list[HistoryEntry]:
        data = self.store.get(HISTORY)
        if not data:
            return []
        entries = []
        for line in data.decode().splitlines():
            if line.strip():
                entries.append(HistoryEntry.model_validate_json(line))
        return sorted(entries, key=lambda entry: (entry.started_at, entry.run_id))

    def resolve(self, run_id: str) -> str:
        """A run id, or `latest` (the newest run in the history)."""
        if run_id != "latest":
            return run_id
        entries = self.history()
        if not entries:
            raise RunNotFoundError("no runs in the history yet")
        return entries[-1].run_id

    def load_run(self, run_id: str) -> EvalRun:
        run_id = self.resolve(run_id)
        data = self.store.get(run_name(run_id))
        if data is None:
            raise RunNotFoundError(f"no run {run_id!r} in {self.store.location('runs/')}")
        return EvalRun.model_validate_json(data)

    def baselines(self) -> Baselines:
        data = self.store.get(BASELINES)
        return Baselines() if data is None else Baselines.model_validate_json(data)

    def baseline_for(self, version_key: str) -> EvalRun | None:
        run_id = self.baselines().by_version.get(version_key)
        if run_id is None:
            return None
        try:
            return self.load_run(run_id)
        except RunNotFoundError:
            return None

    def accept_baseline(self, run_id: str) -> EvalRun:
        """Make the run the baseline for its model versions (replacing the previous one of the same versions)."""
        run = self.load_run(run_id)
        baselines = self.baselines()
        baselines.by_version[run.version_key] = run.run_id
        self.store.put(BASELINES, json.dumps(baselines.model_dump(), indent=2).encode(), "application/json")
        return run
