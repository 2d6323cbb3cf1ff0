"""A stream's turn as another gateway finishes it: where it goes in the message tree, from this gateway's spec or an
older one's (which said how many messages an edit kept)."""

from __future__ import annotations

from datetime import UTC, datetime

from functions.chat.conversation_turns import History
from functions.chat.streams.takeover import TurnSpec
from shared.storage.conversations import StoredMessage

NEW = [StoredMessage(role="user", content="edited", created_at=datetime(2026, 12, 1, tzinfo=UTC))]


def spec(**fields: object) -> TurnSpec:
    base = {"conversation_id": "conv_" + "0" * 32, "expected_version": 2, "render_version": 1, "new_messages": NEW}
    return TurnSpec.model_validate({**base, "rendered": [], "history": History.LOADED, **fields})


def test_the_place_round_trips_through_json() -> None:
    written = spec(parent=3, pinned=True)
    assert TurnSpec.model_validate_json(written.model_dump_json()).place() == (3, True)
    assert spec().place() == (None, False)


def test_an_older_gateways_edit_goes_beside_the_message_it_replaced() -> None:
    assert spec(keep=2).place() == (1, True)
    assert spec(keep=0).place() == (-1, True)  # an edit of the first message: a new first message
