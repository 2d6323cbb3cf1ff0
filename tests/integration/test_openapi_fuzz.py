"""The API matches its OpenAPI description, checked by the field's fuzzer: schemathesis (its CLI, as a user runs it)
against a real gateway on loopback, the public API with a tenant's key and the admin API with an admin key.

It fails on any 5xx, any status or content type the document does not name, a response that breaks its schema, an
invalid request that is accepted, a route that ignores a missing key, and a 405 whose `Allow` is wrong. Two checks are
left out, each for a reason: `positive_data_acceptance` (the document cannot say everything a validator checks, such
as "a date, an ISO 8601 time or Unix seconds", so schema-valid input may still be a correct 400) and the stateful
`ensure_resource_availability` / `use_after_free` heuristics (they read a 404 for an unknown *user* id in a new key's
body as a vanished tenant). Examples are bounded and the seed fixed, so a run is reproducible and takes seconds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from functions.app import create_app
from shared.api_keys import hash_api_key, new_api_key
from shared.settings import Settings
from shared.storage.sqlite import SQLiteStore
from shared.tiers import Tier
from tests.support.servers import serve
from tests.support.stand_in import stand_in_worker

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "ignored_auth",
    "unsupported_method",
)
EXAMPLES = 25
SEED = 1


def _schemathesis() -> str:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    if found is None:
        pytest.fail("schemathesis is not installed (it is in the project's test extras)")
    return found


def _fuzz(url: str, key: str, paths: str, report_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [
        _schemathesis(),
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {key}",
        "--include-path-regex",
        paths,
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(EXAMPLES),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--no-color",
        "--report",
        "junit",
        "--report-dir",
        str(report_dir),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture
def gateway(tmp_path: Path):
    with serve(stand_in_worker("A short answer from the stand-in worker.")) as worker:
        store = SQLiteStore(tmp_path / "fleetchat.db")
        tenant = store.create_tenant("fuzzed", Tier.PLUS)
        key, admin_key = new_api_key(), new_api_key()
        store.add_api_key(tenant.id, hash_api_key(key), "fuzz")
        store.add_admin_key(hash_api_key(admin_key), "fuzz-admin")
        settings = Settings(
            data_dir=tmp_path, worker_urls={"mini": [worker], "flagship": [worker]}, pools=["mini", "flagship"]
        )
        with serve(create_app(settings, store=store)) as url:
            yield url, key, admin_key


@pytest.mark.parametrize(("api", "paths"), [("public", r"^/(v1|health|metrics)"), ("admin", r"^/admin/")])
def test_the_api_matches_its_description(gateway, tmp_path: Path, api: str, paths: str) -> None:
    url, key, admin_key = gateway
    run = _fuzz(url, admin_key if api == "admin" else key, paths, tmp_path / f"report-{api}")
    assert run.returncode == 0, (
        f"schemathesis found problems in the {api} API:\n{run.stdout[-15000:]}\n{run.stderr[-3000:]}"
    )
    assert "No issues found" in run.stdout or " passed" in run.stdout, run.stdout[-3000:]
    # The gateway still serves after the fuzzing (nothing it sent broke it).
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def test_no_phantom_422_and_errors_use_the_openai_object(gateway) -> None:
    url, _, _ = gateway
    document = httpx.get(f"{url}/openapi.json", timeout=10).json()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert "422" not in operation["responses"], f"{method.upper()} {path} documents a 422 it never sends"
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")) and path != "/healthz":
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (method, path, status)
    assert "HTTPValidationError" not in document["components"]["schemas"]
