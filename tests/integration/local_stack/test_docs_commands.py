"""The README's first request, run as written against a real stack (two SmolLM2 workers and a gateway process): the
key file `make up` writes, the curl command and the `openai` SDK snippet. Only the port differs. (The commands the
README and docs name are checked in tests/unit/test_docs_references.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from functions.local_stack.local_tenant import ensure_local_key
from shared.settings import Settings
from shared.storage.sqlite.accounts import SQLiteStore
from tests.conftest import Stack
from tests.support.doc_references import REPO, parse

README_BASE_URL = "http://127.0.0.1:8000"
SECTION = "A first request"


def first_request_blocks() -> dict[str, str]:
    """The fenced blocks of the README's first-request section, by language."""
    tokens = parse(REPO / "README.md")
    blocks: dict[str, str] = {}
    inside = False
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag == "h2":
            inside = tokens[i + 1].content == SECTION
        elif inside and token.type == "fence":
            language = token.info.strip()
            assert language not in blocks, f"two {language} blocks in the README's first request"
            blocks[language] = token.content
    assert set(blocks) == {"bash", "python"}, f"the README's '{SECTION}' section shows a curl and a python block"
    return blocks


@pytest.fixture
def readme_dir(stack: Stack, tmp_path: Path) -> Path:
    """A directory laid out as the repository root after `make up`: `.fleetchat/local_api_key`, written by the same
    function `fleetchat up` calls, for the local tenant in the stack's store."""
    store = SQLiteStore(stack.data_dir / "fleetchat.db")
    try:
        ensure_local_key(store, tmp_path / ".fleetchat" / "local_api_key", Settings().local_tenant_tier)
    finally:
        store.close()
    return tmp_path


def _on_the_stack(code: str, stack: Stack) -> str:
    assert README_BASE_URL in code, "the README's first request names the local gateway"
    return code.replace(README_BASE_URL, stack.gateway_url)


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl on this machine")
def test_readme_curl_gets_a_chat_completion(stack: Stack, readme_dir: Path) -> None:
    script = _on_the_stack(first_request_blocks()["bash"], stack).rstrip() + " --write-out '\\n%{http_code}'"
    done = subprocess.run(["bash", "-c", script], cwd=readme_dir, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    body, _, status = done.stdout.rpartition("\n")
    assert status == "200", body
    completion = json.loads(body)
    assert completion["object"] == "chat.completion"
    assert completion["model"] == "flagship"
    assert completion["choices"][0]["message"]["content"]
    assert completion["usage"]["completion_tokens"] <= 32  # the README's max_tokens reached the worker


def test_readme_python_gets_a_chat_completion(
    stack: Stack, readme_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _on_the_stack(first_request_blocks()["python"], stack)
    monkeypatch.chdir(readme_dir)  # the snippet reads the key file relative to the repository root
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md (first request)", "exec"), namespace)  # the SDK raises on any non-2xx
    completion = namespace["completion"]
    assert completion.object == "chat.completion"  # type: ignore[attr-defined]
    content = completion.choices[0].message.content  # type: ignore[attr-defined]
    assert content
    assert capsys.readouterr().out == content + "\n"
