"""Choosing `SAFETY_GUARD_BAND`: where the embedded guard's deciding scores put its errors, on the validation split.

In band mode (`llama_guard.in_band`) the embedded guard decides a conversation whose deciding P(harmful) lies below
the band, or at or above its top and is blocked (and every deny-rule hit); the guard model judges the rest. No verdict
of a guard model is known here, so a band is judged by what it costs and by what it leaves: the share of conversations
sent to the guard model (a round trip each), and the embedded guard's errors outside the band, which no guard model
can mend (what would be left with a guard model right on everything it reads: the oracle's residual).

`fleetchat safety band` picks, for each share of traffic, the band that leaves the fewest errors on the validation
split (ties: the smaller share); `--held-out` then reads the held-out sources once (the embedded guard on each
conversation once) and reports, for each of those bands, the best band mode could do there with such a guard model
(`--plot`: against the share of held-out traffic it reads). The held-out sources choose nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from functions.offline.safety_training.evaluation.cross_source import (
    CrossSourceReport,
    evaluate_cross_source,
    held_out_plan,
)
from functions.offline.safety_training.labelled_data import DataMessage, LabelledConversation
from functions.offline.safety_training.sources.public_source_model import Measures
from functions.safety.findings import SafetyFinding
from functions.safety.guards.llama_guard import in_band
from functions.safety.prefilter import Assessment, PreFilter
from shared.storage.safety_audit import SafetyDetector, SafetyLayer
from shared.wire.schemas import ChatMessage

SHARES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
GRID_QUANTILES = 101  # band edges tried: these quantiles of the deciding scores, and 0 and above 1
EDGE_DECIMALS = 4  # band edges are rounded so before they are tried: the printed setting is the band measured


class Scored(BaseModel):
    """The embedded guard on labelled conversations: each one's deciding P(harmful) (None: a deny rule decided),
    whether it blocked, and whether it is harmful."""

    scores: list[float | None]
    blocked: list[bool]
    harmful: list[bool]

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scores = np.asarray([np.nan if s is None else s for s in self.scores], dtype=np.float64)
        return scores, np.asarray(self.blocked, dtype=bool), np.asarray(self.harmful, dtype=bool)


class BandChoice(BaseModel):
    band: tuple[float, float]
    max_share: float
    share: float  # of the conversations, sent to the guard model
    items: int
    errors: int  # the embedded guard's alone: harmful let through + benign blocked
    missed_outside: int  # harmful let through outside the band: no guard model reads them
    refused_outside: int  # benign blocked outside the band

    @property
    def errors_outside(self) -> int:
        return self.missed_outside + self.refused_outside


def band_mask(scores: np.ndarray, blocked: np.ndarray, band: tuple[float, float]) -> np.ndarray:
    """`llama_guard.in_band` on arrays (a NaN score: a deny rule decided)."""
    low, high = band
    scored = ~np.isnan(scores)
    with np.errstate(invalid="ignore"):
        return scored & (scores >= low) & ~((scores >= high) & blocked)


def score_items(prefilter: PreFilter, items: Sequence[LabelledConversation], progress: Progress | None) -> Scored:
    task = progress.add_task("embedded guard on the validation split", total=len(items)) if progress else None
    scores: list[float | None] = []
    blocked: list[bool] = []
    for item in items:
        assessment = prefilter.assess([ChatMessage(role=m.role, content=m.content) for m in item.messages])
        scores.append(assessment.verdict.score if assessment.verdict is not None else None)
        blocked.append(assessment.finding is not None)
        if progress is not None and task is not None:
            progress.advance(task)
    return Scored(scores=scores, blocked=blocked, harmful=[item.label != "benign" for item in items])


def choose_bands(scored: Scored, shares: Sequence[float] = SHARES) -> list[BandChoice]:
    """For each share, the band sending at most that share of `scored` to the guard model that leaves the fewest of
    the embedded guard's errors outside it (ties: the smaller share, then the lower band)."""
    scores, blocked, harmful = scored.arrays()
    wrong = blocked != harmful
    finite = scores[~np.isnan(scores)]
    quantiles = np.quantile(finite, np.linspace(0, 1, GRID_QUANTILES))
    edges = np.unique(np.round(np.concatenate([[0.0, 1.0001], quantiles]), EDGE_DECIMALS))
    candidates = []  # (errors outside, share, low, high, missed outside, refused outside)
    for i, low in enumerate(edges):
        for high in edges[i:]:
            inside = band_mask(scores, blocked, (float(low), float(high)))
            outside = wrong & ~inside
            missed, refused = int((outside & harmful).sum()), int((outside & ~harmful).sum())
            candidates.append((missed + refused, float(inside.mean()), float(low), float(high), missed, refused))
    candidates.sort()
    choices = []
    for share in shares:
        _, used, low, high, missed, refused = next(c for c in candidates if c[1] <= share)
        choices.append(
            BandChoice(
                band=(low, high),
                max_share=share,
                share=used,
                items=len(scores),
                errors=int(wrong.sum()),
                missed_outside=missed,
                refused_outside=refused,
            )
        )
    return choices


class HeldOutBound(BaseModel):
    """Band mode on the held-out sources with a guard model right on every conversation it reads."""

    choice: BandChoice
    sent: float  # share of the held-out conversations the guard model reads
    report: CrossSourceReport

    def rate(self, measures: Measures) -> float:
        return next(m.rate for m in self.report.measures if m.measures is measures)


def oracle_judge(
    assess: Callable[[Sequence[ChatMessage]], Assessment],
    band: tuple[float, float],
    harmful_of: Callable[[Sequence[ChatMessage]], bool],
) -> tuple[Callable[[Sequence[ChatMessage]], SafetyFinding | None], list[bool]]:
    """A judge that is band mode with a guard model right on everything it reads (it blocks what `harmful_of` says is
    harmful), and the list it appends each conversation's in-band flag to."""
    sent: list[bool] = []

    def judge(messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        assessment = assess(messages)
        inside = in_band(assessment, band)
        sent.append(inside)
        if not inside:
            return assessment.finding
        if not harmful_of(messages):
            return None
        return SafetyFinding(
            layer=SafetyLayer.PRE, detector=SafetyDetector.GUARD_MODEL, category="unspecified", score=1.0
        )

    return judge, sent


def held_out_bounds(
    prefilter: PreFilter, choices: Sequence[BandChoice], progress: Progress | None = None
) -> list[HeldOutBound]:
    """The held-out evaluation of band mode at each choice's band, with a guard model right on every conversation in
    it. The embedded guard reads each held-out conversation once; the bands differ only in what it hands on."""
    read = held_out_plan()
    plan, buried = read
    labels = {_key(example.messages): harmful for _, _, harmful, examples in plan for example in examples}
    labels |= {_key(example.messages): True for example in buried}
    assessed: dict[tuple[tuple[str, str], ...], Assessment] = {}

    def assess(messages: Sequence[ChatMessage]) -> Assessment:
        key = _key(messages)
        if key not in assessed:
            assessed[key] = prefilter.assess(messages)
        return assessed[key]

    bounds = []
    for choice in choices:
        judge, sent = oracle_judge(assess, choice.band, lambda messages: labels[_key(messages)])
        report = evaluate_cross_source(judge, progress=progress if not assessed else None, read=read)
        bounds.append(HeldOutBound(choice=choice, sent=sum(sent) / max(len(sent), 1), report=report))
    return bounds


def _key(messages: Sequence[ChatMessage] | Sequence[DataMessage]) -> tuple[tuple[str, str], ...]:
    return tuple((m.role, m.content) for m in messages)


def bounds_plot(bounds: Sequence[HeldOutBound], path: Path) -> None:
    """What band mode could reach on the held-out sources against the share of them the guard model reads: harmful
    short asks blocked, ordinary requests blocked and F1, each with its target (a PNG at `path`)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.5), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    shares = [100 * bound.sent for bound in bounds]
    lines = (
        ("harmful short asks blocked", [100 * b.rate(Measures.HARMFUL_SHORT) for b in bounds], 95.0, "#c0392b"),
        ("ordinary requests blocked", [100 * b.rate(Measures.ORDINARY) for b in bounds], 3.0, "#2e86c1"),
        ("F1 x 100", [100 * b.report.f1 for b in bounds], 75.0, "#27ae60"),
    )
    for label, values, target, color in lines:
        axes.plot(shares, values, "o-", color=color, label=label)
        axes.axhline(target, color=color, linestyle="--", linewidth=1, alpha=0.7)
    for bound, share in zip(bounds, shares, strict=True):
        axes.annotate(
            f"[{bound.choice.band[0]:.3f}, {bound.choice.band[1]:.3f}]",
            (share, 30),
            rotation=90,
            fontsize=7,
            ha="center",
        )
    axes.set_xlabel("held-out conversations read by the guard model (%)")
    axes.set_ylabel("%  (dashed: the target)")
    axes.set_title("band mode with a guard model never wrong on what it reads: an upper bound", fontsize=10)
    axes.grid(alpha=0.3)
    figure.legend(loc="outside lower center", ncols=3, fontsize=8)
    figure.savefig(path, format="png")


def render_bands(choices: list[BandChoice], chosen: float, console: Console) -> None:
    first = choices[0]
    table = Table(
        title=f"guard band on the validation split ({first.items} conversations; the embedded guard alone: "
        f"{first.errors} wrong)"
    )
    columns = ("at most", "band", "sent to the guard model", "left outside: harmful let through", "benign blocked")
    for column in columns:
        table.add_column(column, justify="right")
    for choice in choices:
        mark = " *" if choice.max_share == chosen else ""
        table.add_row(
            f"{100 * choice.max_share:.0f} %{mark}",
            f"[{choice.band[0]:.4f}, {choice.band[1]:.4f}]",
            f"{100 * choice.share:.1f} %",
            str(choice.missed_outside),
            str(choice.refused_outside),
        )
    console.print(table)


def render_bounds(bounds: Sequence[HeldOutBound], console: Console) -> None:
    table = Table(
        title="held-out sources, band mode with a guard model right on all it reads (an upper bound, not a measurement)"
    )
    columns = ("band", "read by the guard model", "harmful short asks", "ordinary", "OKTest", "long benign", "F1")
    for column in columns:
        table.add_column(column, justify="right")
    for bound in bounds:
        table.add_row(
            f"[{bound.choice.band[0]:.4f}, {bound.choice.band[1]:.4f}]",
            f"{100 * bound.sent:.1f} %",
            f"{100 * bound.rate(Measures.HARMFUL_SHORT):.1f} %",
            f"{100 * bound.rate(Measures.ORDINARY):.1f} %",
            f"{100 * bound.rate(Measures.TRICKY_SAFE):.1f} %",
            f"{100 * bound.rate(Measures.LONG_BENIGN):.1f} %",
            f"{bound.report.f1:.3f}",
        )
    console.print(table)
