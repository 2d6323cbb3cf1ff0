"""Load an operator config file: YAML with line marks, validated by the project's pydantic models with unknown keys
refused, then checked across sections against the built-in tables it leaves in place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from shared.operator_config.document import OperatorConfig
from shared.operator_config.issues import ConfigError, ConfigIssue, Loc, issue_at
from shared.operator_config.tables import resolve
from shared.operator_config.yaml_source import read_yaml


def load_config(path: Path, *, check_secrets: bool = True) -> OperatorConfig:
    """The complete config `path` describes (its sections over the built-in ones), or ConfigError naming each problem.

    `check_secrets`: an external pool's or the guard's `api_key_env` must name a variable set in this environment
    (the start and `fleetchat config check` do; the Modal deploy step, which has no secrets, does not)."""
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError([ConfigIssue(file=str(path), line=1, field="", reason="must be a mapping of sections")])
    try:
        document = OperatorConfig.model_validate(data, extra="forbid")  # an unknown key is a mistake, not a comment
    except ValidationError as exc:
        raise ConfigError([issue_at(path, _loc(error), lines, _reason(error)) for error in exc.errors()]) from None
    config = resolve(document)
    problems = config.reference_problems()
    if check_secrets:
        problems += _missing_secrets(config)
    if problems:
        raise ConfigError([_reference_issue(path, loc, lines, reason) for loc, reason in problems])
    return config


def _reference_issue(path: Path, loc: Loc, lines: dict[Loc, int], reason: str) -> ConfigIssue:
    """A problem between sections; one in an entry the file does not have is in a built-in default (no line)."""
    if loc[:2] not in lines:
        return ConfigIssue(file=str(path), line=None, field=".".join(map(str, loc)), reason=reason)
    return issue_at(path, loc, lines, reason)


def _loc(error: ErrorDetails) -> Loc:
    # Drop pydantic's markers ("[key]" for a bad dict key, a union member's tag): not places in the file.
    return tuple(part for part in error["loc"] if not (isinstance(part, str) and part.startswith("[")))


def _reason(error: ErrorDetails) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key (not a field of this section; check its spelling against docs/configuration.md)"
    if error["type"] == "missing":
        return "required field missing"
    return f"{error['msg']} (got {_shown(error.get('input'))})"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _missing_secrets(config: OperatorConfig) -> list[tuple[Loc, str]]:
    import os

    named: list[tuple[Loc, str | None]] = [
        (("external_pools", name, "external", "api_key_env"), pool.external.api_key_env)
        for name, pool in (config.external_pools or {}).items()
    ]
    if config.guard is not None:
        named.append((("guard", "api_key_env"), config.guard.api_key_env))
    return [
        (loc, f"the environment variable {env} is not set (put the key in it, or in the Modal secret)")
        for loc, env in named
        if env and not os.environ.get(env)
    ]
