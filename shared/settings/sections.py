"""The settings root's sections: one environment prefix each (`FLEETCHAT_BROWNOUT_*` -> `Settings.brownout`), every
default stated here once. Each section reads the environment (and `.env`) when the root is built; values given to the
root (`Settings(brownout={"window_s": 5})`) win over it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_serializer, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shared.fleet.tiers import Tier

# Llama Guard hazard codes a deployment may let through: the ones no OpenAI moderation category covers (S6 specialized
# advice, S7 privacy, S8 intellectual property, S13 elections, S14 code interpreter abuse). The other codes are the
# policy itself; a deployment that wants one of them off wants another guard.
IgnorableHazard = Literal["S6", "S7", "S8", "S13", "S14"]


class Section(BaseSettings):
    """A section of the settings root: read from `FLEETCHAT_<SECTION>_*` (its `env_prefix`) and `.env`."""

    model_config = SettingsConfigDict(env_file=".env", env_ignore_empty=True, extra="ignore", populate_by_name=True)


class WorkerSettings(Section):
    """How the gateway talks to workers (`FLEETCHAT_WORKER_*`, docs/reliability.md)."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_WORKER_")

    # Local workers listen on consecutive ports from here: one per pool replica.
    base_port: int = 8100
    timeout_s: float = 600.0
    connect_timeout_s: float = 5.0
    # A streamed request's worker must send its response headers within this (a worker that accepts and never answers
    # must not hang the client); above a scale-to-zero pool's cold start.
    first_byte_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # Longest silence between two events of a worker's stream before the gateway treats the replica as stalled and
    # continues the answer elsewhere; above the slowest prefill under load.
    inter_chunk_timeout_s: float = Field(default=30.0, gt=0, le=600)
    # The key a worker requires and the gateway presents (`Authorization: Bearer`), so workers answer only the gateway
    # (docs/operations.md, "Worker credentials"). `fleetchat up` makes one per data dir (its `worker_api_key` file);
    # deployed it comes from the `fleetchat-workers` Modal secret and is vLLM's `--api-key`. None: a worker accepts
    # anyone (a standalone `fleetchat worker`, like `vllm serve` without `--api-key`).
    api_key: SecretStr | None = None
    # Keys a worker accepts besides `api_key` (comma-separated): the outgoing one while a rotation is under way.
    accepted_api_keys: Annotated[list[SecretStr], NoDecode] = []
    # Deployed: the Modal proxy auth token the gateway presents to every worker, guard and embedding server
    # (`Modal-Key` / `Modal-Secret`); they are deployed requiring proxy auth (`unauthenticated=False`).
    proxy_token_id: str | None = None
    proxy_token_secret: SecretStr | None = None
    # Each worker URL is a load balancer in front of the pool's replicas (deployed: a Modal Server, whose proxy picks a
    # container by the request's Modal-Session-ID). A replica dying mid-answer then does not take the URL with it: the
    # answer continues on the same URL under a new session id, which Modal routes to another live container
    # (docs/reliability.md, "Continuation in a deployed pool"). The Modal app sets it for its gateway.
    balanced: bool = False

    @field_validator("accepted_api_keys", mode="before")
    @classmethod
    def _keys_from_text(cls, value: Any) -> Any:
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    def accepted_keys(self) -> frozenset[str]:
        """Every key a worker accepts: `api_key` and the rotation's others."""
        keys = [self.api_key, *self.accepted_api_keys]
        return frozenset(key.get_secret_value() for key in keys if key is not None)

    def credential_headers(self) -> dict[str, str]:
        """What the gateway adds to each request for one of its own workers."""
        headers = {"authorization": f"Bearer {self.api_key.get_secret_value()}"} if self.api_key else {}
        if self.proxy_token_id and self.proxy_token_secret:
            headers["modal-key"] = self.proxy_token_id
            headers["modal-secret"] = self.proxy_token_secret.get_secret_value()
        return headers


class ResumeSettings(Section):
    """Resumable streams (`FLEETCHAT_RESUME_*`, docs/resumable-streams.md): a dropped stream keeps generating this long
    for its client to reconnect with Last-Event-ID (0: a drop is a Stop); its events are kept this long after it
    ended, within byte bounds per response, per tenant and per gateway process (oldest dropped first)."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_RESUME_")

    grace_s: float = Field(default=15.0, ge=0, le=600)
    buffer_ttl_s: float = Field(default=120.0, gt=0, le=3600)
    response_max_bytes: int = Field(default=4 << 20, ge=1024)
    tenant_max_bytes: int = Field(default=32 << 20, ge=1024)
    total_max_bytes: int = Field(default=256 << 20, ge=1024)


class TracingOptions(BaseModel):
    """Distributed tracing (docs/observability.md, "Traces"), as the environment and the operator file's `tracing`
    section share it: spans are exported over OTLP/HTTP to `otlp_endpoint` (a collector's base URL, e.g.
    http://otel-collector:4318; None: spans are made and propagated, never exported), a `sample_ratio` of new traces
    kept (a caller's sampled `traceparent` is always followed)."""

    otlp_endpoint: str | None = Field(default=None, pattern=r"^https?://")
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    # OpenTelemetry's service.namespace; service.name says which part: gateway, worker.
    service_namespace: str = Field(default="fleetchat", min_length=1, max_length=100)


class TracingSettings(Section, TracingOptions):
    """`FLEETCHAT_TRACING_*`."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_TRACING_")


class ControlStateSettings(Section):
    """The control state gateway replicas share (`FLEETCHAT_CONTROL_STATE_*`, docs/operations.md "Shared control
    state"): SQLite in the data dir (`control.db`, every local gateway process opens it) or Redis (deployed, `redis_url`
    from a secret). A stream's events are written as they come (a failed write is retried every `retry_s`); each
    gateway syncs breakers, brownout, canary rollbacks and stop requests every `sync_s` and counts a gateway silent for
    `liveness_s` as gone; a resume served by another gateway polls for new events every `poll_s`."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_CONTROL_STATE_")

    engine: Literal["sqlite", "redis"] = "sqlite"
    redis_url: SecretStr | None = None  # may carry a password (rediss://:secret@host:6380/0)
    key_prefix: str = Field(default="fleetchat", min_length=1, max_length=64)
    timeout_s: float = Field(default=1.0, gt=0, le=30)
    retry_s: float = Field(default=0.2, gt=0, le=5)
    sync_s: float = Field(default=1.0, gt=0, le=30)
    liveness_s: float = Field(default=5.0, gt=0, le=300)
    poll_s: float = Field(default=0.05, gt=0, le=5)

    @model_validator(mode="after")
    def _redis_needs_url(self) -> ControlStateSettings:
        if self.engine == "redis" and self.redis_url is None:
            raise ValueError("FLEETCHAT_CONTROL_STATE_REDIS_URL must be set when the engine is redis")
        if self.liveness_s <= 2 * self.sync_s:
            raise ValueError("liveness_s must exceed two sync intervals (a live gateway writes once per sync_s)")
        return self


class BreakerSettings(Section):
    """Replica circuit breakers (`FLEETCHAT_BREAKER_*`): a replica's breaker opens after this many consecutive failures
    (connect errors, first-byte timeouts, 5xx without an error body, streams that broke), stays open for the
    cool-down, then lets one probe through."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_BREAKER_")

    failure_threshold: int = Field(default=3, ge=1, le=100)
    cooldown_s: float = Field(default=10.0, gt=0, le=600)


class UpstreamSettings(Section):
    """Tries of one request before its first byte (`FLEETCHAT_UPSTREAM_*`), each on the next candidate replica, with
    full-jitter exponential backoff."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_UPSTREAM_")

    attempts: int = Field(default=3, ge=1, le=10)
    backoff_s: float = Field(default=0.05, ge=0, le=5)  # base of the jittered exponential backoff
    backoff_max_s: float = Field(default=1.0, ge=0, le=30)


class ResultCacheSettings(Section):
    """The prompt/result cache (`FLEETCHAT_RESULT_CACHE_*`, docs/result-cache.md): seconds a complete deterministic
    answer is served again, by tier (a tier left out keeps the tier table's `result_cache_ttl_s`; 0 turns the cache
    off for it), and the most entries the local SQLite file keeps (expired first, then oldest, evicted). Deployed,
    DynamoDB's TTL evicts."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_RESULT_CACHE_")

    ttl_s: dict[Tier, Annotated[int, Field(ge=0, le=7 * 24 * 3600)]] = {}
    max_entries: int = Field(default=10_000, ge=1)


class PoolSettings(Section):
    """Places per pool (`FLEETCHAT_POOL_*`, docs/reliability-control.md): requests this gateway runs on a pool at once
    (more wait in a queue), by pool name; a pool not named gets, locally, `capacity_per_replica` per replica (8
    streams share a CPU worker well), deployed its pool table's max_concurrent_inputs x max_containers."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_POOL_")

    capacity: dict[str, int] = {}
    capacity_per_replica: int = Field(default=8, ge=1, le=1024)
    # The share of each pool's places free requests may not take, so paid requests start at once under a free load.
    paid_reserve: float = Field(default=0.25, ge=0, lt=1)


class QueueSettings(Section):
    """Per tier, requests that may wait for one pool and for how long (`FLEETCHAT_QUEUE_*`; a tier left out keeps its
    default). Free's queue is the shortest, so free is refused first (503 capacity_exceeded + retry-after)."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_QUEUE_")

    max_waiting: dict[Tier, int] = {Tier.FREE: 16, Tier.PLUS: 64, Tier.ENTERPRISE: 128}
    max_wait_s: dict[Tier, float] = {Tier.FREE: 10.0, Tier.PLUS: 30.0, Tier.ENTERPRISE: 60.0}
    # Queued requests re-enter a pool at most one capacity's worth per this many seconds (0: no limit), so a backlog
    # drains gradually after an outage.
    drain_ramp_s: float = Field(default=2.0, ge=0, le=60)

    @field_validator("max_waiting", "max_wait_s", mode="after")
    @classmethod
    def _every_tier_bounded(cls, value: dict[Tier, Any], info: Any) -> dict[Tier, Any]:
        """A setting naming some tiers keeps the defaults of the others; every bound must be positive."""
        defaults = cls.model_fields[info.field_name].default
        merged = {**defaults, **value}
        if any(bound < 0 or (info.field_name == "max_wait_s" and bound <= 0) for bound in merged.values()):
            raise ValueError(f"{info.field_name}: every tier's bound must be positive")
        return merged


class BrownoutSettings(Section):
    """Automatic brownout (`FLEETCHAT_BROWNOUT_*`, docs/reliability-control.md): on when a pool's queue reaches
    `queue_depth` (default: its capacity) or a tier's recent p95 TTFT or queue wait reaches its SLO; off after the
    pressure stayed under `off_ratio` for `hold_s`. Percentiles over `window_s`, with `min_samples` at least; the
    controller re-evaluates every `tick_s` when no event does."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_BROWNOUT_")

    queue_depth: dict[str, int] = {}
    window_s: float = Field(default=30.0, gt=0, le=3600)
    min_samples: int = Field(default=3, ge=1)
    off_ratio: float = Field(default=0.5, gt=0, lt=1)
    hold_s: float = Field(default=30.0, ge=0, le=3600)
    tick_s: float = Field(default=1.0, gt=0, le=60)


class StripeSettings(Section):
    """Stripe (`FLEETCHAT_STRIPE_*`): with a key, the ledger's totals are sent as Billing meter events."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_STRIPE_")

    api_key: SecretStr | None = None
    api_base: str | None = None  # another Stripe-compatible endpoint (a local fake in tests)


class MeterSettings(Section):
    """Metering (`FLEETCHAT_METER_*`): the meters' event names, and the windows they are exported in. The ledger is
    always written."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_METER_")

    event_input: str = "fleetchat_input_tokens"  # uncached prompt tokens
    event_cached_input: str = "fleetchat_cached_input_tokens"
    event_output: str = "fleetchat_output_tokens"
    event_embedding_input: str = "fleetchat_embedding_tokens"  # /v1/embeddings input tokens (issue 22)
    event_rerank_input: str = "fleetchat_rerank_tokens"  # /v1/rerank pair tokens (issue 49)
    # Lines of batches (/v1/batches): the same quantities on meters of their own, priced at the batch price.
    event_batch_input: str = "fleetchat_batch_input_tokens"
    event_batch_cached_input: str = "fleetchat_batch_cached_input_tokens"
    event_batch_output: str = "fleetchat_batch_output_tokens"
    event_batch_embedding_input: str = "fleetchat_batch_embedding_tokens"
    window_s: int = Field(default=3600, ge=60)  # one meter event per tenant x meter x window
    grace_s: int = Field(default=300, ge=0)  # a window is exported this long after it closes


class GuardOptions(BaseModel):
    """The safety guard's options as the environment and the operator file's `guard` section share them."""

    model_config = {"populate_by_name": True}

    # The embedded classifier; Llama Guard served as an OpenAI-compatible chat-completions pool; or a remote
    # OpenAI-compatible /v1/moderations endpoint. Environment: FLEETCHAT_SAFETY_GUARD.
    kind: Literal["embedded", "llama_guard", "moderation_api"] = Field(
        default="embedded", validation_alias="fleetchat_safety_guard"
    )
    url: str | None = None  # the remote guard's base URL (without /v1)
    model: str | None = None  # None: "llama-guard" (the Modal pool's served name) / omni-moderation-latest
    # Llama Guard only: (low, high) — the embedded classifier decides below low and blocks at or above high, the guard
    # model judges the band between. None: the guard model judges every request.
    band: tuple[float, float] | None = None
    # Llama Guard only: hazard codes that do not block (`S6,S8`, or `none`). S6 would refuse ordinary health, legal and
    # financial questions, S8 quoting or summarising published text (docs/safety-guard.md).
    ignored_codes: Annotated[frozenset[IgnorableHazard], NoDecode] = frozenset({"S6", "S8"})
    # Per attempt, the whole exchange (connect to last byte): a chat request waits on it before any model runs.
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    attempts: int = Field(default=2, ge=1, le=5)  # tries of a transient failure (timeout, refused, 5xx)
    # A remote guard that cannot answer: "closed" refuses with 503 + retry-after; "open": the embedded guard judges.
    fail: Literal["closed", "open"] = "closed"
    # A remote guard judging alone (Llama Guard without a band, a /v1/moderations endpoint): the embedded rule layer's
    # deny list runs in front of it (a hit is refused without a round trip; Llama Guard has no jailbreak category).
    rules: bool = True
    # The embedded classifier's sentence reads (docs/safety.md): a request inside a long latest user turn (a pasted
    # document) is read alone where the ask head finds it phrased as one. Off by default: on the held-out sources they
    # catch 51 % of harmful asks pasted into long texts (18 % off) and refuse more long news (2.0 -> 3.9 % of long
    # benign texts) and 3 of 64 synthetic benchmark prompts. Environment: FLEETCHAT_SAFETY_SENTENCE_READS.
    sentence_reads: bool = Field(default=False, validation_alias="fleetchat_safety_sentence_reads")
    # The learned output check on streamed answers (the post-filter's third check, after PII and the output rules):
    # about 2 ms per read, one read per ~120 characters. Off: the post-filter runs the rules and PII alone (`make
    # bench` states the gateway's CPU per 1,000 relayed tokens either way). Environment: FLEETCHAT_SAFETY_OUTPUT_CHECK.
    output_check: bool = Field(default=True, validation_alias="fleetchat_safety_output_check")

    @field_validator("ignored_codes", mode="before")
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

    @field_serializer("ignored_codes")
    def _codes_in_order(self, codes: frozenset[str]) -> list[str]:
        return sorted(codes)


class GuardSettings(Section, GuardOptions):
    """The safety guard (`FLEETCHAT_SAFETY_GUARD`, `FLEETCHAT_SAFETY_GUARD_*`, docs/safety-guard.md), complete: a
    remote guard has its URL (the operator file may leave it to the deployment, which fills it in)."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_SAFETY_GUARD_")

    api_key: SecretStr | None = None
    # The guard is one of this fleet's own guard pools (deployed: the Modal app's Llama Guard server), so it takes the
    # worker credential like any worker; the Modal app sets it when it points the guard at its own server.
    own_pool: bool = False

    @model_validator(mode="after")
    def _guard_is_complete(self) -> GuardSettings:
        if self.kind != "embedded" and not self.url:
            raise ValueError(f"FLEETCHAT_SAFETY_GUARD_URL must be set for the {self.kind} guard")
        if self.band is not None:
            low, high = self.band
            if self.kind != "llama_guard":
                raise ValueError("FLEETCHAT_SAFETY_GUARD_BAND applies to the llama_guard guard only")
            if not 0.0 <= low < high <= 1.0:
                raise ValueError("FLEETCHAT_SAFETY_GUARD_BAND must be [low, high] with 0 <= low < high <= 1")
        return self


class JudgeOptions(BaseModel):
    """Which model judges, as the environment and the operator file's `judge` section share it."""

    pool: str = "flagship"  # "the flagship by default"
    model: str | None = None  # None: the judge pool's name (the model id its workers serve)


class JudgeSettings(Section, JudgeOptions):
    """The LLM judge (`FLEETCHAT_JUDGE_*`, functions/judging): any OpenAI-compatible endpoint. `url` is its base URL
    including /v1; None: the judge pool's own worker (no gateway in between: no billing, no safety pass)."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_JUDGE_")

    url: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=60.0, gt=0, le=600)  # per attempt
    attempts: int = Field(default=3, ge=1, le=10)  # tries of a transient failure (timeout, refused, 5xx, 429)


class ShadowJudgeSettings(Section):
    """The shadow judge (`FLEETCHAT_SHADOW_JUDGE_*`, docs/shadow-judge.md): this share of the answers of the two pools
    below is graded by the judge off the request path; 0 turns it off. Both pools are sampled so their rolling scores
    can be compared."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_SHADOW_JUDGE_")

    share: float = Field(default=0.05, ge=0.0, le=1.0)
    candidate_pool: str = "mini"
    reference_pool: str = "flagship"
    queue_size: int = Field(default=64, ge=1, le=10_000)  # full: new samples are dropped and counted
    workers: int = Field(default=2, ge=1, le=32)  # judge calls in flight at once
    calls_per_minute: float = Field(default=30.0, ge=1)  # the judge budget (token bucket, burst = 1 min)
    window: int = Field(default=200, ge=1, le=100_000)  # rolling mean over each pool's last N scores
    # Alert when reference minus candidate (mean overall score, 1-5 scale) exceeds this, with enough scores per pool.
    alert_delta: float = Field(default=0.5, gt=0.0, le=4.0)
    min_samples: int = Field(default=30, ge=1)


class FilesSettings(Section):
    """Files (`FLEETCHAT_FILES_*`): the ingestion lease, and how old an orphaned body must be before the retention job
    deletes it."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_FILES_")

    # How long a gateway's claim on ingesting a file lasts; renewed every third of it while the file ingests. A
    # replica that dies holds the file this long at most: another one takes it over at its next look (as often).
    ingestion_lease_s: float = Field(default=30.0, ge=0.5, le=3600.0)
    # A body in the object store with no file metadata (a crash between the put and the insert) is deleted by the
    # retention job once it is this old: younger, it may be an upload whose insert is a moment away.
    orphan_grace_s: float = Field(default=3600.0, ge=0.0)


class ImageSettings(Section):
    """Image input (`FLEETCHAT_IMAGES_*`, docs/api-parameters.md "Images"): what an `image_url` part may be."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_IMAGES_")

    # One image's bytes, decoded (OpenAI takes up to 20 MB; images are stored with their conversation's turn, so the
    # default is smaller). A request's images together may be `max_request_bytes`.
    max_bytes: int = Field(default=5 * 2**20, ge=1024)
    max_request_bytes: int = Field(default=20 * 2**20, ge=1024)
    # Either side, in pixels, and the pixel count (a decompression bomb is refused before it is decoded).
    max_side_px: int = Field(default=8192, ge=16)
    max_pixels: int = Field(default=36_000_000, ge=256)
    # An `https://` image is fetched by the gateway (never by a worker), from public addresses only, within this time.
    fetch_timeout_s: float = Field(default=10.0, gt=0.0, le=60.0)
    # Tests only: fetch from loopback and private addresses too (a local HTTP server stands for a public one).
    fetch_private_addresses: bool = False


class BatchSettings(Section):
    """Batches (`FLEETCHAT_BATCH_*`, docs/batches.md): how a runner holds a batch, looks for work, paces lines."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_BATCH_")

    # Each gateway runs batches in the background (and the deployed app's scheduled job, for when no gateway is up).
    run_in_gateway: bool = True
    # How long a runner's claim on a batch lasts, renewed every third of it; a runner that dies holds its batch this
    # long at most, then the next look of any runner takes it over and runs the lines without a result.
    lease_s: float = Field(default=30.0, ge=0.5, le=3600.0)
    poll_s: float = Field(default=5.0, ge=0.1, le=600.0)  # how often an idle runner looks for work
    concurrent_lines: int = Field(default=4, ge=1, le=256)  # lines of one batch in flight at once, per runner
    # A line whose answer was a 5xx is tried this many times in all before its error is kept (a 429 waits and is
    # tried again without counting, until the batch expires).
    line_attempts: int = Field(default=3, ge=1, le=10)
    max_lines: int = Field(default=50_000, ge=1, le=1_000_000)  # OpenAI's limit per input file


class RetrievalSettings(Section):
    """Retrieval (`FLEETCHAT_RETRIEVAL_*`): its latency budget, how many candidates each search returns, the fusion and
    re-rank constants, and how much of a prompt passages may take."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_RETRIEVAL_")

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
    # The re-rank stage: a re-rank pool (`/v1/rerank`'s model, shared/fleet/rerank_pools.py) that scores the fused
    # candidates, billed on the re-rank meter; None (the default, locally and deployed): the built-in re-rank (cosine
    # to the question and the fused rank, from the vectors the index already holds), which measured better on BEIR
    # than the pool's local scorer in this place, and plain RRF better than the published BM25 + cross-encoder
    # (docs/retrieval-engines.md, "Re-ranking").
    rerank_model: str | None = None
    # MMR trade-off between relevance to the question (1.0) and novelty against passages already chosen (0.0).
    mmr_lambda: float = Field(default=0.7, ge=0.0, le=1.0)
    # Passages never take more than this share of the pool's context window, whatever room the request leaves.
    max_context_share: float = Field(default=0.75, gt=0.0, le=1.0)


class VectorIndexSettings(Section):
    """The vector stores' search engine (`FLEETCHAT_VECTORS_*`, docs/files.md): LanceDB, one table per store, under the
    data dir locally and under the conversations bucket deployed (DynamoDB as its commit store)."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_VECTORS_")

    # Deployed: the tables' prefix in the conversations bucket, and the DynamoDB table Lance commits through (several
    # gateway containers write one store at once; plain S3 is safe for one writer only). One commit table per bucket:
    # Lance keys a commit by the table's path inside the bucket.
    prefix: str = Field(default="vectors", pattern=r"^[A-Za-z0-9_-]+$")
    # The conversation search index's tables (a table per tenant: the text of its stored messages), beside the vector
    # stores' under the data dir locally (`conversation-search/`) and under this prefix deployed, same commit table.
    conversation_search_prefix: str = Field(default="conversation-search", pattern=r"^[A-Za-z0-9_-]+$")
    commit_table: str = "fleetchat-vector-commits"
    # A store gets an approximate (IVF-HNSW) vector index from this many chunks on, built by the maintenance job; below
    # it, search is exact (a scan of the store's vectors). On SciFact's 11,504 MiniLM chunk vectors the index answered
    # in 3.8 ms p50 against 11.4 ms exact, recall@10 0.996 (docs/retrieval-engines.md); exact search grows with the
    # store, so 50,000 (the first default) left mid-sized stores slower than a million-chunk one.
    ann_min_rows: int = Field(default=10_000, ge=256)
    # Partitions an approximate search looks in, and how many times k candidates it re-scores exactly.
    ann_nprobes: int = Field(default=20, ge=1)
    ann_refine_factor: int = Field(default=4, ge=1)
    # How stale a gateway's view of a store may be (seconds): 0 checks for a newer version on every search (a file
    # another replica ingested is found at once), at one small read per search.
    read_consistency_s: float = Field(default=0.0, ge=0.0, le=3600.0)
    # Memory a gateway gives LanceDB for the stores' indexes (the vector and BM25 indexes it searches stay loaded). A
    # million-chunk store's IVF-HNSW index needs about 600 MB: with 256 MB a search there took 990 ms instead of 10 ms.
    index_cache_mb: int = Field(default=1024, ge=64)
    # Deleted chunks' bytes (a deleted file, an expired one) leave the disk or the bucket at the maintenance job's first
    # run after this grace: a search that started on the version before the delete can still finish.
    purge_grace_s: float = Field(default=300.0, ge=0.0)


class EvalSettings(Section):
    """The eval job (`FLEETCHAT_EVAL_*`): where reports go, which deployment and keys, the judge."""

    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_EVAL_")

    # Runs, reports, history, baselines and the eval tenants' key file; default: the data dir's `evals/`.
    reports_dir: Path | None = None
    # Deployed: reports go to this S3 bucket (under `s3_prefix`) instead of a directory.
    s3_bucket: str | None = None
    s3_prefix: str = "evals/"
    s3_endpoint_url: str | None = None  # another S3-compatible endpoint (moto in tests)
    # The deployment under test (gateway base URL, with or without /v1); default: the local stack's gateway.
    base_url: str | None = None
    # Bootstraps the eval tenants when their keys are missing; default locally: the data dir's admin key file.
    admin_key: SecretStr | None = None
    # The eval tenants' keys, when given (the scheduled job reads them from a Modal secret); else bootstrapped.
    free_key: SecretStr | None = None
    plus_key: SecretStr | None = None
    # The judge: any OpenAI-compatible endpoint (with /v1); default: the service's judge (FLEETCHAT_JUDGE_URL) if
    # set, else the deployment's own judge pool (the flagship) through its gateway with the plus eval key (locally
    # that is SmolLM2: its grades are noise, and reports say so). Model default: FLEETCHAT_JUDGE_MODEL / _POOL.
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_api_key: SecretStr | None = None
    # Per request, as long as the gateway waits on a worker: long answers on the CPU stack take minutes under load.
    request_timeout_s: float = Field(default=600.0, gt=0)
