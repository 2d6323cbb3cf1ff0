"""Choosing `SAFETY_GUARD_BAND`: where the embedded guard's deciding scores put its errors, on the validation split.

In band mode (`llama_guard.in_band`) the embedded guard decides a conversation whose deciding P(harmful) lies below
the band, or at or above its top and is blocked (and every deny-rule hit); the guard model judges the rest. No verdict
of a guard model is known here, so a band is judged by what it costs and by what it leaves: the share of conversations
sent to the guard model (a round trip each), and the embedded guard's errors outside the band, which no guard model
can mend (what would be left with a guard model right on everything it reads: the oracle's residual).

`fleetchat safety band` picks, for each share of traffic, the band that leaves the fewest errors on the validation
split (ties: the smaller share); `--held-out` then reads the held-out sources once with the band chosen for
`--max-share` and reports the best band mode could do there with such a guard model. The held-out sources choose
nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from functions.safety.findings import SafetyFinding
from functions.safety.llama_guard import in_band
from functions.safety.prefilter import PreFilter
from functions.safety.training.cross_source import CrossSourceReport, evaluate_cross_source, held_out_plan
from functions.safety.training.labelled_data import LabelledConversation
from shared.schemas import ChatMessage
from shared.storage.safety_audit import SafetyDetector, SafetyLayer

SHARES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
GRID_QUANTILES = 101  # band edges tried: these quantiles of the deciding scores, and 0 and above 1


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
    edges = np.unique(np.concatenate([[0.0, 1.0 + 1e-9], np.quantile(finite, np.linspace(0, 1, GRID_QUANTILES))]))
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
                band=(round(low, 4), round(high, 4)),
                max_share=share,
                share=used,
                items=len(scores),
                errors=int(wrong.sum()),
                missed_outside=missed,
                refused_outside=refused,
            )
        )
    return choices


def oracle_judge(
    prefilter: PreFilter, band: tuple[float, float], harmful_of: Callable[[Sequence[ChatMessage]], bool]
) -> tuple[Callable[[Sequence[ChatMessage]], SafetyFinding | None], list[bool]]:
    """A judge that is band mode with a guard model right on everything it reads (it blocks what `harmful_of` says is
    harmful), and the list it appends each conversation's in-band flag to."""
    sent: list[bool] = []

    def judge(messages: Sequence[ChatMessage]) -> SafetyFinding | None:
        assessment = prefilter.assess(messages)
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


def oracle_held_out(
    prefilter: PreFilter, band: tuple[float, float], progress: Progress | None = None
) -> tuple[CrossSourceReport, float]:
    """The held-out evaluation of band mode with a guard model right on every conversation in `band`, and the share
    of held-out conversations it reads."""
    plan, buried = held_out_plan()
    labels = {_key(example.messages): harmful for _, _, harmful, examples in plan for example in examples}
    labels |= {_key(example.messages): True for example in buried}
    judge, sent = oracle_judge(prefilter, band, lambda messages: labels[_key(messages)])
    report = evaluate_cross_source(judge, progress=progress)
    return report, sum(sent) / max(len(sent), 1)


def _key(messages: Sequence[object]) -> tuple[tuple[str, str], ...]:
    return tuple((str(getattr(m, "role")), str(getattr(m, "content"))) for m in messages)  # noqa: B009


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
