"""Runtime settings, read once from the environment (`FLEETCHAT_*`) or a `.env` file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shared.fleet.canaries import CanarySpec
from shared.fleet.tiers import Tier
from shared.server_tool_settings import ServerToolSettings

# Llama Guard hazard codes a deployment may let through: the ones no OpenAI moderation category covers (S6 specialized
# advice, S7 privacy, S8 intellectual property, S13 elections, S14 code interpreter abuse). The other codes are the
# policy itself; a deployment that wants one of them off wants another guard.
IgnorableHazard = Literal["S6", "S7", "S8", "S13", "S14"]


# Files' knobs (`FLEETCHAT_FILES_*`): the ingestion lease, and how old an orphaned body must be before the retention
# job deletes it.
class FilesSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETCHAT_FILES_", env_file=".env", env_ignore_empty=True, extra="ignore"
    )

    # How long a gateway's claim on ingesting a file lasts; renewed every third of it while the file ingests. A
    # replica that dies holds the file this long at most: another one takes it over at its next look (as often).
    ingestion_lease_s: float = Field(default=30.0, ge=0.5, le=3600.0)
    # A body in the object store with no file metadata (a crash between the put and the insert) is deleted by the
    # retention job once it is this old: younger, it may be an upload whose insert is a moment away.
    orphan_grace_s: float = Field(default=3600.0, ge=0.0)


# Retrieval's knobs (`FLEETCHAT_RETRIEVAL_*`): its latency budget, how many candidates each search returns, the
# fusion and re-rank constants, and how much of a prompt passages may take.
class RetrievalSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETCHAT_RETRIEVAL_", env_file=".env", env_ignore_empty=True, extra="ignore"
    )

    # The whole retrieval (embedding the question, every store's searches, the re-rank) must finish within this, or
    # the request is answered without passages and says so (x-fleetchat-retrieval: skipped). Sized for the CPU stack,
    # where embedding one question takes 20-900 ms depending on load; deployed (a GPU embedding pool) 300 ms is ample.
    budget_ms: int = Field(default=1500, ge=1, le=60_000)
    # Candidates taken from each store by each ranking (vector and BM25) before fusion.
    candidates: int = Field(default=20, ge=1, le=200)
    # Passages put into the prompt at most (a request's `max_num_results` may lower it).
    max_passages: int = Field(default=6, ge=1, le=50)
    # Reciprocal rank fusion constant (Cormack et al. 2009 use 60: it damps the weight of the very first ranks).
    rrf_k: int = Field(default=60, ge=1)
    # MMR trade-off between relevance to the question (1.0) and novelty against passages already chosen (0.0).
    mmr_lambda: float = Field(default=0.7, ge=0.0, le=1.0)
    # Passages never take more than this share of the pool's context window, whatever room the request leaves.
    max_context_share: float = Field(default=0.75, gt=0.0, le=1.0)
    # BM25 indexes kept in memory, one per (tenant, store, revision); least recently used ones are dropped.
    keyword_cache_stores: int = Field(default=64, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_", env_file=".env", env_ignore_empty=True, extra="ignore")

    environment: Literal["local", "deployed"] = "local"
    data_dir: Path = Path(".fleetchat")
    host: str = "127.0.0.1"
    port: int = 8000
    # Local workers listen on consecutive ports from here: one per pool replica.
    worker_base_port: int = 8100
    replicas_per_pool: int = Field(default=1, ge=1, le=8)
    pools: list[str] = ["mini", "flagship"]
    # Embedding pools (shared/fleet/embedding_pools.py) `fleetchat up` serves, one worker each on the ports after the
    # chat workers'; [] serves none. Deployed: `embedding_worker_urls`, pool name -> base URLs (the Modal embedding
    # server).
    embedding_pools: list[str] = ["text-embedding-minilm"]
    embedding_worker_urls: dict[str, list[str]] = {}
    # Tests only: the command `fleetchat up` runs for each worker replica, with {python}, {pool} and {port} filled in
    # (a scripted worker where the model is not the point). None: `fleetchat worker` with the real engine.
    local_worker_command: list[str] | None = None
    # Deployed: pool name -> list of worker base URLs (one Modal Server URL per pool). Empty means local workers.
    worker_urls: dict[str, list[str]] = {}
    local_tenant_tier: Tier = Tier.PLUS
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    # The built web chat (`npm run build` in web/), served at `/`; the repo's web/dist unless set.
    web_dist_dir: Path = Path(__file__).resolve().parent.parent / "web" / "dist"
    worker_timeout_s: float = 600.0
    worker_connect_timeout_s: float = 5.0
    # Resumable streams (docs/resumable-streams.md): a dropped stream keeps generating this long for its client to
    # reconnect with Last-Event-ID (0: a drop is a Stop); its events are kept this long after it ended, within byte
    # bounds per response, per tenant and per gateway process (oldest dropped first).
    resume_grace_s: float = Field(default=15.0, ge=0, le=600)
    resume_buffer_ttl_s: float = Field(default=120.0, gt=0, le=3600)
    resume_response_max_bytes: int = Field(default=4 << 20, ge=1024)
    resume_tenant_max_bytes: int = Field(default=32 << 20, ge=1024)
    resume_total_max_bytes: int = Field(default=256 << 20, ge=1024)
    # Canary model versions by pool (docs/canary.md): a weight of the traffic goes to other replicas serving another
    # version; conversations stick to one version; an erring canary is rolled back until an operator resets it.
    canaries: dict[str, CanarySpec] = {}
    # Reliability (docs/reliability.md). A streamed request's worker must send its response headers within this
    # (a worker that accepts and never answers must not hang the client); above a scale-to-zero pool's cold start.
    worker_first_byte_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # Longest silence between two events of a worker's stream before the gateway treats the replica as stalled
    # and continues the answer elsewhere; above the slowest prefill under load.
    worker_inter_chunk_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # A replica's circuit breaker opens after this many consecutive failures (connect errors, first-byte timeouts,
    # 5xx without an error body, streams that broke), stays open for the cool-down, then lets one probe through.
    breaker_failure_threshold: int = Field(default=3, ge=1, le=100)
    breaker_cooldown_s: float = Field(default=10.0, gt=0, le=600)
    # Server-side tools (docs/server-tools.md): timeouts, sandbox limits, quotas, breakers, rounds.
    server_tools: ServerToolSettings = ServerToolSettings()
    # Sections with their own prefix (FLEETCHAT_FILES_*, FLEETCHAT_RETRIEVAL_*), read when this root is built.
    files: FilesSettings = Field(default_factory=FilesSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    # Tries of one request before its first byte (each on the next candidate replica), with full-jitter backoff.
    upstream_attempts: int = Field(default=3, ge=1, le=10)
    upstream_backoff_s: float = Field(default=0.05, ge=0, le=5)  # base of the jittered exponential backoff
    upstream_backoff_max_s: float = Field(default=1.0, ge=0, le=30)
    # How many times one answer may be continued on another replica after its replica died mid-stream.
    max_continuations: int = Field(default=2, ge=0, le=10)
    # The prompt/result cache (docs/result-cache.md): seconds a complete deterministic answer is served again, by
    # tier (a tier left out keeps the tier table's `result_cache_ttl_s`; 0 turns the cache off for it), and the most
    # entries the local SQLite file keeps (expired first, then oldest, evicted). Deployed, DynamoDB's TTL evicts.
    result_cache_ttl_s: dict[Tier, Annotated[int, Field(ge=0, le=7 * 24 * 3600)]] = {}
    result_cache_max_entries: int = Field(default=10_000, ge=1)
    # Priority admission, overflow and automatic brownout (docs/reliability-control.md). Places per pool (requests
    # this gateway runs on it at once; more wait in a queue): by pool name; a pool not named gets, locally,
    # `pool_capacity_per_replica` per replica (8 streams share a CPU worker well), deployed its pool table's
    # max_concurrent_inputs x max_containers.
    pool_capacity: dict[str, int] = {}
    pool_capacity_per_replica: int = Field(default=8, ge=1, le=1024)
    # The share of each pool's places free requests may not take, so paid requests start at once under a free load.
    pool_paid_reserve: float = Field(default=0.25, ge=0, lt=1)
    # Per tier, requests that may wait for one pool and for how long (a tier left out keeps its default). Free's
    # queue is the shortest, so free is refused first (503 capacity_exceeded + retry-after).
    queue_max_waiting: dict[Tier, int] = {Tier.FREE: 16, Tier.PLUS: 64, Tier.ENTERPRISE: 128}
    queue_max_wait_s: dict[Tier, float] = {Tier.FREE: 10.0, Tier.PLUS: 30.0, Tier.ENTERPRISE: 60.0}
    # Queued requests re-enter a pool at most one capacity's worth per this many seconds (0: no limit), so a backlog
    # drains gradually after an outage.
    queue_drain_ramp_s: float = Field(default=2.0, ge=0, le=60)
    # Tiers whose requests go to the tier's next pool (announced) when theirs cannot start them within the TTFT SLO.
    overflow_tiers: list[Tier] = [Tier.PLUS]
    # Brownout turns on when a pool's queue reaches `brownout_queue_depth` (default: its capacity) or a tier's recent
    # p95 TTFT or queue wait reaches its SLO; off after the pressure stayed under `brownout_off_ratio` for
    # `brownout_hold_s`. Percentiles over `brownout_window_s`, with `brownout_min_samples` at least.
    brownout_queue_depth: dict[str, int] = {}
    brownout_window_s: float = Field(default=30.0, gt=0, le=3600)
    brownout_min_samples: int = Field(default=3, ge=1)
    brownout_off_ratio: float = Field(default=0.5, gt=0, lt=1)
    brownout_hold_s: float = Field(default=30.0, ge=0, le=3600)
    brownout_tick_s: float = Field(default=1.0, gt=0, le=60)
    # Conversation storage: the local SQLite file, or DynamoDB + S3 (deployed; any endpoint, e.g. moto, for tests).
    conversation_store: Literal["sqlite", "aws"] = "sqlite"
    aws_region: str = "us-east-1"
    aws_endpoint_url: str | None = None
    conversations_table: str = "fleetchat-conversations"
    conversations_bucket: str = "fleetchat-conversations"
    conversations_kms_key_id: str | None = None
    # Accounts, admission counters, the token ledger and the meter exporter's state: the same SQLite file locally,
    # one DynamoDB table deployed (atomic conditional updates make the limits hold across gateway replicas).
    accounts_store: Literal["sqlite", "aws"] = "sqlite"
    accounts_table: str = "fleetchat-accounts"
    # Signs web-session cookies; locally created once in the data dir when unset; deployed it must be set (a secret),
    # or each gateway container would sign with its own.
    session_secret: SecretStr | None = Field(default=None, min_length=32)
    # Metering: the ledger is always written; with a Stripe key its totals are sent as Billing meter events.
    stripe_api_key: SecretStr | None = None
    stripe_api_base: str | None = None  # another Stripe-compatible endpoint (a local fake in tests)
    meter_event_input: str = "fleetchat_input_tokens"  # uncached prompt tokens
    meter_event_cached_input: str = "fleetchat_cached_input_tokens"
    meter_event_output: str = "fleetchat_output_tokens"
    meter_event_embedding_input: str = "fleetchat_embedding_tokens"  # /v1/embeddings input tokens (issue 22)
    meter_window_s: int = Field(default=3600, ge=60)  # one meter event per tenant x meter x window
    meter_grace_s: int = Field(default=300, ge=0)  # a window is exported this long after it closes
    # The safety guard (docs/safety-guard.md): the embedded classifier; Llama Guard served as an OpenAI-compatible
    # chat-completions pool; or a remote OpenAI-compatible /v1/moderations endpoint.
    safety_guard: Literal["embedded", "llama_guard", "moderation_api"] = "embedded"
    safety_guard_url: str | None = None  # the remote guard's base URL (without /v1)
    safety_guard_model: str | None = None  # None: "llama-guard" (the Modal pool's served name) / omni-moderation-latest
    safety_guard_api_key: SecretStr | None = None
    # Llama Guard only: (low, high) — the embedded classifier decides below low and blocks at or above high, the guard
    # model judges the band between. None: the guard model judges every request.
    safety_guard_band: tuple[float, float] | None = None
    # Llama Guard only: hazard codes that do not block (`S6,S8`, or `none`). S6 would refuse ordinary health, legal and
    # financial questions, S8 quoting or summarising published text (docs/safety-guard.md).
    safety_guard_ignored_codes: Annotated[frozenset[IgnorableHazard], NoDecode] = frozenset({"S6", "S8"})
    # Per attempt, the whole exchange (connect to last byte): a chat request waits on it before any model runs.
    safety_guard_timeout_s: float = Field(default=5.0, gt=0, le=60)
    safety_guard_attempts: int = Field(default=2, ge=1, le=5)  # tries of a transient failure (timeout, refused, 5xx)
    # A remote guard that cannot answer: "closed" refuses with 503 + retry-after; "open": the embedded guard judges.
    safety_guard_fail: Literal["closed", "open"] = "closed"
    # A remote guard judging alone (Llama Guard without a band, a /v1/moderations endpoint): the embedded rule layer's
    # deny list runs in front of it (a hit is refused without a round trip; Llama Guard has no jailbreak category).
    safety_guard_rules: bool = True
    # The embedded classifier's sentence reads (docs/safety.md): a request inside a long latest user turn (a pasted
    # document) is read alone where the ask head finds it phrased as one. Off by default: on the held-out sources they
    # catch 51 % of harmful asks pasted into long texts (18 % off) and refuse more long news (2.0 -> 3.9 % of long
    # benign texts) and 3 of 64 synthetic benchmark prompts.
    safety_sentence_reads: bool = False
    # The LLM judge (functions/judging): any OpenAI-compatible endpoint, "the flagship by default". judge_url is its
    # base URL including /v1; None: the judge pool's own worker (no gateway in between: no billing, no safety pass).
    judge_url: str | None = None
    judge_pool: str = "flagship"
    judge_model: str | None = None  # None: the judge pool's name (the model id its workers serve)
    judge_api_key: SecretStr | None = None
    judge_timeout_s: float = Field(default=60.0, gt=0, le=600)  # per attempt
    judge_attempts: int = Field(default=3, ge=1, le=10)  # tries of a transient failure (timeout, refused, 5xx, 429)
    # The shadow judge (docs/shadow-judge.md): this share of the answers of the two pools below is graded by the
    # judge off the request path; 0 turns it off. Both pools are sampled so their rolling scores can be compared.
    shadow_judge_share: float = Field(default=0.05, ge=0.0, le=1.0)
    shadow_judge_candidate_pool: str = "mini"
    shadow_judge_reference_pool: str = "flagship"
    shadow_judge_queue_size: int = Field(default=64, ge=1, le=10_000)  # full: new samples are dropped and counted
    shadow_judge_workers: int = Field(default=2, ge=1, le=32)  # judge calls in flight at once
    shadow_judge_calls_per_minute: float = Field(default=30.0, ge=1)  # the judge budget (token bucket, burst = 1 min)
    shadow_judge_window: int = Field(default=200, ge=1, le=100_000)  # rolling mean over each pool's last N scores
    # Alert when reference minus candidate (mean overall score, 1-5 scale) exceeds this, with enough scores per pool.
    shadow_judge_alert_delta: float = Field(default=0.5, gt=0.0, le=4.0)
    shadow_judge_min_samples: int = Field(default=30, ge=1)
    # The operator config file (docs/configuration.md): pools, tiers, guard, judge; None: the built-in tables. The
    # gateway reloads its tiers (limits, SLOs, ...) when the file changes; a FLEETCHAT_* variable still wins over it.
    config_file: Path | None = None

    @model_validator(mode="after")
    def _deployed_needs_workers(self) -> Settings:
        if self.environment == "deployed" and not self.worker_urls:
            raise ValueError("FLEETCHAT_WORKER_URLS must name the worker URLs when deployed")
        if self.environment == "deployed" and self.session_secret is None:
            raise ValueError("FLEETCHAT_SESSION_SECRET (32+ characters) must be set when deployed")
        return self

    @field_validator("queue_max_waiting", "queue_max_wait_s", mode="after")
    @classmethod
    def _every_tier_bounded(cls, value: dict[Tier, Any], info: Any) -> dict[Tier, Any]:
        """A setting naming some tiers keeps the defaults of the others; every bound must be positive."""
        defaults = cls.model_fields[info.field_name].default
        merged = {**defaults, **value}
        if any(bound < 0 or (info.field_name == "queue_max_wait_s" and bound <= 0) for bound in merged.values()):
            raise ValueError(f"{info.field_name}: every tier's bound must be positive")
        return merged

    @field_validator("embedding_pools", "embedding_worker_urls", mode="after")
    @classmethod
    def _known_embedding_pools(cls, value: Any) -> Any:
        """Only pools shared/fleet/embedding_pools.py defines (a typo would crash-loop its worker, or route nowhere)."""
        from shared.fleet.tables import tables

        unknown = sorted(set(value) - set(tables().embedding_pools))
        if unknown:
            raise ValueError(f"unknown embedding pools {unknown}; known: {sorted(tables().embedding_pools)}")
        return value

    @field_validator("safety_guard_ignored_codes", mode="before")
    @classmethod
    def _codes_from_text(cls, value: Any) -> Any:
        """`S6,S8`, `["S6","S8"]` or `none` from the environment; codes in any case."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                value = json.loads(text)
            else:
                value = [] if text.lower() == "none" else [part for part in text.split(",") if part.strip()]
        if isinstance(value, list | tuple | set | frozenset):
            return frozenset(str(code).strip().upper() for code in value)
        return value

    @model_validator(mode="after")
    def _guard_is_complete(self) -> Settings:
        if self.safety_guard != "embedded" and not self.safety_guard_url:
            raise ValueError(f"FLEETCHAT_SAFETY_GUARD_URL must be set for the {self.safety_guard} guard")
        if self.safety_guard_band is not None:
            low, high = self.safety_guard_band
            if self.safety_guard != "llama_guard":
                raise ValueError("FLEETCHAT_SAFETY_GUARD_BAND applies to the llama_guard guard only")
            if not 0.0 <= low < high <= 1.0:
                raise ValueError("FLEETCHAT_SAFETY_GUARD_BAND must be [low, high] with 0 <= low < high <= 1")
        return self

    @property
    def db_path(self) -> Path:
        return self.data_dir / "fleetchat.db"

    @property
    def local_key_path(self) -> Path:
        return self.data_dir / "local_api_key"

    @property
    def local_admin_key_path(self) -> Path:
        return self.data_dir / "admin_api_key"

    def local_worker_urls(self) -> dict[str, list[str]]:
        """The loopback URLs `fleetchat up` starts its workers on, pool by pool."""
        urls: dict[str, list[str]] = {}
        port = self.worker_base_port
        for pool in self.pools:
            urls[pool] = []
            for _ in range(self.replicas_per_pool):
                urls[pool].append(f"http://127.0.0.1:{port}")
                port += 1
        return urls

    def local_embedding_worker_urls(self) -> dict[str, list[str]]:
        """The loopback URLs of the local embedding workers: one per embedding pool, after the chat workers' ports."""
        port = self.worker_base_port + len(self.pools) * self.replicas_per_pool
        return {pool: [f"http://127.0.0.1:{port + i}"] for i, pool in enumerate(self.embedding_pools)}

    def resolved_embedding_worker_urls(self) -> dict[str, list[str]]:
        if self.environment == "deployed" or self.embedding_worker_urls:
            return self.embedding_worker_urls
        return self.local_embedding_worker_urls()

    def resolved_worker_urls(self) -> dict[str, list[str]]:
        return self.worker_urls or self.local_worker_urls()
