"""A description of the machine the benchmark ran on (without importing heavy packages)."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

PACKAGES = ("torch", "transformers", "openai", "vllm")


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    cpus = os.cpu_count()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    return {
        "cpu_count": cpus,
        "usable_cpus": affinity,
        "processor": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        **{name: package_version(name) for name in PACKAGES},
    }
