"""Settings of the eval job (`FLEETCHAT_EVAL_*`): where reports go, which deployment and keys, the judge."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.settings import Settings


class EvalSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="FLEETCHAT_EVAL_", env_file=".env", env_ignore_empty=True, extra="ignore"
    )

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


def reports_dir(eval_settings: EvalSettings, settings: Settings) -> Path:
    return eval_settings.reports_dir or settings.data_dir / "evals"


def default_base_url(eval_settings: EvalSettings, settings: Settings) -> str:
    return eval_settings.base_url or f"http://{settings.host}:{settings.port}"
