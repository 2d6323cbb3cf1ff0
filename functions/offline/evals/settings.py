"""Where the eval job's reports go and which deployment it tests, from its settings section (`Settings.eval`,
`FLEETCHAT_EVAL_*`) and the root's defaults."""

from __future__ import annotations

from pathlib import Path

from shared.settings import EvalSettings, Settings


def reports_dir(eval_settings: EvalSettings, settings: Settings) -> Path:
    return eval_settings.reports_dir or settings.data_dir / "evals"


def default_base_url(eval_settings: EvalSettings, settings: Settings) -> str:
    return eval_settings.base_url or f"http://{settings.host}:{settings.port}"
