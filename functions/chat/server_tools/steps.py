"""The tool loop's steps, as the loop yields them and a stream tells them: each call's view as it starts and as it
ends (shared/wire/server_tool_runs.py), then the final completion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.wire.server_tool_runs import ServerToolRunView


@dataclass(frozen=True)
class Final:
    """The loop's last step: the completion that goes back to the client."""

    completion: dict[str, Any]


Step = ServerToolRunView | Final
