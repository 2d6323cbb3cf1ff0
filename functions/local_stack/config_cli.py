"""`fleetchat config check FILE` and `fleetchat config show`: the operator config file from the command line
(docs/configuration.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console

from shared.operator_config import (
    ConfigError,
    GuardConfig,
    JudgeConfig,
    OperatorConfig,
    builtin_config,
    configure,
    load_config,
)
from shared.settings import GuardOptions, JudgeOptions, Settings

app = typer.Typer(help="The operator config file: check one, show the effective values.", no_args_is_help=True)
console = Console(stderr=True)


def configured_or_exit(settings: Settings) -> Settings:
    """`configure(settings)` for a command starting the service: a bad file prints its problems and exits 1."""
    try:
        return configure(settings)
    except ConfigError as exc:
        _print_issues(exc, f"refused {settings.config_file}")
        raise SystemExit(1) from None


@app.command()
def check(file: Annotated[Path, typer.Argument(help="The YAML file to check.")]) -> None:
    """Check FILE as the service does at start (API key variables included): each problem as FILE:LINE: field:
    reason; exit 1 when there is any."""
    try:
        config = load_config(file)
        configure(_settings(file))  # the settings it sets must validate too (e.g. a guard without its URL)
    except ConfigError as exc:
        _print_issues(exc, f"{file}: {len(exc.issues)} problem(s)")
        raise typer.Exit(code=1) from None
    typer.echo(
        f"{file}: OK ({len(config.pools or {})} chat pools, {len(config.external_pools or {})} external, "
        f"{len(config.guard_pools or {})} guard, {len(config.embedding_pools or {})} embedding; "
        f"tiers {', '.join(t.value for t in config.tiers or {})}; guard {config.guard.kind if config.guard else '-'})"
    )


@app.command()
def show(
    file: Annotated[
        Path | None, typer.Option("--file", help="The config file; default: FLEETCHAT_CONFIG_FILE, else built-in.")
    ] = None,
    output: Annotated[Literal["yaml", "json"], typer.Option("--format", help="yaml (a valid config) or json.")] = (
        "yaml"
    ),
) -> None:
    """Print the effective config: the file's sections over the built-in ones, FLEETCHAT_* variables applied."""
    try:
        settings = configure(_settings(file))
        config = load_config(settings.config_file) if settings.config_file else builtin_config()
    except ConfigError as exc:
        _print_issues(exc, "the config does not load")
        raise typer.Exit(code=1) from None
    data = effective(config, settings).model_dump(mode="json", exclude_none=False)
    typer.echo(json.dumps(data, indent=2) if output == "json" else yaml.safe_dump(data, sort_keys=False), nl=False)


def effective(config: OperatorConfig, settings: Settings) -> OperatorConfig:
    """The document with its settings-level sections as `settings` has them (environment overrides included)."""
    options = settings.guard.model_dump(include=set(GuardOptions.model_fields))
    guard = GuardConfig(**options, api_key_env=config.guard.api_key_env if config.guard else None)
    judge = JudgeConfig(**settings.judge.model_dump(include=set(JudgeOptions.model_fields)))
    return config.model_copy(
        update={
            "guard": guard,
            "judge": judge,
            "capacity": dict(settings.pool.capacity),
            "server_tools": settings.server_tools,
        }
    )


def _settings(file: Path | None) -> Settings:
    try:
        return Settings(config_file=file) if file is not None else Settings()
    except ValidationError as exc:
        for error in exc.errors():
            console.print(f"FLEETCHAT_{'.'.join(map(str, error['loc'])).upper()}: {error['msg']}")
        raise typer.Exit(code=1) from None


def _print_issues(exc: ConfigError, title: str) -> None:
    console.print(f"[bold red]{title}[/]")
    for issue in exc.issues:
        console.print(str(issue), markup=False, highlight=False, soft_wrap=True)  # one line each: grep-able
