"""A complete operator config file for tests to edit: the built-in tables (shared/fleet/builtin.yaml, comments and
all) followed by the settings-level sections as `fleetchat config show` prints their defaults."""

from __future__ import annotations

import yaml

from shared.fleet.tables import BUILTIN_FILE
from shared.operator_config import builtin_config

SETTINGS_SECTIONS = ("guard", "judge", "capacity", "server_tools")


def shipped_text() -> str:
    sections = builtin_config().model_dump(mode="json", include=set(SETTINGS_SECTIONS))
    ordered = {name: sections[name] for name in SETTINGS_SECTIONS}
    return BUILTIN_FILE.read_text(encoding="utf-8") + "\n" + yaml.safe_dump(ordered, sort_keys=False)
