"""The benchmark's result schema: what bench.json holds and bench.md renders."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from functions.offline.bench.results.continuation_results import ContinuationStats
from functions.offline.bench.results.control_state_results import ControlStateStats
from functions.offline.bench.results.embeddings_results import EmbeddingStats
from functions.offline.bench.results.guidellm_results import GuidellmStats
from functions.offline.bench.results.long_conversation_results import LongConversationStats
from functions.offline.bench.results.priority_results import PriorityStats
from functions.offline.bench.results.relay_cpu_results import RelayCpuStats
from functions.offline.bench.results.result_cache_results import ResultCacheStats
from functions.offline.bench.results.retrieval_results import RetrievalStats
from functions.offline.bench.results.sandbox_results import SandboxStats
from functions.offline.measure.stats import LevelStats


class PrefixStats(BaseModel):
    """Cold vs warm time to first token for requests sharing a long system prompt."""

    system_prompt_tokens: int | None
    cold_ttft_ms: float | None
    warm_ttft_ms: float | None  # median over the warm requests
    warm_ttft_ms_all: list[float]
    warm_over_cold: float | None
    cold_cached_tokens: int | None
    warm_cached_tokens: list[int | None]
    worker_hit_rate: float | None  # delta hits / delta queries over the phase, from the worker's /metrics
    worker_hits_delta: float | None
    worker_queries_delta: float | None
    metrics_note: str = ""
    errors: int = 0
    error_samples: list[str] = Field(default_factory=list)


class OverheadStats(BaseModel):
    """The same load through the gateway and straight to the worker."""

    concurrency: int
    rounds: int
    gateway: LevelStats
    direct: LevelStats
    throughput_ratio: float | None  # gateway tok/s / direct tok/s
    ttft_p50_diff_ms: float | None  # gateway p50 - direct p50, under load
    unloaded_ttft_p50_gateway_ms: float | None
    unloaded_ttft_p50_direct_ms: float | None
    unloaded_ttft_p50_diff_ms: float | None  # one request at a time, max_tokens=1
    models_p50_gateway_ms: float | None  # GET /v1/models: no model work, auth + routing + HTTP only
    models_p50_direct_ms: float | None
    models_p50_diff_ms: float | None


class TurnStats(BaseModel):
    turn: int
    prompt_tokens: int
    cached_tokens: int
    previous_prompt_tokens: int | None
    reuse: float | None  # cached_tokens / previous_prompt_tokens
    latency_ms: float


class ConversationStats(BaseModel):
    """A scripted multi-turn conversation through the gateway (store: true, then conversation_id)."""

    turns: list[TurnStats]
    min_reuse: float | None  # the worst turn's cached / previous prompt
    hit_rate: float | None  # cached / prompt tokens over turns 2..N


class StoreAppendStats(BaseModel):
    """append_turn latency of one conversation-store adapter."""

    store: str
    appends: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


class AdmissionCostStats(BaseModel):
    """What admit + settle + the ledger write add to one request, timed in-process on a fresh store."""

    store: str
    requests: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    admit_p50_ms: float | None
    settle_p50_ms: float | None
    ledger_p50_ms: float | None


class AdmissionReplicaStats(BaseModel):
    replica: str
    sent: int
    accepted: int  # 200
    refused: int  # 429
    other: int


class AdmissionLimitStats(BaseModel):
    """A burst of 3x an RPM limit over two gateway replicas sharing one store, inside one fixed one-minute window."""

    limit_rpm: int
    concurrency: int
    planned: int  # 3 x limit_rpm; those whose turn came too close to the window's end were not sent
    sent: int
    accepted: int
    refused: int
    other: dict[str, int] = Field(default_factory=dict)  # status code or exception name -> count
    replicas: list[AdmissionReplicaStats]
    wall_s: float


class AdmissionStats(BaseModel):
    cost: AdmissionCostStats | None = None
    limit: AdmissionLimitStats | None = None


class SafetyCostStats(BaseModel):
    case: str
    context_tokens: int  # MiniLM tokens judged (0: per streamed chunk)
    runs: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    decided_by: str = ""  # which classifier stage decided each conversation ("screen 3, fast 1")


class SafetyStats(BaseModel):
    policy_version: str
    costs: list[SafetyCostStats]

    def case(self, prefix: str) -> SafetyCostStats | None:
        return next((c for c in self.costs if c.case.startswith(prefix)), None)


class TierGoodput(BaseModel):
    """One tier's streamed requests judged client-side against its TierSlo."""

    tier: str
    pool: str
    slo_ttft_s: float
    slo_inter_token_s: float
    concurrency: int
    requests: int
    errors: int
    met: int  # the gateway's rule: TTFT and the request's own p95 inter-token gap within the SLO
    goodput: float | None  # met / requests (an error does not meet it)
    met_mean_itl: int  # aiperf's rule: TTFT and the request's mean inter-token latency within the SLO
    goodput_mean_itl: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    itl_p95_ms: float | None
    error_samples: list[str] = Field(default_factory=list)


class AiperfGoodput(BaseModel):
    """aiperf's own numbers for the same load (`--goodput time_to_first_token:MS inter_token_latency:MS`)."""

    requests: int  # completed
    errors: int
    good: int  # aiperf's good_request_count
    goodput: float | None  # good / (completed + errors)
    goodput_rps: float | None  # aiperf's goodput metric, requests/s
    ttft_p95_ms: float | None
    itl_avg_ms: float | None
    error: str | None = None  # aiperf did not run or produced no result


class GoodputComparison(BaseModel):
    """One tier alone: our client, then aiperf, the same prompts, concurrency, count and max_tokens."""

    ours: TierGoodput
    aiperf: AiperfGoodput | None


class GoodputStats(BaseModel):
    max_tokens: int
    mixed: list[TierGoodput]  # every tier at once
    alone: list[GoodputComparison] = Field(default_factory=list)
    server_goodput: float | None = None  # the gateway's own counter over the mixed run (tier="eval": bench tenants)
    server_judged: float | None = None
    notes: list[str] = Field(default_factory=list)


class Check(BaseModel):
    """One target and whether the run met it (None: not measured)."""

    name: str
    value: float | None
    unit: str
    target: str
    passed: bool | None


class BenchResult(BaseModel):
    started_at: str
    finished_at: str
    duration_s: float
    config: dict[str, Any]
    machine: dict[str, Any]
    target_url: str
    worker_url: str | None
    started_stack: bool
    notes: list[str] = Field(default_factory=list)
    levels: list[LevelStats] = Field(default_factory=list)
    scaling_8_over_1: float | None = None
    prefix: PrefixStats | None = None
    overhead: OverheadStats | None = None
    conversation: ConversationStats | None = None
    store_appends: list[StoreAppendStats] = Field(default_factory=list)
    admission: AdmissionStats | None = None
    safety: SafetyStats | None = None
    priority: PriorityStats | None = None
    continuation: ContinuationStats | None = None
    goodput: GoodputStats | None = None
    result_cache: ResultCacheStats | None = None
    embeddings: EmbeddingStats | None = None  # issue 22: /v1/embeddings throughput
    control_state: list[ControlStateStats] = Field(default_factory=list)  # issue 47: shared stream state
    relay_cpu: RelayCpuStats | None = None  # issue 47: the gateway's CPU per 1,000 relayed tokens
    sandbox: SandboxStats | None = None  # issue 53: the gateway's latency while its sandboxes are attacked
    long_conversation: LongConversationStats | None = None  # issue 50: a conversation past its pool's context
    guidellm: GuidellmStats | None = None  # issue 48: guidellm's default request, its own figures
    retrieval: RetrievalStats | None = None  # issue 23: ingestion pages/s, search latency
    checks: list[Check] = Field(default_factory=list)
