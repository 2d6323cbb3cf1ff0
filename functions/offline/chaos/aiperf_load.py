"""The chaos run's load: aiperf (unmodified, in its own virtual environment) streaming chat completions through the
load balancer, and what its raw export says each request got: its events (with their SSE ids), its text, whether it
ended with [DONE], and its error."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from functions.offline.bench.aiperf_check import streaming_profile

RAW_EXPORT = "profile_export_raw.jsonl"


def command(aiperf: str, **profile: Any) -> list[str]:
    """aiperf's streaming profile (functions/offline/bench/aiperf_check.py) with its own options only: stored answers
    (`store: true`) so the audit can compare what was kept; resumable answers (`yes`: aiperf's --header refuses a bare
    `true` as a boolean); every event each request got in its raw export; one aiperf worker and record processor (on
    a small machine its processes would otherwise take the cores the fleet runs on)."""
    return [
        *streaming_profile(aiperf, **profile),
        "--extra-inputs", "store:true", "--header", "X-Fleetchat-Resumable:yes", "--export-level", "raw",
        "--workers-max", "1", "--record-processors", "1",
    ]  # fmt: skip


# aiperf's own setting: its rate loop's high-resolution pacer, which a closed concurrency loop does not need.
AIPERF_ENV = {"AIPERF_TIMING_HIGH_RES_TIMER": "false"}
# Its timing manager still keeps a core busy on a small machine: at the lowest priority, it takes only what the fleet
# under test leaves (in a closed loop it only has to notice a finished request to send the next).
NICE = ["nice", "-n", "19"]


def run(cmd: list[str], log_path: Path, timeout_s: float) -> int:
    """Run aiperf to its end; its exit status (its output in `log_path`)."""
    env = {**os.environ, **AIPERF_ENV}
    with open(log_path, "ab") as log:
        try:
            done = subprocess.run(
                [*NICE, *cmd], stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout_s, check=False
            )
            return done.returncode
        except subprocess.TimeoutExpired:
            return -1


class ClientRequest(BaseModel):
    """One request as aiperf got it."""

    index: int
    start_s: float  # seconds after the load started
    end_s: float
    status: int | None
    error: str | None
    completion_id: str | None = None
    event_ids: list[int] = Field(default_factory=list)
    text: str = ""
    done: bool = False  # `data: [DONE]` arrived
    error_event: bool = False  # an SSE error event arrived
    content_times_s: list[float] = Field(default_factory=list)  # when each content chunk arrived

    @property
    def accepted(self) -> bool:
        """The gateway answered and the answer began: from here on nothing may be lost."""
        return self.completion_id is not None


def _error_text(error: Any) -> str | None:
    if not error:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)[:300]
    return str(error)[:300]


def parse_record(index: int, record: dict[str, Any], t0_ns: int) -> ClientRequest:
    """One line of aiperf's raw export."""
    meta = record.get("metadata") or {}
    start_ns = int(meta.get("request_start_ns") or t0_ns)
    end_ns = int(meta.get("request_end_ns") or start_ns)
    start_perf = int(record.get("start_perf_ns") or 0)
    request = ClientRequest(
        index=index,
        start_s=(start_ns - t0_ns) / 1e9,
        end_s=(end_ns - t0_ns) / 1e9,
        status=record.get("status"),
        error=_error_text(record.get("error")),
    )
    for response in record.get("responses") or []:
        at_s = (start_ns + int(response.get("perf_ns", start_perf)) - start_perf - t0_ns) / 1e9
        event_name = None
        for packet in response.get("packets") or []:
            name, value = packet.get("name"), str(packet.get("value", ""))
            if name == "id" and value.isdigit():
                request.event_ids.append(int(value))
            elif name == "event":
                event_name = value
            elif name == "data":
                _observe(request, value, at_s, event_name)
    return request


def _observe(request: ClientRequest, data: str, at_s: float, event_name: str | None) -> None:
    if data == "[DONE]":
        request.done = True
        return
    if event_name == "error":
        request.error_event = True
        return
    try:
        chunk = json.loads(data)
    except ValueError:
        return
    if not isinstance(chunk, dict) or "choices" not in chunk:
        return
    request.completion_id = request.completion_id or chunk.get("id")
    for choice in chunk["choices"]:
        text = (choice.get("delta") or {}).get("content")
        if text:
            request.text += text
            request.content_times_s.append(at_s)


def read_requests(artifact_dir: Path, t0_ns: int) -> list[ClientRequest]:
    """Every request of the run, in the order aiperf wrote them."""
    path = artifact_dir / RAW_EXPORT
    if not path.is_file():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [parse_record(i, json.loads(line), t0_ns) for i, line in enumerate(lines)]
