"""The operator config file (docs/configuration.md): one YAML file for pools, tiers, the guard and the judge, read by
`fleetchat up`, the gateway and the Modal app; shared/fleet/builtin.yaml's tables and the settings models are its
defaults.

    config = load_config(Path("my-fleet.yaml"))  # ConfigError: file, line, field and reason per problem
    settings = configure(Settings())                      # FLEETCHAT_CONFIG_FILE installed; Settings completed

Modules: yaml_source (YAML + line marks), document (the sections' models and the checks between them), loading (file
-> validated document), tables (built-ins, install into the live tables), settings_merge (file -> Settings), issues.
"""

from __future__ import annotations

import os
from pathlib import Path

from shared.operator_config.document import GuardConfig, JudgeConfig, OperatorConfig
from shared.operator_config.issues import ConfigError, ConfigIssue
from shared.operator_config.loading import load_config
from shared.operator_config.settings_merge import configured_settings
from shared.operator_config.tables import builtin_config, current_config, install, install_limits
from shared.operator_config.yaml_source import read_yaml
from shared.settings import Settings

CONFIG_ENV = "FLEETCHAT_CONFIG_FILE"

__all__ = [
    "CONFIG_ENV",
    "ConfigError",
    "ConfigIssue",
    "GuardConfig",
    "JudgeConfig",
    "OperatorConfig",
    "builtin_config",
    "configure",
    "current_config",
    "install",
    "install_from_environment",
    "install_limits",
    "load_config",
]


def configure(settings: Settings) -> Settings:
    """Install `settings.config_file` (when set) into the live tables and return the settings completed from it;
    ConfigError (file, line, field, reason) when the file cannot be used, before anything is installed."""
    if settings.config_file is None:
        return settings
    config = load_config(settings.config_file)
    try:
        merged = configured_settings(settings, config)
    except ConfigError as exc:
        _, lines = read_yaml(settings.config_file)
        for issue in exc.issues:
            issue.line = lines.get(tuple(issue.field.split(".")))
        raise
    install(config)
    return merged


def install_from_environment() -> OperatorConfig | None:
    """For processes that read only the tables (a local worker, the Modal app at import): install the file
    FLEETCHAT_CONFIG_FILE names, if any. API keys are not checked here: these processes never call an external pool."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    config = load_config(Path(path), check_secrets=False)
    install(config)
    return config
