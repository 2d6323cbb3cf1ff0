"""The operator file's settings-level sections (guard, judge, capacity, server tools, which pools run locally) merged
into `Settings`: a FLEETCHAT_* variable (or an explicit argument) still wins, so one secret can override the file."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from shared.operator_config.document import OperatorConfig
from shared.operator_config.issues import ConfigError, ConfigIssue, Loc, dotted
from shared.settings import Settings

# Where each setting lives in the file, for an error the merged settings raise.
_FILE_PLACE: dict[str, Loc] = {
    "safety_guard": ("guard", "kind"),
    "safety_guard_url": ("guard", "url"),
    "safety_guard_model": ("guard", "model"),
    "safety_guard_api_key": ("guard", "api_key_env"),
    "safety_guard_band": ("guard", "band"),
    "safety_guard_ignored_codes": ("guard", "ignored_codes"),
    "safety_guard_timeout_s": ("guard", "timeout_s"),
    "safety_guard_attempts": ("guard", "attempts"),
    "safety_guard_fail": ("guard", "fail"),
    "safety_guard_rules": ("guard", "rules"),
    "safety_sentence_reads": ("guard", "sentence_reads"),
    "judge_pool": ("judge", "pool"),
    "judge_model": ("judge", "model"),
    "pool_capacity": ("capacity",),
    "server_tools": ("server_tools",),
    "pools": ("pools",),
}


def settings_values(config: OperatorConfig) -> dict[str, Any]:
    """The Settings fields a complete config sets."""
    guard = config.guard
    values: dict[str, Any] = {}
    if guard is not None:
        key = os.environ.get(guard.api_key_env) if guard.api_key_env else None
        values.update(
            safety_guard=guard.kind,
            safety_guard_url=guard.url,
            safety_guard_model=guard.model,
            safety_guard_band=guard.band,
            safety_guard_ignored_codes=frozenset(guard.ignored_codes),
            safety_guard_timeout_s=guard.timeout_s,
            safety_guard_attempts=guard.attempts,
            safety_guard_fail=guard.fail,
            safety_guard_rules=guard.rules,
            safety_sentence_reads=guard.sentence_reads,
            **({"safety_guard_api_key": key} if key else {}),
        )
    if config.judge is not None:
        values.update(judge_pool=config.judge.pool, judge_model=config.judge.model)
    if config.capacity is not None:
        values["pool_capacity"] = config.capacity
    if config.server_tools is not None:
        values["server_tools"] = config.server_tools
    # `fleetchat up` starts a worker for each chat pool the file defines (FLEETCHAT_POOLS still chooses, when set).
    values["pools"] = list(config.pools or {})
    return values


def configured_settings(settings: Settings, config: OperatorConfig) -> Settings:
    """`settings` with the file's values for every field its environment and arguments left unset."""
    explicit = {name: getattr(settings, name) for name in settings.model_fields_set}
    fill = {name: value for name, value in settings_values(config).items() if name not in explicit}
    try:
        return type(settings)(**explicit, **fill)
    except ValidationError as exc:
        file = str(settings.config_file)
        issues = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            place = _FILE_PLACE.get(field, ("guard",) if not field else (f"FLEETCHAT_{field.upper()}",))
            issues.append(ConfigIssue(file=file, line=None, field=dotted(place), reason=error["msg"]))
        raise ConfigError(issues) from None
