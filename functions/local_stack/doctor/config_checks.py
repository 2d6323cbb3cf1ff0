"""Configuration checks: the settings validate, and every pool they, the tier table and the canaries name exists."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import ValidationError

from functions.local_stack.doctor.results import CheckResult, fail, ok, warn
from shared.fleet.tables import tables
from shared.operator_config import ConfigError, configure
from shared.settings import Settings


def load_settings(make: Callable[[], Settings]) -> tuple[Settings | None, list[CheckResult]]:
    """The settings `make` builds (from FLEETCHAT_* and .env), or None with the reasons they do not validate."""
    try:
        settings = make()
    except ValidationError as exc:
        results = []
        for error in exc.errors():
            field = ".".join(str(part) for part in error["loc"]) or "settings"
            env = f"FLEETCHAT_{field.split('.')[0].upper()}" if error["loc"] else "the FLEETCHAT_* settings"
            results.append(fail("config", "settings", f"{field}: {error['msg']}", f"correct {env} (env or .env)"))
        return None, results
    results = [ok("config", "settings", f"valid ({settings.environment})")]
    if settings.config_file is not None:  # the operator config file (docs/configuration.md), as the gateway reads it
        try:
            settings = configure(settings)
        except ConfigError as exc:
            hint = f"fix it (fleetchat config check {settings.config_file})"
            return settings, results + [fail("config", "config file", str(issue), hint) for issue in exc.issues]
        results.append(ok("config", "config file", f"{settings.config_file} valid"))
    return settings, results


def check_pools(settings: Settings) -> list[CheckResult]:
    results: list[CheckResult] = []
    unknown = [name for name in settings.pools if name not in tables().pools]
    if unknown:
        hint = f"FLEETCHAT_POOLS may name only {sorted(tables().pools)} (shared/fleet/pools.py)"
        results.append(fail("config", "pools", f"unknown pool(s) {unknown}", hint))
    else:
        results.append(ok("config", "pools", f"{', '.join(settings.pools)} defined in shared/fleet/pools.py"))
    urls = settings.worker_urls
    stray = sorted(name for name in urls if name not in tables().pools)
    if stray:
        results.append(
            fail("config", "worker URLs", f"for unknown pool(s) {stray}", "key FLEETCHAT_WORKER_URLS by pool")
        )
    empty = sorted(name for name, replicas in urls.items() if not replicas)
    if empty:
        results.append(fail("config", "worker URLs", f"no URL for {empty}", "give each pool at least one worker URL"))
    bad_canaries = sorted(name for name in settings.canaries if name not in tables().pools)
    if bad_canaries:
        results.append(fail("config", "canaries", f"for unknown pool(s) {bad_canaries}", "key canaries by pool"))
    judge_pools = tables().pools.keys() | tables().external_pools.keys()  # a hosted judge too
    named = (
        ("FLEETCHAT_JUDGE_POOL", settings.judge.pool, judge_pools, settings.judge.url is None),
        ("FLEETCHAT_SHADOW_JUDGE_CANDIDATE_POOL", settings.shadow_judge.candidate_pool, tables().pools.keys(), True),
        ("FLEETCHAT_SHADOW_JUDGE_REFERENCE_POOL", settings.shadow_judge.reference_pool, tables().pools.keys(), True),
    )
    for variable, value, known, routed in named:
        if value not in known and routed:
            field = variable.removeprefix("FLEETCHAT_").lower()
            results.append(fail("config", field, f"{value!r} is not a pool", f"set {variable}"))
    return results


def _deployed_only(settings: Settings, name: str) -> bool:
    """A pool with no local model (served deployed only) is not missed by a local stack."""
    pool = tables().pools.get(name)
    return settings.environment == "local" and pool is not None and pool.local is None


def check_tiers(settings: Settings) -> list[CheckResult]:
    """Every tier's pools exist and are served: a tier whose default pool has no worker would answer 503s only."""
    served = set(settings.resolved_worker_urls()) | set(
        tables().external_pools
    )  # hosted endpoints: served where they are
    results: list[CheckResult] = []
    for tier, policy in tables().tiers.items():
        name = f"tier {tier.value}"
        unknown = [pool for pool in policy.pools if pool not in tables().pools and pool not in tables().external_pools]
        if unknown or policy.default_pool not in policy.pools:
            detail = (
                f"names unknown pool(s) {unknown}" if unknown else f"default {policy.default_pool} not in its pools"
            )
            results.append(fail("config", name, detail, "correct the tier in the config file (docs/configuration.md)"))
        elif policy.default_pool not in served:
            hint = f"add {policy.default_pool} to FLEETCHAT_POOLS (local) or FLEETCHAT_WORKER_URLS (deployed)"
            results.append(fail("config", name, f"default pool {policy.default_pool} has no workers", hint))
        elif missing := [pool for pool in policy.pools if pool not in served and not _deployed_only(settings, pool)]:
            hint = "serve them too, or overflow and brownout have nowhere to go"
            results.append(warn("config", name, f"pool(s) {missing} have no workers", hint))
        else:
            results.append(ok("config", name, f"pools {', '.join(policy.pools)} (default {policy.default_pool})"))
    return results


def check_config(settings: Settings) -> list[CheckResult]:
    return check_pools(settings) + check_tiers(settings)
