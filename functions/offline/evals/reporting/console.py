"""Terminal output of the eval commands: rich progress per suite, the gate, the history and a comparison."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from functions.offline.evals.reporting.history import Baselines
from functions.offline.evals.reporting.report import compare_rows, fmt
from functions.offline.evals.results import EvalRun, HistoryEntry


class RichProgress:
    """The suites' Progress protocol on a rich progress display: one bar per suite."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self._tasks: dict[str, TaskID] = {}
        # Not a terminal (a CI log, the nightly job): rich draws nothing until the end, so say when a suite starts.
        self._plain = not console.is_terminal
        self._console = console

    def __enter__(self) -> RichProgress:
        self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()

    def start(self, suite: str, total: int) -> None:
        if self._plain:
            self._console.print(f"{suite}: {total} steps", highlight=False)
        if suite in self._tasks:
            self._progress.reset(self._tasks[suite], total=total)
        else:
            self._tasks[suite] = self._progress.add_task(suite, total=total)

    def advance(self, suite: str, step: int = 1) -> None:
        if suite not in self._tasks:
            self._tasks[suite] = self._progress.add_task(suite, total=None)
        self._progress.advance(self._tasks[suite], step)


def print_gate(console: Console, run: EvalRun) -> None:
    table = Table("suite", "metric", "value", "threshold", "tolerance", title=f"eval run {run.run_id}")
    for suite in run.suites:
        if suite.error:
            table.add_row(suite.suite, "[red]error[/]", suite.error[:80], "", "")
        for metric in suite.metrics:
            style = "red" if metric.breaks_threshold() else ""
            table.add_row(
                suite.suite,
                metric.name,
                f"[{style}]{fmt(metric.value)}[/]" if style else fmt(metric.value),
                fmt(metric.threshold),
                fmt(metric.tolerance),
            )
    console.print(table)
    if run.gate is None:
        return
    baseline = run.gate.baseline_run_id or "none for these model versions"
    console.print(f"baseline: {baseline} ({run.gate.compared} metrics compared)")
    for finding in run.gate.findings:
        console.print(f"[red]FAIL[/] [{finding.kind}] {finding.message}")
    console.print("[green]PASSED[/]" if run.gate.passed else "[red]FAILED[/]")


def print_history(console: Console, entries: list[HistoryEntry], baselines: Baselines) -> None:
    accepted = set(baselines.by_version.values())
    table = Table("run", "started", "passed", "suites", "errors", "baseline", "model versions")
    for entry in reversed(entries):
        table.add_row(
            entry.run_id,
            entry.started_at.strftime("%Y-%m-%d %H:%M"),
            {True: "[green]yes[/]", False: "[red]no[/]", None: "?"}[entry.passed],
            ",".join(entry.suites),
            ",".join(entry.errors),
            "*" if entry.run_id in accepted else "",
            entry.version_key,
        )
    console.print(table)


def print_compare(console: Console, a: EvalRun, b: EvalRun) -> None:
    if a.version_key != b.version_key:
        console.print(f"model versions: A {a.version_key}\n                B {b.version_key}")
    table = Table("metric", f"A {a.run_id}", f"B {b.run_id}", "B − A", "verdict")
    colors = {"regressed": "red", "worse": "yellow", "better": "green"}
    for row in compare_rows(a, b):
        color = colors.get(row.verdict)
        table.add_row(
            row.name, fmt(row.a), fmt(row.b), fmt(row.delta), f"[{color}]{row.verdict}[/]" if color else row.verdict
        )
    console.print(table)
