"""The server-side tools' metrics on the gateway registry: runs by tool and status, and run durations."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

SERVER_TOOL_RUNS = "fleetchat_gateway_server_tool_runs"  # exposed as ..._total
SERVER_TOOL_SECONDS = "fleetchat_gateway_server_tool_seconds"


class ServerToolMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            SERVER_TOOL_RUNS,
            "Server-side tool calls by tool and status: ok, error, timeout, or refused (quota, breaker_open).",
            ["tool", "status"],
            registry=registry,
        )
        self.seconds = Histogram(
            SERVER_TOOL_SECONDS,
            "Wall-clock time of a server-side tool run (refused calls are not timed).",
            ["tool"],
            buckets=(0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
