"""Runtime settings: one root (`Settings`) with a section per concern, each read from its own `FLEETCHAT_*` prefix.

    settings = Settings()                          # the environment and .env, read once
    settings.brownout.window_s                     # FLEETCHAT_BROWNOUT_WINDOW_S
    Settings(brownout={"window_s": 5})             # a given value wins over the environment

Modules: sections (the sections and their defaults), root (the root, its top-level fields and derived URLs).
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from shared.settings.root import Settings
from shared.settings.sections import (
    BatchSettings,
    BreakerSettings,
    BrownoutSettings,
    ControlStateSettings,
    EvalSettings,
    FilesSettings,
    GuardOptions,
    GuardSettings,
    IgnorableHazard,
    ImageSettings,
    JudgeOptions,
    JudgeSettings,
    MeterSettings,
    PoolSettings,
    QueueSettings,
    ResultCacheSettings,
    ResumeSettings,
    RetrievalSettings,
    Section,
    ShadowJudgeSettings,
    StripeSettings,
    TracingOptions,
    TracingSettings,
    UpstreamSettings,
    VectorIndexSettings,
    WorkerSettings,
)

__all__ = [
    "BatchSettings",
    "BreakerSettings",
    "BrownoutSettings",
    "ControlStateSettings",
    "EvalSettings",
    "FilesSettings",
    "GuardOptions",
    "GuardSettings",
    "IgnorableHazard",
    "ImageSettings",
    "JudgeOptions",
    "JudgeSettings",
    "MeterSettings",
    "PoolSettings",
    "QueueSettings",
    "ResultCacheSettings",
    "ResumeSettings",
    "RetrievalSettings",
    "Section",
    "Settings",
    "ShadowJudgeSettings",
    "StripeSettings",
    "TracingOptions",
    "TracingSettings",
    "UpstreamSettings",
    "VectorIndexSettings",
    "WorkerSettings",
    "setting_names",
]

_SECTIONS: dict[str, type[BaseSettings]] = {
    name: field.default_factory  # type: ignore[misc]
    for name, field in Settings.model_fields.items()
    if isinstance(field.default_factory, type) and issubclass(field.default_factory, Section)
}


def setting_names(exc: ValidationError) -> list[tuple[str, str]]:
    """(environment variable, message) for each error of building the settings root: a bad value from the
    environment (raised by a section, named by its class) or from an argument (located in the root)."""
    by_title = {cls.__name__: cls for cls in _SECTIONS.values()}
    named: list[tuple[str, str]] = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        section = by_title.get(exc.title)
        if section is None and loc and loc[0] in _SECTIONS:
            section, loc = _SECTIONS[loc[0]], loc[1:]
        if loc and loc[0].startswith("fleetchat_"):  # a field read under its own variable (an alias)
            variable = loc[0].upper()
        elif section is not None:
            variable = f"{section.model_config.get('env_prefix', '')}{(loc[0] if loc else '').upper()}"
        else:
            variable = f"{Settings.model_config.get('env_prefix', '')}{(loc[0] if loc else 'settings').upper()}"
        named.append((variable.rstrip("_"), error["msg"]))
    return named
