"""The settings root: every runtime setting, read once from the environment (`FLEETCHAT_*`) or a `.env` file when
it is built (by `create_app`'s caller, the CLI or a job's entry point), in sections with their own prefix."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.fleet.canaries import CanarySpec
from shared.fleet.tiers import Tier
from shared.server_tool_settings import ServerToolSettings
from shared.settings.sections import (
    BatchSettings,
    BreakerSettings,
    BrownoutSettings,
    ControlStateSettings,
    EvalSettings,
    FilesSettings,
    GuardSettings,
    ImageSettings,
    JudgeSettings,
    MeterSettings,
    PoolSettings,
    QueueSettings,
    ResultCacheSettings,
    ResumeSettings,
    RetrievalSettings,
    ShadowJudgeSettings,
    StripeSettings,
    TracingSettings,
    UpstreamSettings,
    VectorIndexSettings,
    WorkerSettings,
)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLEETCHAT_", env_file=".env", env_ignore_empty=True, extra="ignore")

    environment: Literal["local", "deployed"] = "local"
    data_dir: Path = Path(".fleetchat")
    host: str = "127.0.0.1"
    port: int = 8000
    replicas_per_pool: int = Field(default=1, ge=1, le=8)
    # `fleetchat up` with more than one gateway runs them as processes behind HAProxy on `port`
    # (functions/local_stack/balancer.py); they listen from `gateway_base_port` (None: the port after `port`).
    gateways: int = Field(default=1, ge=1, le=16)
    gateway_base_port: int | None = None
    balancer_binary: str = "haproxy"
    pools: list[str] = ["mini", "flagship"]
    # Deployed: pool name -> list of worker base URLs (one Modal Server URL per pool). Empty means local workers.
    worker_urls: dict[str, list[str]] = {}
    # Embedding pools (shared/fleet/embedding_pools.py) `fleetchat up` serves, one worker each on the ports after the
    # chat workers'; [] serves none. Deployed: `embedding_worker_urls`, pool name -> base URLs (the Modal embedding
    # server).
    embedding_pools: list[str] = ["text-embedding-minilm"]
    embedding_worker_urls: dict[str, list[str]] = {}
    # Re-rank pools (shared/fleet/rerank_pools.py) the gateway serves at /v1/rerank. Locally each is served by its
    # embedding pool's worker (the fused rank); deployed: `rerank_worker_urls`, pool name -> base URLs (the Modal
    # cross-encoder server).
    rerank_pools: list[str] = ["rerank-minilm"]
    rerank_worker_urls: dict[str, list[str]] = {}
    # Tests only: the command `fleetchat up` runs for each worker replica, with {python}, {pool} and {port} filled in
    # (a scripted worker where the model is not the point). None: `fleetchat worker` with the real engine.
    local_worker_command: list[str] | None = None
    local_tenant_tier: Tier = Tier.PLUS
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    # The built web chat (`npm run build` in web/), served at `/`; the repo's web/dist unless set.
    web_dist_dir: Path = Path(__file__).resolve().parents[2] / "web" / "dist"
    # Canary model versions by pool (docs/canary.md): a weight of the traffic goes to other replicas serving another
    # version; conversations stick to one version; an erring canary is rolled back until an operator resets it.
    canaries: dict[str, CanarySpec] = {}
    # How many times one answer may be continued on another replica after its replica died mid-stream.
    max_continuations: int = Field(default=2, ge=0, le=10)
    # Tiers whose requests go to the tier's next pool (announced) when theirs cannot start them within the TTFT SLO.
    overflow_tiers: list[Tier] = [Tier.PLUS]
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
    # The operator config file (docs/configuration.md): pools, tiers, guard, judge; None: the built-in tables. The
    # gateway reloads its tiers (limits, SLOs, ...) when the file changes; a FLEETCHAT_* variable still wins over it.
    config_file: Path | None = None
    # Server-side tools (docs/server-tools.md): timeouts, sandbox limits, quotas, breakers, rounds (JSON in
    # FLEETCHAT_SERVER_TOOLS).
    server_tools: ServerToolSettings = ServerToolSettings()

    # Sections, each read from its own prefix (shared/settings/sections.py) when this root is built.
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    resume: ResumeSettings = Field(default_factory=ResumeSettings)
    control_state: ControlStateSettings = Field(default_factory=ControlStateSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    result_cache: ResultCacheSettings = Field(default_factory=ResultCacheSettings)
    pool: PoolSettings = Field(default_factory=PoolSettings)
    queue: QueueSettings = Field(default_factory=QueueSettings)
    brownout: BrownoutSettings = Field(default_factory=BrownoutSettings)
    guard: GuardSettings = Field(default_factory=GuardSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    shadow_judge: ShadowJudgeSettings = Field(default_factory=ShadowJudgeSettings)
    stripe: StripeSettings = Field(default_factory=StripeSettings)
    meter: MeterSettings = Field(default_factory=MeterSettings)
    files: FilesSettings = Field(default_factory=FilesSettings)
    images: ImageSettings = Field(default_factory=ImageSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    vectors: VectorIndexSettings = Field(default_factory=VectorIndexSettings)
    eval: EvalSettings = Field(default_factory=EvalSettings)

    @model_validator(mode="after")
    def _deployed_needs_workers(self) -> Settings:
        if self.environment == "deployed" and not self.worker_urls:
            raise ValueError("FLEETCHAT_WORKER_URLS must name the worker URLs when deployed")
        if self.environment == "deployed" and self.session_secret is None:
            raise ValueError("FLEETCHAT_SESSION_SECRET (32+ characters) must be set when deployed")
        return self

    @field_validator("embedding_pools", "embedding_worker_urls", "rerank_pools", "rerank_worker_urls", mode="after")
    @classmethod
    def _known_encoder_pools(cls, value: Any, info: ValidationInfo) -> Any:
        """Only pools the tables define (shared/fleet/builtin.yaml or the operator file): a typo would crash-loop its
        worker, or route nowhere."""
        from shared.fleet.tables import tables

        embedding = info.field_name is not None and info.field_name.startswith("embedding")
        known = tables().embedding_pools if embedding else tables().rerank_pools
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(
                f"unknown {'embedding' if embedding else 're-rank'} pools {unknown}; known: {sorted(known)}"
            )
        return value

    @model_validator(mode="after")
    def _retrieval_reranks_with_a_served_pool(self) -> Settings:
        model = self.retrieval.rerank_model
        if model is not None and model not in self.rerank_pools:
            raise ValueError(
                f"FLEETCHAT_RETRIEVAL_RERANK_MODEL {model!r} is not one of the served re-rank pools {self.rerank_pools}"
            )
        return self

    @property
    def db_path(self) -> Path:
        return self.data_dir / "fleetchat.db"

    @property
    def control_db_path(self) -> Path:
        """The embedded shared control state (shared/storage/sqlite/control_state.py)."""
        return self.data_dir / "control.db"

    @property
    def local_key_path(self) -> Path:
        return self.data_dir / "local_api_key"

    @property
    def local_admin_key_path(self) -> Path:
        return self.data_dir / "admin_api_key"

    @property
    def worker_key_path(self) -> Path:
        """The local stack's worker credential (functions/local_stack/worker_key.py)."""
        return self.data_dir / "worker_api_key"

    def local_gateway_ports(self) -> list[int]:
        """The ports of the gateway processes behind the local balancer (none with one gateway: it has `port`)."""
        if self.gateways == 1:
            return []
        first = self.gateway_base_port if self.gateway_base_port is not None else self.port + 1
        return list(range(first, first + self.gateways))

    def local_worker_urls(self) -> dict[str, list[str]]:
        """The loopback URLs `fleetchat up` starts its workers on, pool by pool."""
        urls: dict[str, list[str]] = {}
        port = self.worker.base_port
        for pool in self.pools:
            urls[pool] = []
            for _ in range(self.replicas_per_pool):
                urls[pool].append(f"http://127.0.0.1:{port}")
                port += 1
        return urls

    def local_embedding_worker_urls(self) -> dict[str, list[str]]:
        """The loopback URLs of the local embedding workers: one per embedding pool, after the chat workers' ports."""
        port = self.worker.base_port + len(self.pools) * self.replicas_per_pool
        return {pool: [f"http://127.0.0.1:{port + i}"] for i, pool in enumerate(self.embedding_pools)}

    def resolved_embedding_worker_urls(self) -> dict[str, list[str]]:
        if self.environment == "deployed" or self.embedding_worker_urls:
            return self.embedding_worker_urls
        return self.local_embedding_worker_urls()

    def local_rerank_worker_urls(self, embedding: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
        """The embedding workers serving the re-rank pools locally (`embedding`: those URLs, default the local
        stack's); none for a pool whose embedding pool is not served."""
        from shared.fleet.tables import tables

        embedding = self.local_embedding_worker_urls() if embedding is None else embedding
        pools = {name: tables().rerank_pools[name].local.embedding_pool for name in self.rerank_pools}
        return {name: embedding[local] for name, local in pools.items() if local in embedding}

    def resolved_rerank_worker_urls(self) -> dict[str, list[str]]:
        if self.environment == "deployed" or self.rerank_worker_urls:
            return self.rerank_worker_urls
        return self.local_rerank_worker_urls(self.resolved_embedding_worker_urls())

    def resolved_worker_urls(self) -> dict[str, list[str]]:
        return self.worker_urls or self.local_worker_urls()

    def own_worker_urls(self) -> list[str]:
        """Every URL of this fleet's own workers the gateway calls: chat pools, canaries, embedding pools and, when it
        is one of ours, the guard. These take the worker credential (shared/wire/worker_auth.py); nothing else does."""
        urls = [url for replicas in self.resolved_worker_urls().values() for url in replicas]
        urls += [url for canary in self.canaries.values() for url in canary.worker_urls]
        urls += [url for replicas in self.resolved_embedding_worker_urls().values() for url in replicas]
        urls += [url for replicas in self.resolved_rerank_worker_urls().values() for url in replicas if url not in urls]
        if self.guard.own_pool and self.guard.url:
            urls.append(self.guard.url)
        return urls
