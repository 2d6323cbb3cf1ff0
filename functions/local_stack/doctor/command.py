"""The `fleetchat doctor` command: run the checks against this machine's settings, print them, exit 1 on a failure."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from functions.local_stack.doctor.results import GROUPS


def doctor(
    json_output: Annotated[
        bool, typer.Option("--json", help="One JSON object instead of lines (for machines).")
    ] = False,
    data_dir: Annotated[Path | None, typer.Option(help="The data dir to check (default: FLEETCHAT_DATA_DIR).")] = None,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds each network call may take.")] = 5.0,
    skip: Annotated[
        list[str] | None, typer.Option(help=f"A check group to leave out (repeatable): {', '.join(GROUPS)}.")
    ] = None,
) -> None:
    """Check the configuration, the stores, the Stripe key, every worker and the web build; one line per check."""
    from functions.local_stack.doctor.runner import diagnose, render
    from shared.settings import Settings

    unknown = sorted(set(skip or ()) - set(GROUPS))
    if unknown:
        raise typer.BadParameter(f"unknown group(s) {unknown}; choose from {', '.join(GROUPS)}", param_hint="--skip")
    overrides: dict[str, object] = {} if data_dir is None else {"data_dir": data_dir}
    groups = [group for group in GROUPS if group in (skip or ())]
    report = asyncio.run(diagnose(lambda: Settings(**overrides), timeout_s=timeout, skip=groups))
    if json_output:
        typer.echo(report.model_dump_json(indent=2))
    else:
        for line in render(report):
            typer.echo(line)
    if report.failed:
        raise typer.Exit(code=1)
