"""Prefix-stable rendering: pinned bytes for version 1, prefix growth, same bytes and tokens across processes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from functions.chat.instructions import ACCOUNT_HEADING, guidance_text
from shared.rendering import (
    SYSTEM_PROMPTS,
    UnknownRenderVersionError,
    canonical_bytes,
    render,
)
from shared.storage.conversations import StoredMessage, new_conversation_id
from shared.storage.sqlite.conversations import SQLiteConversationStore

T0 = datetime(2026, 11, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


def m(role: str, content: str, minutes: int = 0) -> StoredMessage:
    return StoredMessage(role=role, content=content, created_at=T0 + timedelta(minutes=minutes))  # type: ignore[arg-type]


HISTORY = [m("user", "Plan a trip to Lisbon 🇵🇹"), m("assistant", "Day 1: Alfama.\nDay 2: Belém.")]
NEW = [m("user", "  Three days only  ")]

# Version 1's exact output for HISTORY + NEW. If this changes, that is a new render version, not an edit of 1.
V1_SHA256 = "0b5f2466e5d8b6b06ccb973ab3128d4286329e41dd6492c0eb5afcf52d858916"


def test_version_1_renders_the_pinned_bytes() -> None:
    rendered = render(1, HISTORY, NEW)
    assert rendered == [
        {"role": "system", "content": SYSTEM_PROMPTS[1]},
        {"role": "user", "content": "Plan a trip to Lisbon 🇵🇹"},
        {"role": "assistant", "content": "Day 1: Alfama.\nDay 2: Belém."},
        {"role": "user", "content": "  Three days only  "},
    ]
    assert hashlib.sha256(canonical_bytes(rendered)).hexdigest() == V1_SHA256


def test_timestamps_never_reach_the_prompt() -> None:
    later = [m(x.role, x.content, minutes=99) for x in HISTORY]
    assert canonical_bytes(render(1, HISTORY, NEW)) == canonical_bytes(render(1, later, NEW))


def test_each_turn_extends_the_previous_rendering() -> None:
    turn_1 = render(1, [], HISTORY[:1])
    turn_2 = render(1, HISTORY, NEW)
    assert turn_2[: len(turn_1)] == turn_1


def test_a_conversations_own_system_prompt_replaces_the_default() -> None:
    rendered = render(1, [m("system", "Answer in French.")], [m("user", "hi")])
    assert [r["role"] for r in rendered] == ["system", "user"] and rendered[0]["content"] == "Answer in French."


def test_custom_instructions_end_the_first_system_message_and_leave_the_rest_as_pinned() -> None:
    guidance = guidance_text("Answer in British English.", "Reply in one sentence.")
    with_them, without = render(1, HISTORY, NEW, guidance), render(1, HISTORY, NEW)
    assert with_them[0]["content"] == f"{SYSTEM_PROMPTS[1]}\n\n{guidance}"
    assert with_them[1:] == without[1:] and hashlib.sha256(canonical_bytes(without)).hexdigest() == V1_SHA256
    # A conversation's own system prompt keeps its text, then the instructions; a turn later, the same first bytes.
    own = [m("system", "You are a travel agent."), *HISTORY]
    assert render(1, own, NEW, guidance)[0]["content"] == f"You are a travel agent.\n\n{guidance}"
    later = render(1, [*HISTORY, *NEW, m("assistant", "Fine.")], [m("user", "And food?")], guidance)
    assert later[: len(with_them)] == with_them
    assert guidance_text(None, "  ") is None and guidance_text(" Be brief ", None) == f"{ACCOUNT_HEADING}\nBe brief"


def test_an_unknown_render_version_is_refused() -> None:
    with pytest.raises(UnknownRenderVersionError):
        render(999, HISTORY, NEW)


RENDER_IN_FRESH_PROCESS = """
import json, sys
from pathlib import Path
from transformers import AutoTokenizer
from gpu_workers.model_loader import packaged_gguf_source
from shared.fleet.pools import LocalModel
from shared.rendering import canonical_bytes, render
from shared.storage.conversations import StoredMessage
from shared.storage.sqlite.conversations import SQLiteConversationStore

store = SQLiteConversationStore(Path(sys.argv[1]))
conversation = store.get(sys.argv[2], sys.argv[3])
rendered = render(conversation.render_version, conversation.messages, [])
source = packaged_gguf_source(LocalModel())
tok = AutoTokenizer.from_pretrained(source.path_or_repo, gguf_file=source.gguf_file)
ids = tok.apply_chat_template(rendered, add_generation_prompt=True)["input_ids"]
print(json.dumps({"bytes": canonical_bytes(rendered).hex(), "ids": list(ids)}))
"""


def _render_in_fresh_process(db: Path, tenant: str, conversation_id: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", RENDER_IN_FRESH_PROCESS, str(db), tenant, conversation_id],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_same_stored_history_renders_to_same_bytes_and_tokens_across_restarts(tmp_path: Path, tokenizer: Any) -> None:
    db = tmp_path / "fleetchat.db"
    store = SQLiteConversationStore(db)
    conversation_id = new_conversation_id()
    store.append_turn(
        "ten_a", conversation_id, expected_version=0, messages=[*HISTORY, *NEW], expires_at=None, render_version=1
    )
    store.close()
    first = _render_in_fresh_process(db, "ten_a", conversation_id)
    second = _render_in_fresh_process(db, "ten_a", conversation_id)
    assert first == second
    expected = render(1, [*HISTORY, *NEW], [])
    assert bytes.fromhex(first["bytes"]) == canonical_bytes(expected)
    assert first["ids"] == list(tokenizer.apply_chat_template(expected, add_generation_prompt=True)["input_ids"])


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}}
TOOL_TURNS = [
    m("user", "Weather in Lisbon?"),
    StoredMessage.model_validate({"role": "assistant", "content": "", "created_at": T0, "tool_calls": [CALL]}),
    StoredMessage(role="tool", content="sunny", created_at=T0, tool_call_id="call_1"),
]
# Version 1's exact output for TOOL_TURNS + NEW (tool turns pinned like the rest).
V1_TOOLS_SHA256 = "ead4d2207f5c1a2d95545019cd800524a848a7ef88ef1a184ac40d9b45da1cf9"


def test_tool_turns_render_in_openai_shape_and_pinned_bytes() -> None:
    rendered = render(1, TOOL_TURNS, NEW)
    assert rendered[2] == {"role": "assistant", "content": None, "tool_calls": [CALL]}
    assert rendered[3] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}
    assert hashlib.sha256(canonical_bytes(rendered)).hexdigest() == V1_TOOLS_SHA256


def test_each_turn_extends_the_previous_rendering_across_tool_turns() -> None:
    assert render(1, TOOL_TURNS, NEW)[:3] == render(1, TOOL_TURNS[:2], [])
    assert render(1, [*TOOL_TURNS, *NEW], [])[:4] == render(1, TOOL_TURNS, [])


def test_a_message_with_images_renders_its_parts_and_the_text_messages_keep_their_bytes() -> None:
    from shared.wire.schemas import ImageContentPart, ImageUrl, TextContentPart

    image = ImageContentPart(type="image_url", image_url=ImageUrl(url="data:image/png;base64,iVBORw0KGgo="))
    parts = [TextContentPart(type="text", text="What is this?"), image]
    question = StoredMessage(role="user", content="What is this?", content_parts=parts, created_at=T0)
    history = [m("user", "hi"), m("assistant", "hello")]
    rendered = render(1, history, [question])
    assert rendered[1:3] == render(1, history, [])[1:3]  # the text-only history: its version-1 bytes
    assert rendered[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }
    assert canonical_bytes(render(1, [*history, question], [])) == canonical_bytes(rendered)  # stored, the same bytes
