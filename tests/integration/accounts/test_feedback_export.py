"""`fleetchat feedback export` (a real subprocess) on ratings given through the gateway: JSONL rows with the prompt
the model saw, filters, golden candidates, and what is skipped (deleted conversations, replaced answers)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.rendering import SYSTEM_PROMPTS
from tests.integration.conftest import GatewayFactory
from tests.integration.feedback_support import ANSWER, Setup, feedback_gateway

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def setup(gateway_for: GatewayFactory) -> Iterator[Setup]:
    with feedback_gateway(gateway_for) as ready:
        yield ready


def export(setup: Setup, *args: str) -> tuple[list[dict], str]:
    out = setup.gw.data_dir / "export.jsonl"
    command = [
        sys.executable,
        "-m",
        "functions.cli",
        "feedback",
        "export",
        "--data-dir",
        str(setup.gw.data_dir),
    ]
    done = subprocess.run([*command, "--out", str(out), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in out.read_text().splitlines()], done.stderr


def test_export_rows_filters_and_golden_candidates(setup: Setup) -> None:
    two_turns = setup.conversation(turns=2)
    setup.rate(two_turns, 1, rating="up")
    setup.rate(two_turns, 3, rating="down", comment="Lisbon, not Madrid")
    gone = setup.conversation(turns=1)
    setup.rate(gone, 1, rating="down", comment="deleted later")
    setup.send("DELETE", f"/v1/conversations/{gone}")
    regenerated = setup.conversation(turns=1)
    setup.rate(regenerated, 1, rating="down", comment="about the first version of an answer")
    setup.api.chat.completions.create(  # a second version of the answer: the first, and its rating, stay
        model="mini",
        messages=[{"role": "user", "content": "Capital of Portugal?"}],
        extra_body={"conversation_id": regenerated, "replace_from": 0},
    )
    [record_down] = [r for r in setup.stored() if r.conversation_id == two_turns and r.message_index == 3]

    rows, report = export(setup)
    assert "exported 3 ratings; skipped 1 of deleted or expired conversations and 0 of replaced answers" in report
    assert sorted((r["conversation_id"], r["message_index"], r["rating"]) for r in rows) == sorted([
        (two_turns, 1, "up"),
        (two_turns, 3, "down"),
        (regenerated, 1, "down"),
    ])  # fmt: skip
    [first_version] = [r for r in rows if r["conversation_id"] == regenerated]
    assert first_version["messages"] == [{"role": "user", "content": "Capital of Portugal?"}]
    [down] = [r for r in rows if r["conversation_id"] == two_turns and r["rating"] == "down"]
    assert down["prompt"] == [  # what the model saw: the versioned system prompt, then the history
        {"role": "system", "content": SYSTEM_PROMPTS[1]},
        {"role": "user", "content": "Capital of Portugal?"},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": "Are you sure? (0)"},
    ]
    assert down["messages"] == down["prompt"][1:]
    assert (down["answer"], down["comment"], down["finish_reason"]) == (ANSWER, "Lisbon, not Madrid", "stop")
    assert (down["model"], down["model_source"], down["render_version"]) == ("mini", "message", 1)
    assert down["policy_versions"] == {"pre": record_down.pre_policy_version, "post": record_down.post_policy_version}
    assert down["tenant_id"] == record_down.tenant_id and down["id"].startswith("fb_")
    assert down["answered_at"] <= down["rated_at"]

    assert [r["rating"] for r in export(setup, "--rating", "down")[0]] == ["down", "down"]
    assert export(setup, "--tenant", "ten_nobody")[0] == []
    assert len(export(setup, "--tenant", record_down.tenant_id)[0]) == 3
    assert export(setup, "--since", "2999-01-01T00:00:00")[0] == []
    assert len(export(setup, "--since", "2000-01-01T00:00:00+00:00")[0]) == 3

    golden, report = export(setup, "--golden-candidates")
    assert "exported 2 golden candidates" in report
    assert [g for g in golden if g["id"] == down["id"]] == [
        {
            "id": down["id"],
            "source": "feedback",
            "category": None,
            "messages": down["messages"],
            "answer": ANSWER,
            "comment": "Lisbon, not Madrid",
        }
    ]


def test_golden_candidates_are_only_thumbs_down(setup: Setup) -> None:
    out = setup.gw.data_dir / "golden.jsonl"
    command = [
        sys.executable,
        "-m",
        "functions.cli",
        "feedback",
        "export",
        "--data-dir",
        str(setup.gw.data_dir),
    ]
    refused = subprocess.run(
        [*command, "--golden-candidates", "--rating", "up", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and "thumbs-down" in refused.stderr
    assert not out.exists()
