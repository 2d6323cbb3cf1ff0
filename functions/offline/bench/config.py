"""What `fleetchat bench` is asked for (`BenchConfig`) and the phase sizes that follow (`Plan`, smaller when quick)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field


class BenchConfig(BaseModel):
    """What `fleetchat bench` asks for; the fields after `quick` tune the phases and rarely need changing."""

    base_url: str = "http://127.0.0.1:8000"
    model: str = "mini"
    api_key: str | None = None  # None: read the local key file (of the stack this run started, if it started one)
    out_dir: Path = Path("bench-results")
    max_tokens: int = Field(default=64, ge=1)
    quick: bool = False
    worker_url: str | None = None  # None: the first local worker URL of the model's pool
    direct_only: bool = False  # drive the worker alone (no gateway, no overhead phase)
    start_stack: bool = True  # start a local stack when no gateway answers at base_url
    levels: list[int] = Field(default_factory=lambda: [1, 8, 16])
    requests_per_stream: int = Field(default=3, ge=1)  # requests per level = this x concurrency ...
    min_requests: int = Field(default=4, ge=1)  # ... but at least this many
    overhead_concurrency: int = Field(default=8, ge=1)
    overhead_rounds: int = Field(default=4, ge=1)  # interleaved A/B rounds: 2 cores make single rounds noisy
    prefix_warm_requests: int = Field(default=4, ge=1)
    prefix_max_tokens: int = Field(default=8, ge=1)
    prefix_system_words: int = Field(default=640, ge=50)  # about 1,000 tokens
    probe_pairs: int = Field(default=10, ge=1)  # one-at-a-time max_tokens=1 requests per path
    models_probe_requests: int = Field(default=50, ge=1)
    conversation_turns: int = Field(default=10, ge=2, le=10)
    conversation_max_tokens: int = Field(default=32, ge=1)
    # Issue 50: one conversation past its pool's context (the local pool's 8,192 tokens fill in about 60 turns).
    long_conversation_turns: int = Field(default=200, ge=2)
    long_conversation_max_tokens: int = Field(default=48, ge=1)
    store_appends: int = Field(default=300, ge=10)
    control_state_answers: int = Field(default=20, ge=1)  # simulated streamed answers per control-state engine
    control_state_tokens: int = Field(default=200, ge=1)
    control_state_token_interval_s: float = Field(default=0.01, ge=0)  # 100 tokens/s: a fast GPU stream
    admission_requests: int = Field(default=500, ge=10)  # in-process admit + settle + ledger write timings
    admission_limit_rpm: int = Field(default=30, ge=1)  # the two-replica burst sends 3x this
    safety_runs: int = Field(default=300, ge=10)  # pre-filter timings per case
    priority_load_s: float = Field(default=45.0, ge=5)  # the saturating free load of the priority phase
    continuation: bool = True  # kill -9 a worker mid-stream (two extra local workers of the model's pool)
    continuation_runs: int = Field(default=6, ge=1)
    continuation_kill_after_chunks: int = Field(default=8, ge=1)
    relay_cpu: bool = True  # the gateway's CPU per 1,000 relayed tokens, output check on and off (two gateways)
    relay_cpu_streams: int = Field(default=12, ge=1)  # per round and gateway
    relay_cpu_rounds: int = Field(default=3, ge=1)
    relay_cpu_concurrency: int = Field(default=4, ge=1)
    relay_cpu_max_tokens: int = Field(default=128, ge=1)
    # Issue 53: a plain request's latency while the python tool's sandboxes run a fork bomb and a memory bomb.
    sandbox_plain_requests: int = Field(default=120, ge=5)  # per condition (idle, each attack)
    sandbox_attackers: int = Field(default=2, ge=1)  # attack requests in flight at once
    temperature: float = 0.0
    request_timeout_s: float = 300.0
    goodput: bool = True  # goodput per tier (needs an admin key to create the bench tenants, or their keys file)
    goodput_concurrency: int = Field(default=4, ge=1)  # streams per tier
    goodput_requests: int = Field(default=12, ge=1)  # requests per tier, per run
    goodput_max_tokens: int = Field(default=32, ge=1)
    admin_key: str | None = None  # None: the local admin key file (of the stack this run started, if it started one)
    aiperf: str | None = None  # the aiperf executable for the independent goodput check; None: $FLEETCHAT_AIPERF/PATH
    guidellm: str | None = None  # the guidellm executable (issue 48); None: $FLEETCHAT_GUIDELLM/PATH, else skipped
    guidellm_streams: int = Field(default=4, ge=1)
    guidellm_requests: int = Field(default=16, ge=1)
    engine_phase: bool = True  # the embedded engines side by side in-process, first, before any stack runs (issue 25)


@dataclass(frozen=True)
class Plan:
    """The effective sizes of every phase (quick mode shrinks them)."""

    max_tokens: int
    level_requests: list[tuple[int, int]]  # (concurrency, requests)
    overhead_requests: int
    overhead_rounds: int
    prefix_warm_requests: int
    probe_pairs: int
    models_probe_requests: int


QUICK_MAX_TOKENS = 32


def make_plan(cfg: BenchConfig) -> Plan:
    if cfg.quick:
        return Plan(
            max_tokens=min(cfg.max_tokens, QUICK_MAX_TOKENS),
            level_requests=[(c, c) for c in cfg.levels],
            overhead_requests=cfg.overhead_concurrency,
            overhead_rounds=1,
            prefix_warm_requests=min(cfg.prefix_warm_requests, 2),
            probe_pairs=min(cfg.probe_pairs, 3),
            models_probe_requests=min(cfg.models_probe_requests, 20),
        )
    return Plan(
        max_tokens=cfg.max_tokens,
        level_requests=[(c, max(cfg.min_requests, cfg.requests_per_stream * c)) for c in cfg.levels],
        overhead_requests=2 * cfg.overhead_concurrency,
        overhead_rounds=cfg.overhead_rounds,
        prefix_warm_requests=cfg.prefix_warm_requests,
        probe_pairs=cfg.probe_pairs,
        models_probe_requests=cfg.models_probe_requests,
    )
