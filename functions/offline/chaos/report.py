"""The chaos run's report: chaos.json (everything), chaos.md (the verdicts, the faults, the books), timeline.png (each
request as a line from its start to its end, coloured by verdict, the faults shaded, and the tokens the clients got
per second)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel, Field

from functions.offline.chaos.aiperf_load import ClientRequest
from functions.offline.chaos.audit import RequestAudit
from functions.offline.chaos.faults import FaultEvent

COLOURS = {"whole": "#2e7d32", "recovered": "#f9a825", "not accepted": "#6d4c41", "lost": "#c62828"}
FAULT_COLOURS = ["#1565c0", "#6a1b9a", "#00838f", "#ef6c00"]


class ChaosResult(BaseModel):
    started_at: str
    config: dict[str, object]
    machine: dict[str, object]
    aiperf_exit: int
    load_s: float
    faults: list[FaultEvent]
    planned_faults: int = 0  # faults in the plan: one the load ended before was never tested
    fault_errors: list[str] = Field(default_factory=list)
    requests: list[ClientRequest]
    audits: list[RequestAudit]
    counters: dict[str, float] = Field(default_factory=dict)  # the gateways' own fault counters at the end
    notes: list[str] = Field(default_factory=list)

    def verdicts(self) -> Counter[str]:
        return Counter(a.verdict for a in self.audits)

    def in_flight(self, at_s: float) -> int:
        return sum(1 for r in self.requests if r.start_s <= at_s <= r.end_s)

    @property
    def passed(self) -> bool:
        counts = self.verdicts()
        every_fault = len(self.faults) >= self.planned_faults and not self.fault_errors
        return bool(self.audits) and counts["lost"] == 0 and counts["not accepted"] == 0 and every_fault


def plot_timeline(result: ChaosResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    verdict = {a.index: a.verdict for a in result.audits}
    fig, (lines, rate) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    for row, request in enumerate(sorted(result.requests, key=lambda r: r.start_s)):
        colour = COLOURS.get(verdict.get(request.index, "lost"), "#000000")
        lines.plot([request.start_s, request.end_s], [row, row], color=colour, linewidth=2.5, solid_capstyle="butt")
    for i, fault in enumerate(result.faults):
        colour = FAULT_COLOURS[i % len(FAULT_COLOURS)]
        width = max(fault.until_s - fault.at_s, 0.6)
        label = f"{fault.at_s:.0f} s: {fault.kind} ({fault.target})"
        lines.axvspan(fault.at_s, fault.at_s + width, color=colour, alpha=0.35, label=label)
        rate.axvspan(fault.at_s, fault.at_s + width, color=colour, alpha=0.35)
    for name, colour in COLOURS.items():
        lines.plot([], [], color=colour, linewidth=2.5, label=f"request: {name}")
    lines.legend(loc="upper left", fontsize=7, ncol=2, framealpha=0.9)
    lines.set_ylabel("request (by start)")
    lines.set_title("aiperf through the load balancer, under faults: each request from its start to its end")
    lines.set_ylim(-1, len(result.requests) * 1.45 + 2)  # room for the legend above the lines
    arrivals = sorted(t for r in result.requests for t in r.content_times_s)
    if arrivals:
        end = int(max(arrivals)) + 1
        per_second = Counter(int(t) for t in arrivals if t >= 0)
        rate.bar(range(end), [per_second.get(s, 0) for s in range(end)], width=1.0, color="#455a64")
    rate.set_ylabel("content chunks / s")
    rate.set_xlabel("seconds since the load started")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(result: ChaosResult, plot: Path | None) -> str:
    counts, cfg = result.verdicts(), result.config
    accepted = sum(1 for r in result.requests if r.accepted)
    out = [
        "# Chaos under load",
        "",
        f"Started {result.started_at}. aiperf (exit {result.aiperf_exit}) sent {len(result.requests)} streamed "
        f"requests at concurrency {cfg.get('concurrency')} (max_tokens {cfg.get('max_tokens')}) through "
        f"HAProxy to {cfg.get('gateways')} gateways over {cfg.get('replicas')} `{cfg.get('model')}` replicas; "
        f"the load lasted {result.load_s:.0f} s.",
        "",
        f"**{'PASS' if result.passed else 'FAIL'}**: {accepted} accepted, {counts['whole']} whole at the client, "
        f"{counts['recovered']} broken at the client and recovered whole by a resume, {counts['lost']} lost, "
        f"{counts['not accepted']} not accepted.",
        "",
        "## Faults",
        "",
        "| at s | until s | fault | target | streams in flight | what |",
        "|---|---|---|---|---|---|",
    ]
    for fault in result.faults:
        out.append(
            f"| {fault.at_s:.1f} | {fault.until_s:.1f} | {fault.kind} | {fault.target} | "
            f"{result.in_flight(fault.at_s)} | {fault.detail} |"
        )
    out += [f"- not injected: {error}" for error in result.fault_errors]
    if plot is not None:
        out += ["", f"![timeline]({plot.name})"]
    out += [
        "",
        "## Books, request by request",
        "",
        "Whole: the client got `[DONE]`, every event once and in order. Recovered: the client's connection broke "
        "(aiperf does not resume), and a resume after its last event returned exactly the rest. For both, the "
        "answer read back from the fleet equals the stored answer, and the ledger's completion tokens equal the "
        "answer's usage.",
        "",
        "| # | verdict | client events | answer events | usage | ledger | ledger outcome | stored as | problems |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in result.audits:
        out.append(
            f"| {a.index} | {a.verdict} | {a.client_events} | {a.answer_events} | {a.usage_tokens} | "
            f"{a.ledger_tokens} | {a.ledger_outcome} | {a.stored_finish_reason} | {'; '.join(a.problems)} |"
        )
    if result.counters:
        out += ["", "## What the gateways counted", "", "| counter | sum over the gateways |", "|---|---|"]
        out += [f"| `{name}` | {value:g} |" for name, value in result.counters.items()]
    errors = Counter(r.error for r in result.requests if r.error)
    if errors:
        out += ["", "## What aiperf recorded as errors", ""]
        out += [f"- {count} x {error}" for error, count in errors.most_common()]
    if result.notes:
        out += ["", "## Notes", ""] + [f"- {note}" for note in result.notes]
    return "\n".join(out) + "\n"


def write(result: ChaosResult, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "chaos.json").write_text(result.model_dump_json(indent=2), encoding="utf-8")
    plot: Path | None
    try:
        plot = plot_timeline(result, out_dir / "timeline.png")
    except Exception as exc:  # the numbers stand without the picture
        result.notes.append(f"no timeline plot: {type(exc).__name__}: {exc}")
        plot = None
    path = out_dir / "chaos.md"
    path.write_text(markdown(result, plot), encoding="utf-8")
    return path
