"""From settings and CLI options to a RunConfig: the deployment's URL, the eval keys (bootstrapped when missing)
and the judge endpoint."""

from __future__ import annotations

from pathlib import Path

from functions.accounts.private_files import read_private
from functions.judging.client import JudgeEndpoint
from functions.offline.evals.runner import RunConfig
from functions.offline.evals.settings import default_base_url, reports_dir
from functions.offline.evals.tenants import KEYS_FILE, ensure_eval_keys
from shared.fleet.tiers import Tier
from shared.settings import EvalSettings, Settings


def eval_judge_endpoint(
    eval_settings: EvalSettings, base_url: str, keys: dict[Tier, str], settings: Settings | None = None
) -> JudgeEndpoint:
    """The eval job's judge: FLEETCHAT_EVAL_JUDGE_BASE_URL, else the service's judge endpoint (FLEETCHAT_JUDGE_URL)
    when one is set, else the deployment's own judge pool (the flagship) through its gateway with the plus eval key."""
    settings = settings or Settings()
    model = eval_settings.judge_model or settings.judge.model or settings.judge.pool
    if eval_settings.judge_base_url:
        url, secret = eval_settings.judge_base_url, eval_settings.judge_api_key
    elif settings.judge.url:
        url, secret = settings.judge.url, eval_settings.judge_api_key or settings.judge.api_key
    else:
        url, secret = f"{base_url}/v1", eval_settings.judge_api_key
    api_key = secret.get_secret_value() if secret else keys.get(Tier.PLUS)
    return JudgeEndpoint(
        base_url=url, model=model, api_key=api_key, timeout_s=settings.judge.timeout_s, attempts=settings.judge.attempts
    )


def resolve_keys(
    eval_settings: EvalSettings, settings: Settings, *, base_url: str | None, out_dir: Path | None = None
) -> tuple[str, dict[Tier, str]]:
    """(the gateway URL, a working eval key per tier): given keys, the keys file, or new eval tenants."""
    url = (base_url or default_base_url(eval_settings, settings)).rstrip("/").removesuffix("/v1")
    given = {
        tier: secret.get_secret_value()
        for tier, secret in ((Tier.FREE, eval_settings.free_key), (Tier.PLUS, eval_settings.plus_key))
        if secret is not None
    }
    admin_key = (
        eval_settings.admin_key.get_secret_value()
        if eval_settings.admin_key
        else read_private(settings.local_admin_key_path)
    )
    keys_dir = out_dir or reports_dir(eval_settings, settings)
    keys = ensure_eval_keys(
        url, keys_dir / KEYS_FILE, given=given, admin_key=admin_key, timeout_s=eval_settings.request_timeout_s
    )
    return url, keys


def resolve_run_config(
    eval_settings: EvalSettings,
    settings: Settings,
    *,
    base_url: str | None,
    suites: list[str],
    limit: int | None,
    out_dir: Path | None = None,
    local: bool | None = None,
) -> RunConfig:
    url, keys = resolve_keys(eval_settings, settings, base_url=base_url, out_dir=out_dir)
    return RunConfig(
        base_url=url,
        keys=keys,
        suites=suites,
        limit=limit,
        local=local,
        judge=eval_judge_endpoint(eval_settings, url, keys, settings),
        request_timeout_s=eval_settings.request_timeout_s,
    )
