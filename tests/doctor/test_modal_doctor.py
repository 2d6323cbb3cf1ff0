"""The deployed doctor: a Modal function with the gateway's image and secret, trusted by the service role."""

from __future__ import annotations

import ast
import warnings

from modal.exception import DeprecationError

from gpu_workers import modal_app
from tests.support.terraform_module import REPO_ROOT, variable_default


def test_the_doctor_runs_on_demand_with_the_gateway_secret_and_no_gpu() -> None:
    info = modal_app.doctor.info()
    assert info.gpus == [] and info.web_info is None and info.schedule is None  # on demand: `modal run ...::doctor`
    assert info.secrets == [
        "modal.Secret.from_name('fleetchat-secrets')",
        f"modal.Secret.from_name('{modal_app.WORKER_SECRET_NAME}')",  # it presents the worker credential too
    ]
    assert info.timeout == modal_app.DOCTOR_TIMEOUT
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationError)
        assert "doctor" in modal_app.app.registered_functions


def test_the_doctor_assumes_the_service_role_and_reads_the_deployed_stores() -> None:
    source = (REPO_ROOT / "gpu_workers" / "modal_app.py").read_text()
    (function,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "doctor"]
    names = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)}
    assert {"use_modal_identity_token", "DEPLOYED_STORES", "resolve_worker_urls"} <= names
    assert "doctor" in variable_default("modal_function_names")  # the role trusts its OIDC token
