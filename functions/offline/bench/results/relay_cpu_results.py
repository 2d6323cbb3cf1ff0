"""The relay CPU phase's record: the gateway's CPU time per 1,000 relayed tokens, with and without the output check."""

from __future__ import annotations

from pydantic import BaseModel


class RelayCpuRun(BaseModel):
    """One gateway variant's totals over every round."""

    variant: str  # "output check on" / "output check off"
    requests: int = 0
    errors: int = 0
    tokens: int = 0  # completion tokens the client got (usage)
    cpu_s: float = 0.0  # the gateway process's user + system CPU over the timed batches
    wall_s: float = 0.0
    first_error: str | None = None

    @property
    def cpu_ms_per_1k_tokens(self) -> float | None:
        return 1e6 * self.cpu_s / self.tokens if self.tokens else None

    @property
    def cpu_share(self) -> float | None:
        """Cores the gateway kept busy while relaying (CPU seconds over wall seconds)."""
        return self.cpu_s / self.wall_s if self.wall_s else None


class RelayCpuStats(BaseModel):
    model: str
    concurrency: int
    max_tokens: int
    rounds: int
    runs: list[RelayCpuRun]

    def run(self, variant: str) -> RelayCpuRun | None:
        return next((r for r in self.runs if r.variant == variant), None)

    @property
    def check_ratio(self) -> float | None:
        """CPU per token with the output check over without it."""
        on, off = self.run("output check on"), self.run("output check off")
        if on is None or off is None or not on.cpu_ms_per_1k_tokens or not off.cpu_ms_per_1k_tokens:
            return None
        return on.cpu_ms_per_1k_tokens / off.cpu_ms_per_1k_tokens


def _fmt(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def relay_cpu_lines(stats: RelayCpuStats) -> list[str]:
    """bench.md's section: per variant, tokens, CPU and CPU per 1,000 tokens; the ratio between them."""
    lines = ["", "## Gateway CPU per 1,000 relayed tokens", ""]
    lines += [
        f"Two gateway processes over the same real `{stats.model}` workers, {stats.rounds} round(s) each at "
        f"concurrency {stats.concurrency}, max_tokens {stats.max_tokens}, alternating which goes first. CPU is the "
        "gateway process's user + system time over the timed batches (auth, admission, pre-filter, relay, "
        "post-filter, ledger, stored turn); the workers' CPU is not counted.",
        "",
        "| gateway | streams (errors) | tokens relayed | gateway CPU s | CPU ms / 1k tokens | cores busy |",
        "|---|---|---|---|---|---|",
    ]
    for run in stats.runs:
        lines.append(
            f"| {run.variant} | {run.requests} ({run.errors}) | {run.tokens:,} | {_fmt(run.cpu_s, 2)} | "
            f"{_fmt(run.cpu_ms_per_1k_tokens, 0)} | {_fmt(run.cpu_share, 2)} |"
        )
    if stats.check_ratio is not None:
        lines += ["", f"With the output check, the gateway spends {stats.check_ratio:.2f}x the CPU per token."]
    return lines
