"""The suite registry: names to lazy import strings, so listing suites imports none of them."""

from __future__ import annotations

import importlib
from typing import Any

from functions.offline.evals.suite import Suite

SUITES: dict[str, str] = {
    "deploy": "functions.offline.evals.suites.deploy_checks:DeployChecksSuite",
    "quality": "functions.offline.evals.suites.quality:QualitySuite",
    "multi_turn": "functions.offline.evals.suites.multi_turn:MultiTurnSuite",
    "refusal": "functions.offline.evals.suites.refusal:RefusalSuite",
    "latency": "functions.offline.evals.suites.latency:LatencySuite",
    "retrieval": "functions.offline.evals.suites.retrieval:RetrievalSuite",
}


def load_suite_class(name: str) -> type[Any]:
    """The suite class registered under `name` (KeyError: no such suite; ImportError: its module is missing)."""
    module_name, _, attr = SUITES[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)


def build_suite(name: str, **options: Any) -> Suite:
    """An instance of the suite `name`, constructed with keyword options only (e.g. `limit`)."""
    return load_suite_class(name)(**options)
