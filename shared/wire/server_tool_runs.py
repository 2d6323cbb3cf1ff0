"""A server-side tool call as the client sees it (docs/server-tools.md, "What the client sees"): streamed as it starts
and as it ends, listed in a completion's `server_tool_runs`, and stored with the answer of a saved conversation."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

# Tools the gateway runs itself (functions/chat/server_tools/tools.py); a tier offers some of them
# (shared/fleet/tiers.py `TierPolicy.server_tools`).
ServerToolName = Literal["calculator", "python"]
SERVER_TOOL_NAMES: tuple[ServerToolName, ...] = ("calculator", "python")

# `running` while it runs; then how it went (shared/storage/tool_audit.py ToolRunStatus).
RunStatus = Literal["running", "ok", "error", "timeout", "quota", "busy", "breaker_open"]


class RunFile(BaseModel):
    """A file a python run wrote to /mnt/data/out that the gateway kept for the caller (GET /v1/files/{id}/content)."""

    file_id: str
    filename: str
    bytes: int = Field(ge=0)


class ServerToolRunView(BaseModel):
    tool_call_id: str
    tool: str
    status: RunStatus
    # As the model wrote them (JSON text): the python tool's program is their `code`, the calculator's `expression`.
    # Empty when the safety post-filter kept them from the client (`content_filtered`).
    arguments: str = ""
    duration_ms: int | None = None  # once it ended
    # What the tool returned, once it ended: the python tool's `exit_code`, `output` (stdout and stderr, bounded),
    # `output_truncated`, `limits_hit`, `files_dropped` and `error` (a timeout says so); the calculator's `value`.
    # None while running, and when the safety post-filter kept it from the client.
    result: dict[str, Any] | None = None
    files: list[RunFile] = []
    # The safety post-filter read the code and the result before the client could, and kept back what it flagged.
    content_filtered: bool = False
    # The prompt-injection screen flagged the result: it reached the model quoted inertly, or was withheld from it.
    quoted: bool = False
    withheld: bool = False

    def client_json(self) -> dict[str, Any]:
        """The wire form: the optional fields left out while unset, false or empty."""
        return {"arguments": self.arguments, **self.model_dump(mode="json", exclude_defaults=True)}


def run_code(run: ServerToolRunView) -> str:
    """The code a call ran, for people to read: the python tool's program, the calculator's expression, else the
    arguments as written."""
    try:
        arguments = json.loads(run.arguments) if run.arguments else {}
    except ValueError:
        return run.arguments
    if isinstance(arguments, dict):
        for key in ("code", "expression"):
            if isinstance(arguments.get(key), str):
                return arguments[key]
    return run.arguments
