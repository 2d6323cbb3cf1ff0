"""The sandbox phase's record: a plain request's latency through the gateway at idle and while the python tool runs a
fork bomb and a memory bomb, and what stopped each attack."""

from __future__ import annotations

from pydantic import BaseModel

UNDER_ATTACK_P50_MAX = 2.0  # issue 53: p50 under attack over idle p50


class AttackRun(BaseModel):
    attack: str  # "fork bomb" / "memory bomb"
    p50_ms: float | None
    p95_ms: float | None
    plain_requests: int
    plain_errors: int
    attacks: int  # attack runs finished while the plain requests were timed
    limits_hit: dict[str, int]  # limit -> runs that hit it ("processes", "memory", "timeout")


class SandboxStats(BaseModel):
    isolation: str
    attackers: int  # attack requests in flight at once
    idle_p50_ms: float | None
    idle_p95_ms: float | None
    runs: list[AttackRun]
    # What answered the plain requests: the real engine ("llama.cpp"), or None: a stand-in answering at once (the
    # gateway alone is measured; the target is then not met, whatever the ratio).
    plain_engine: str | None = None

    def ratio(self, run: AttackRun) -> float | None:
        if run.p50_ms is None or not self.idle_p50_ms:
            return None
        return run.p50_ms / self.idle_p50_ms

    def worst_ratio(self) -> float | None:
        ratios = [r for r in (self.ratio(run) for run in self.runs) if r is not None]
        return max(ratios) if ratios else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def sandbox_lines(stats: SandboxStats) -> list[str]:
    """bench.md's section: idle and under-attack latency, the ratio, and what held each attack."""
    lines = ["", "## The gateway while its sandboxes are attacked", ""]
    lines += [
        f"A gateway process of the phase's own runs the python tool in its sandbox ({stats.isolation}); "
        f"{stats.attackers} attack request(s) at a time make a stand-in model call the tool with a fork bomb, then a "
        "memory bomb, again as each ends, while plain chat completions (auth, admission, the safety pre-filter, a "
        "stand-in worker's instant answer, the ledger) are timed one after another. The stand-in model only carries "
        "the attack's code; what is measured is the gateway and the machine.",
        "",
        "The plain requests were answered by "
        + (
            f"the real engine ({stats.plain_engine}), 8 tokens each."
            if stats.plain_engine
            else "a stand-in answering at once: only the gateway is measured, so the target counts as not met."
        ),
        "",
        "| while | plain p50 ms | plain p95 ms | p50 / idle | plain requests (errors) | attack runs | limits hit |",
        "|---|---|---|---|---|---|---|",
        f"| idle | {_fmt(stats.idle_p50_ms)} | {_fmt(stats.idle_p95_ms)} | 1.00 | — | — | — |",
    ]
    for run in stats.runs:
        hit = ", ".join(f"{name} {count}" for name, count in sorted(run.limits_hit.items())) or "none"
        lines.append(
            f"| {run.attack} | {_fmt(run.p50_ms)} | {_fmt(run.p95_ms)} | {_fmt(stats.ratio(run), 2)} | "
            f"{run.plain_requests} ({run.plain_errors}) | {run.attacks} | {hit} |"
        )
    lines += ["", f"Target: p50 under attack at most {UNDER_ATTACK_P50_MAX:g}x idle."]
    return lines
