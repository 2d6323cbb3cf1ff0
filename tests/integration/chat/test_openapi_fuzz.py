"""The API matches its OpenAPI description, checked by the field's fuzzer: schemathesis (its CLI, as a user runs it)
against a real gateway on loopback, the public API with a tenant's key and the admin API with an admin key. And every
error status the description names is really sent: by the fuzzing, by the drivers here, or by a named test elsewhere.

The fuzzing fails on any 5xx, any status or content type the document does not name, a response that breaks its
schema, an invalid request that is accepted, a route that ignores a missing key, and a 405 whose `Allow` is wrong. Two
kinds of check are left out, each for a reason: `positive_data_acceptance` (the document cannot say everything a
validator checks, such as "a date, an ISO 8601 time or Unix seconds", so schema-valid input may still be a correct
400) and the stateful `ensure_resource_availability` / `use_after_free` heuristics (they read a 404 for an unknown
*user* id in a new key's body as a vanished tenant). Examples are bounded and the seed fixed: a run is reproducible
and takes seconds.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from functions.accounts.sessions import CSRF_HEADER, CSRF_VALUE
from functions.app import create_app
from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.settings import Settings
from shared.storage.sqlite.accounts import SQLiteStore
from tests.support.servers import serve
from tests.support.stand_ins.embedding_stand_in import EmbeddingStandIn
from tests.support.stand_ins.stand_in import stand_in_worker

CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "missing_required_header",
    "ignored_auth",
    "unsupported_method",
    "allow_header_conformance",
)
EXAMPLES = 25
SEED = 1
MAX_BODY_BYTES = 65_536
APIS = {"public": r"^/(v1|health|metrics)", "admin": r"^/admin/"}

# Statuses that need a fault, a limit or a long stream to happen, each driven by a test elsewhere.
DRIVEN_ELSEWHERE: dict[tuple[str, int], tuple[str, str]] = {  # (operation, status): (file under tests/, test)
    ("POST /v1/chat/completions", 429): (
        "integration/control/test_rate_limits.py",
        "test_the_worker_never_sees_a_refused_request",
    ),
    ("POST /v1/chat/completions", 502): (
        "integration/control/test_gateway_faults.py",
        "test_worker_error_is_final_not_retried_and_maps_to_502",
    ),
    ("POST /v1/chat/completions", 503): (
        "integration/control/test_gateway_faults.py",
        "test_no_worker_at_all_is_503_with_retry_after",
    ),
    ("GET /healthz", 503): (
        "integration/control/test_gateway_faults.py",
        "test_no_worker_at_all_is_503_with_retry_after",
    ),
    ("POST /v1/moderations", 429): (
        "integration/safety/test_moderations_api.py",
        "test_over_the_rpm_limit_it_is_429_with_retry_after",
    ),
    ("POST /v1/moderations", 503): (
        "integration/safety/test_safety_guards.py",
        "test_fail_closed_refuses_with_503_and_retry_after",
    ),
    **{
        (operation, 429): (
            "integration/control/test_rate_limits.py",
            "test_completions_and_responses_count_against_the_same_limits",
        )
        for operation in ("POST /v1/completions", "POST /v1/responses")
    },
    ("POST /v1/completions", 502): (
        "integration/control/test_gateway_faults.py",
        "test_completions_and_the_tokenizer_routes_map_a_worker_error_to_502",
    ),
    ("POST /v1/completions", 503): (
        "integration/control/test_gateway_faults.py",
        "test_completions_and_the_tokenizer_routes_are_503_without_a_worker",
    ),
    **{
        (operation, status): (
            "integration/control/test_gateway_faults.py",
            "test_completions_and_the_tokenizer_routes_map_a_worker_error_to_502"
            if status == 502
            else "test_completions_and_the_tokenizer_routes_are_503_without_a_worker",
        )
        for operation in ("POST /v1/responses", "POST /tokenize", "POST /detokenize", "GET /tokenizer_info")
        for status in (502, 503)
    },
    **{
        (operation, 400): ("integration/chat/test_completions_api.py", "test_the_tokenizer_endpoints_refuse_bad_input")
        for operation in ("POST /tokenize", "POST /detokenize", "GET /tokenizer_info")
    },
    ("POST /v1/embeddings", 429): ("integration/files/test_embeddings_api.py", "test_the_tenants_token_limit_applies"),
    ("POST /v1/embeddings", 502): (
        "integration/files/test_embeddings_api.py",
        "test_a_wrong_worker_answer_is_a_502_billing_nothing",
    ),
    ("POST /v1/embeddings", 503): (
        "integration/files/test_embeddings_api.py",
        "test_a_worker_that_is_down_is_a_503_and_bills_nothing",
    ),
    # Re-ranking (docs/rerank.md), on both paths: the tenant's limits and the re-rank worker's faults.
    **{
        (operation, status): ("integration/files/test_rerank_api.py", test)
        for operation in ("POST /v1/rerank", "POST /v2/rerank")
        for status, test in (
            (400, "test_bad_input_is_an_openai_error_and_charges_nothing"),
            (429, "test_the_tenants_token_limit_applies"),
            (502, "test_a_wrong_worker_answer_is_a_502_billing_nothing"),
            (503, "test_a_worker_that_is_down_is_a_503_and_bills_nothing"),
        )
    },
    # Files and vector stores (docs/files.md): a tier's file size and file quota; search embeds the query.
    ("POST /v1/files", 413): (
        "integration/files/test_files_api.py",
        "test_over_the_size_limit_is_413_and_a_wrong_type_is_400_and_nothing_is_kept",
    ),
    ("POST /v1/files", 429): (
        "integration/files/test_files_api.py",
        "test_the_file_quota_refuses_with_429_and_keeps_nothing_more",
    ),
    ("POST /v1/vector_stores/{vector_store_id}/search", 429): (
        "integration/files/test_files_api.py",
        "test_search_is_rate_limited_like_any_embedding",
    ),
    ("POST /v1/vector_stores/{vector_store_id}/search", 502): (
        "integration/files/test_files_api.py",
        "test_search_with_a_broken_embedding_worker_is_a_502",
    ),
    ("POST /v1/vector_stores/{vector_store_id}/search", 503): (
        "integration/files/test_files_api.py",
        "test_search_without_an_embedding_worker_is_a_503",
    ),
    # The replay buffer's bound, below HTTP (the router maps every FleetchatError to its status).
    ("GET /v1/chat/completions/{completion_id}/stream", 410): (
        "unit/chat/test_resumable_streams.py",
        "test_one_response_keeps_its_newest_events_within_its_byte_bound",
    ),
    ("GET /v1/responses/{response_id}", 410): (
        "integration/chat/test_response_stream_takeover.py",
        "test_a_response_whose_first_events_were_dropped_cannot_be_resumed_exactly_and_says_so",
    ),
}

# Valid bodies for the write routes whose 404 a driver sends (the body must pass before the lookup can fail).
VALID_BODIES: dict[str, dict[str, object]] = {
    "/v1/chat/completions": {"model": "no-such-model", "messages": [{"role": "user", "content": "Hi"}]},
    "/v1/embeddings": {"model": "no-such-model", "input": "Hi"},
    "/v1/rerank": {"model": "no-such-model", "query": "Hi", "documents": ["Hello"]},
    "/v2/rerank": {"model": "no-such-model", "query": "Hi", "documents": ["Hello"]},
    "/v1/completions": {"model": "no-such-model", "prompt": "Hi"},
    "/v1/responses": {"model": "no-such-model", "input": "Hi"},
    "/tokenize": {"model": "no-such-model", "prompt": "Hi"},
    "/detokenize": {"model": "no-such-model", "tokens": [1]},
    "/admin/v1/tenants/{tenant_id}": {"name": "renamed"},
    "/admin/v1/tenants/{tenant_id}/users": {"email": "someone@example.com"},
    "/admin/v1/tenants/{tenant_id}/keys": {"label": "another key"},
    "/v1/conversations/{conversation_id}": {"title": "A title"},
    "/v1/conversations/{conversation_id}/messages/{message_index}/feedback": {"rating": "up"},
    "/v1/vector_stores": {"file_ids": ["file-" + "0" * 24]},
    "/v1/vector_stores/{vector_store_id}/files": {"file_id": "file-" + "0" * 24},
    "/v1/vector_stores/{vector_store_id}/search": {"query": "hello"},
}


@dataclass
class Fuzzed:
    url: str
    key: str
    admin_key: str
    runs: dict[str, subprocess.CompletedProcess[str]]
    seen: set[tuple[str, int]]  # (operation, status) pairs the fuzzing received


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
        "--generation-database",
        "none",  # no examples remembered between runs (none left in the checkout): every run is the same
        "--no-color",
        "--report",
        "ndjson",
        "--report-dir",
        str(report_dir),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


def _statuses_received(report_dir: Path) -> set[tuple[str, int]]:
    """(operation, status) of every response in schemathesis's NDJSON event report."""
    seen: set[tuple[str, int]] = set()
    for report in report_dir.glob("*.ndjson"):
        for line in report.read_text().splitlines():
            finished = json.loads(line).get("ScenarioFinished")
            if not finished:
                continue
            for interaction in (finished["recorder"].get("interactions") or {}).values():
                response = interaction.get("response")
                if response:
                    seen.add((finished["recorder"]["label"], int(response["status_code"])))
    return seen


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    tmp = tmp_path_factory.mktemp("fuzz")
    worker_app = stand_in_worker("A short answer from the stand-in worker.")
    with serve(worker_app) as worker, serve(EmbeddingStandIn().app()) as embeddings:  # search embeds its query
        store = SQLiteStore(tmp / "fleetchat.db")
        tenant = store.create_tenant("fuzzed", Tier.PLUS)
        key, admin_key = new_api_key(), new_api_key()
        store.add_api_key(tenant.id, hash_api_key(key), "fuzz")
        store.add_admin_key(hash_api_key(admin_key), "fuzz-admin")
        settings = Settings(
            data_dir=tmp,
            worker_urls={"mini": [worker], "flagship": [worker]},
            pools=["mini", "flagship"],
            max_body_bytes=MAX_BODY_BYTES,
            embedding_worker_urls={"text-embedding-minilm": [embeddings]},
        )
        with serve(create_app(settings, store=store)) as url:
            runs, seen = {}, set()
            for api, paths in APIS.items():
                runs[api] = _fuzz(url, admin_key if api == "admin" else key, paths, tmp / f"report-{api}")
                seen |= _statuses_received(tmp / f"report-{api}")
            yield Fuzzed(url, key, admin_key, runs, seen)


def _operations(url: str) -> Iterator[tuple[str, str, dict]]:
    document = httpx.get(f"{url}/openapi.json", timeout=10).json()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            yield method.upper(), path, operation


def _concrete(path: str) -> str:
    """A path template with ids of the right shape (the drivers' statuses come before any lookup)."""
    ids = {
        "{conversation_id}": "conv_" + "0" * 32,
        "{tenant_id}": "ten_" + "0" * 32,
        "{completion_id}": "chatcmpl-0",
        "{message_index}": "0",
        "{key_id}": "key_" + "0" * 32,
        "{pool}": "mini",
        "{vector_store_id}": "vs_" + "0" * 24,
        "{file_id}": "file-" + "0" * 24,
    }
    for template, value in ids.items():
        path = path.replace(template, value)
    return path


@pytest.mark.parametrize("api", list(APIS))
def test_the_api_matches_its_description(fuzzed: Fuzzed, api: str) -> None:
    run = fuzzed.runs[api]
    assert run.returncode == 0, (
        f"schemathesis found problems in the {api} API:\n{run.stdout[-15000:]}\n{run.stderr[-3000:]}"
    )
    assert httpx.get(f"{fuzzed.url}/health", timeout=10).status_code == 200  # still serving after all of it


def test_no_phantom_422_and_errors_use_the_openai_object(fuzzed: Fuzzed) -> None:
    for method, path, operation in _operations(fuzzed.url):
        assert "422" not in operation["responses"], f"{method} {path} documents a 422 it never sends"
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")) and path != "/healthz":
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (method, path, status)


def _drive(fuzzed: Fuzzed, method: str, path: str, status: int) -> int | None:
    """Send what the description says gets `status` (401, 403, 404, 413); the status received, or None if this
    driver cannot."""
    url = f"{fuzzed.url}{_concrete(path)}"
    admin = path.startswith("/admin/")
    auth = {"authorization": f"Bearer {fuzzed.admin_key if admin else fuzzed.key}"}
    if status == 401 and path == "/v1/session":  # signing in with a key that does not exist
        wrong = {"api_key": "fc-" + "0" * 43}
        return httpx.post(url, json=wrong, headers={CSRF_HEADER: CSRF_VALUE}, timeout=10).status_code
    if status == 401:
        return httpx.request(method, url, timeout=10).status_code
    if status == 403 and path == "/v1/session":
        return httpx.request(method, url, json={"api_key": fuzzed.key}, timeout=10).status_code
    if status == 403:  # a write with the web chat's session cookie but without the CSRF header
        with httpx.Client(base_url=fuzzed.url, timeout=10) as browser:
            browser.post("/v1/session", json={"api_key": fuzzed.key}, headers={CSRF_HEADER: CSRF_VALUE})
            return browser.request(method, _concrete(path), json={}).status_code
    if status == 404:  # well-formed ids nobody created, with a valid body where the route takes one
        body = VALID_BODIES.get(path) if method in ("POST", "PATCH", "PUT") else None
        return httpx.request(method, url, headers=auth, json=body, timeout=10).status_code
    if status == 413:
        body = b"{" + b" " * MAX_BODY_BYTES + b"}"
        headers = {**auth, "content-type": "application/json"}
        return httpx.request(method, url, content=body, headers=headers, timeout=10).status_code
    return None


def test_every_documented_error_status_is_really_sent(fuzzed: Fuzzed) -> None:
    missing = []
    for method, path, operation in _operations(fuzzed.url):
        for status in (int(s) for s in operation["responses"] if s.startswith(("4", "5"))):
            operation_id = f"{method} {path}"
            if (operation_id, status) in fuzzed.seen or (operation_id, status) in DRIVEN_ELSEWHERE:
                continue
            received = _drive(fuzzed, method, path, status)
            if received != status:
                missing.append(f"{operation_id} documents {status}; nothing drives it (a driver got {received})")
    assert not missing, "\n".join(missing)


def test_the_tests_named_for_faults_and_limits_exist() -> None:
    tests = Path(__file__).resolve().parents[2]
    for file, name in DRIVEN_ELSEWHERE.values():
        tree = ast.parse((tests / file).read_text())
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
        assert name in names, f"tests/{file}::{name} does not exist"
