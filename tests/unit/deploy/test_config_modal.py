"""The Modal app reads the operator config file at import (deploy time and in each container): its pools become the
GPU classes, its guard choice warms the guard, and the images carry the file where FLEETCHAT_CONFIG_FILE points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.operator_file import shipped_text
from tests.support.processes import REPO

PROBE = """
import json
from gpu_workers import modal_app as m
print(json.dumps({
    "specs": {name: [s.class_name, s.gpu, s.max_containers] for name, s in m.WORKER_SPECS.items()},
    "guard_min": m.GUARD_SPECS["llama-guard"].min_containers,
    "image_env": m.CONFIG_IMAGE_ENV,
    "has_class": hasattr(m, "CodeMiniWorker"),
}))
"""


def test_modal_app_defines_the_files_pools(tmp_path: Path) -> None:
    text = shipped_text().replace("      max_containers: 16\n", "      max_containers: 32\n")
    start, end = text.index("  mini:\n"), text.index("  flagship:\n")
    text = text.replace("  flagship:\n", text[start:end].replace("  mini:\n", "  code-mini:\n") + "  flagship:\n", 1)
    config = tmp_path / "fleetchat.yaml"
    config.write_text(text.replace("  kind: embedded\n", "  kind: llama_guard\n"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCHAT_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        env={**environ, "FLEETCHAT_CONFIG_FILE": str(config)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["specs"] == {
        "mini": ["MiniWorker", "L4", 8],
        "code-mini": ["CodeMiniWorker", "L4", 8],
        "flagship": ["FlagshipWorker", "H100", 32],
        "vision": ["VisionWorker", "L40S", 8],
    }
    assert seen["has_class"]
    assert seen["guard_min"] == 1  # the file chose Llama Guard: its class keeps a warm replica
    assert seen["image_env"] == {"FLEETCHAT_CONFIG_FILE": "/root/fleetchat-config.yaml"}
