"""Plots for eval reports, drawn with matplotlib (Agg) and returned as base64 PNG data URIs for inline embedding."""

from __future__ import annotations

import base64
import io
import math
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from functions.offline.evals.results import EvalRun, HistoryEntry

# At most this many metrics per trend figure (one small panel each); the rest are in the tables.
MAX_PANELS = 16


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    # A bare Figure (no pyplot): no global state, no display backend, safe in threads.
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def data_uri(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def suite_plot(run: EvalRun, suite: str, baseline: EvalRun | None) -> str | None:
    """This run's metrics of one suite as horizontal bars, the baseline and thresholds marked."""
    result = next((s for s in run.suites if s.suite == suite), None)
    if result is None or not result.metrics:
        return None
    metrics = result.metrics[:MAX_PANELS]
    base = {} if baseline is None else baseline.metrics()
    figure = _figure(8, 0.45 * len(metrics) + 1.2)
    axes = figure.add_subplot()
    names = [m.name.removeprefix(f"{suite}.") for m in metrics]
    rows = range(len(metrics))
    colors = ["#c0392b" if m.breaks_threshold() else "#2e86c1" for m in metrics]
    axes.barh(list(rows), [m.value for m in metrics], color=colors, height=0.6, label="this run")
    for row, metric in zip(rows, metrics, strict=True):
        if metric.name in base:
            axes.plot([base[metric.name].value], [row], "k|", markersize=16, markeredgewidth=2)
        if metric.threshold is not None:
            axes.plot([metric.threshold], [row], "rx", markersize=8)
    axes.set_yticks(list(rows), names, fontsize=8)
    axes.invert_yaxis()
    axes.set_title(f"{suite}: bars this run · | baseline · x threshold (red bar: threshold broken)", fontsize=9)
    axes.grid(axis="x", alpha=0.3)
    return data_uri(figure)


def trend_plot(history: list[HistoryEntry], suite: str) -> str | None:
    """Every run's value of each metric of `suite` over time (one panel per metric; marker colour: the run's gate)."""
    from matplotlib.ticker import MaxNLocator

    series: dict[str, list[tuple[int, float, bool | None]]] = defaultdict(list)
    for index, entry in enumerate(history):
        for name, value in entry.metrics.items():
            if name.startswith(f"{suite}."):
                series[name].append((index, value, entry.passed))
    if not series:
        return None
    names = sorted(series)[:MAX_PANELS]
    columns = min(4, len(names))
    rows = math.ceil(len(names) / columns)
    figure = _figure(max(6.0, 3.2 * columns), 2.2 * rows + 0.4)
    for panel, name in enumerate(names, start=1):
        axes = figure.add_subplot(rows, columns, panel)
        points = series[name]
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        axes.plot(xs, ys, color="#7f8c8d", linewidth=1)
        colors = ["#27ae60" if p[2] else "#c0392b" if p[2] is False else "#7f8c8d" for p in points]
        axes.scatter(xs, ys, c=colors, s=14, zorder=3)
        axes.set_title(name.removeprefix(f"{suite}."), fontsize=8)
        axes.tick_params(labelsize=7)
        axes.set_xlabel("run # (oldest first)", fontsize=7)
        axes.set_xlim(-0.5, max(len(history) - 1, 1) + 0.5)  # whole run numbers, even for one run
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.suptitle(f"{suite}: {len(history)} runs (green: run passed, red: failed)", fontsize=9)
    return data_uri(figure)


def compare_plot(a: EvalRun, b: EvalRun) -> str | None:
    """Relative change B vs A of every metric both runs have (negative: B worse, direction-aware)."""
    ma, mb = a.metrics(), b.metrics()
    names = sorted(set(ma) & set(mb))[: MAX_PANELS * 2]
    if not names:
        return None
    changes = []
    for name in names:
        worse = mb[name].worsening(ma[name].value)
        scale = abs(ma[name].value) or 1.0
        changes.append(-worse / scale)
    figure = _figure(8, 0.35 * len(names) + 1.2)
    axes = figure.add_subplot()
    axes.barh(range(len(names)), changes, color=["#27ae60" if c >= 0 else "#c0392b" for c in changes])
    axes.set_yticks(range(len(names)), names, fontsize=7)
    axes.invert_yaxis()
    axes.axvline(0, color="black", linewidth=0.8)
    axes.set_title(f"{b.run_id} vs {a.run_id}: relative change (right: better)", fontsize=9)
    axes.grid(axis="x", alpha=0.3)
    return data_uri(figure)
