"""The operator file's settings-level sections (guard, judge, capacity, server tools, tracing, which pools run
locally) merged into `Settings`: a FLEETCHAT_* variable (or an explicit argument) still wins, so one secret can
override the file."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from shared.operator_config.document import OperatorConfig
from shared.operator_config.issues import ConfigError, ConfigIssue, Loc, dotted
from shared.settings import Section, Settings, setting_names

# Where a setting lives in the file when its place there differs from its place in Settings.
_FILE_PLACE: dict[Loc, Loc] = {
    ("guard", "api_key"): ("guard", "api_key_env"),
    ("pool", "capacity"): ("capacity",),
}
_IN_THE_FILE = ("guard", "judge", "server_tools", "pools", "tracing")


def settings_values(config: OperatorConfig) -> dict[str, Any]:
    """The Settings values a complete config sets: a section's as a dict of its fields."""
    values: dict[str, Any] = {}
    if config.guard is not None:
        guard = config.guard.model_dump(exclude={"api_key_env"})
        key = os.environ.get(config.guard.api_key_env) if config.guard.api_key_env else None
        values["guard"] = {**guard, **({"api_key": key} if key else {})}
    if config.judge is not None:
        values["judge"] = config.judge.model_dump()
    if config.capacity is not None:
        values["pool"] = {"capacity": config.capacity}
    if config.server_tools is not None:
        values["server_tools"] = config.server_tools
    if config.tracing is not None:
        values["tracing"] = config.tracing.model_dump(exclude_unset=True)
    # `fleetchat up` starts a worker for each chat pool the file defines (FLEETCHAT_POOLS still chooses, when set).
    values["pools"] = list(config.pools or {})
    return values


def configured_settings(settings: Settings, config: OperatorConfig) -> Settings:
    """`settings` with the file's values for every field its environment and arguments left unset (field by field
    within a section)."""
    merged: dict[str, Any] = {name: getattr(settings, name) for name in settings.model_fields_set}
    for name, fill in settings_values(config).items():
        current = getattr(settings, name)
        if isinstance(current, Section):
            given = {field: getattr(current, field) for field in current.model_fields_set}
            merged[name] = {**fill, **given}
        elif name not in settings.model_fields_set:
            merged[name] = fill
    try:
        return type(settings)(**merged)
    except ValidationError as exc:
        file = str(settings.config_file)
        issues = []
        for error, (variable, reason) in zip(exc.errors(), setting_names(exc), strict=True):
            loc = tuple(str(part) for part in error["loc"])
            place = _FILE_PLACE.get(loc[:2], loc if loc and loc[0] in _IN_THE_FILE else (variable,))
            issues.append(ConfigIssue(file=file, line=None, field=dotted(place), reason=reason))
        raise ConfigError(issues) from None
