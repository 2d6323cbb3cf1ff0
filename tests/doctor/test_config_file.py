"""`fleetchat doctor` checks the operator config file as the gateway reads it (issue 24, item 6's config check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from functions.local_stack.doctor.config_checks import check_tiers, load_settings
from functions.local_stack.doctor.results import Status
from shared.fleet.tables import BUILTIN_FILE
from shared.operator_config import builtin_config, install
from shared.settings import Settings
from tests.support.operator_file import shipped_text

SHIPPED = BUILTIN_FILE  # the built-in tables; shipped_text() adds the settings-level sections


def test_a_bad_file_fails_with_its_place(tmp_path: Path) -> None:
    bad = tmp_path / "fleetchat.yaml"
    bad.write_text(shipped_text().replace("default_pool: mini", "default_pool: flagship", 1))
    settings, results = load_settings(lambda: Settings(config_file=bad, data_dir=tmp_path))
    assert settings is not None
    [failed] = [r for r in results if r.status is Status.FAIL]
    line = next(i for i, text in enumerate(bad.read_text().splitlines(), 1) if "default_pool: flagship" in text)
    assert failed.name == "config file"
    assert failed.detail.startswith(f"{bad}:{line}: tiers.free.default_pool: 'flagship' is not one of")


def test_a_good_file_is_installed_and_its_hosted_pool_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCTOR_HOSTED_KEY", "sk-x")
    hosted = (
        "external_pools:\n  hosted:\n    description: d\n"
        "    external: {base_url: 'https://h.example/v1', model: m, api_key_env: DOCTOR_HOSTED_KEY}\n"
        "    max_model_len: 4096\n    price: {prompt_usd_per_mtok: 1, completion_usd_per_mtok: 1}\n"
    )
    text = shipped_text().replace("external_pools: {}\n", hosted)
    good = tmp_path / "fleetchat.yaml"
    good.write_text(
        text.replace("pools: [mini]\n    default_pool: mini", "pools: [hosted, mini]\n    default_pool: hosted")
    )
    try:
        settings, results = load_settings(
            lambda: Settings(config_file=good, data_dir=tmp_path, worker_urls={"mini": ["http://127.0.0.1:9"]})
        )
        assert settings is not None and all(r.status is Status.OK for r in results), results
        free = next(r for r in check_tiers(settings) if r.name == "tier free")
        assert free.status is Status.OK, free
    finally:
        install(builtin_config())
