"""The request path (gateway app, workers) imports nothing from the safety classifier's training and evaluation code."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_gateway_imports_no_training_code() -> None:
    probe = (
        "import json, sys\n"
        "import functions.app, functions.safety.pipeline, functions.safety.prefilter, gpu_workers.server.app\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('functions.safety'))))\n"
    )
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    )
    assert "functions.safety.classifier.cascade" in loaded  # the probe really loaded the serving side
    assert [m for m in loaded if m.startswith("functions.offline.safety_training")] == []


def _loaded_after(imports: str) -> list[str]:
    probe = f"import json, sys\nimport {imports}\nprint(json.dumps(sorted(sys.modules)))\n"
    return json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)


def test_the_gateway_imports_no_eval_harness_code() -> None:
    """The eval job is a client of the public API: nothing of it loads with the gateway."""
    loaded = _loaded_after("functions.app, gpu_workers.server.app")
    assert "functions.api.routers.models" in loaded  # the probe really loaded the gateway
    assert [m for m in loaded if m.startswith("functions.offline.evals")] == []
    assert [m for m in loaded if m.split(".")[0] in ("matplotlib", "jinja2")] == []


def test_the_cli_registers_the_eval_commands_without_loading_the_harness() -> None:
    loaded = _loaded_after("functions.cli")
    assert [m for m in loaded if m.startswith("functions.offline.evals")] == [
        "functions.offline.evals",
        "functions.offline.evals.commands",
    ]
    assert "matplotlib" not in loaded
