"""The local fleet's load balancer (`fleetchat up --gateways N`): HAProxy from Debian's package in front of N gateway
processes, with active health checks, a retry on a refused connection, and timeouts long enough for a stream.

HAProxy runs as a supervised child like a worker: `fleetchat balancer` arms the supervisor's death signal, then
replaces itself with `haproxy -db` (the signal survives the exec), so a `kill -9` of `fleetchat up` takes it along.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HEALTH_PATH = "/health"  # the gateway's liveness (no worker calls); HAProxy answers it itself on its own port


def haproxy_config(
    host: str, port: int, gateway_ports: list[int], *, stream_timeout_s: float, max_body_bytes: int
) -> str:
    """The configuration: listen on `host:port`, spread requests over the gateways by least connections, take a
    gateway out after two failed checks a second apart (back after two good ones), and retry on another gateway a
    request whose gateway refused the connection or died before answering a byte."""
    timeout = f"{int(stream_timeout_s)}s"
    bufsize = max_body_bytes + 64 * 1024
    servers = "\n".join(f"    server gateway-{i} 127.0.0.1:{p} check" for i, p in enumerate(gateway_ports))
    return f"""# Written by `fleetchat up --gateways {len(gateway_ports)}` (functions/local_stack/balancer.py).
global
    maxconn 1024
    tune.bufsize {bufsize}
    log stdout format raw local0 info  # one line a request: who served it, how it ended

defaults
    mode http
    log global
    option dontlognull
    option httplog
    timeout connect 2s
    timeout http-request 30s
    timeout http-keep-alive 10s
    # A stream may last as long as the gateway waits on a worker: no timeout may cut it shorter.
    timeout client {timeout}
    timeout server {timeout}
    # A fresh connection to a gateway per request (loopback: cheap), never an idle one a killed gateway left dead.
    option http-server-close
    http-reuse never
    # A request is retried on another gateway when the connection was refused, or when the gateway closed it before
    # a byte of response (it died with the request in its accept queue). The second may repeat work a dying gateway
    # had begun, where the client's own retry of the 502 would repeat all of it (the openai SDK retries 502s).
    retries 2
    retry-on conn-failure empty-response
    option redispatch 1
    # The whole request is read before a gateway is picked, so a retry can send it again (bodies up to the buffer:
    # the gateway's own limit, FLEETCHAT_MAX_BODY_BYTES, plus headers).
    option http-buffer-request

frontend fleetchat
    bind {host}:{port}
    # Its own /health: 200 while at least one gateway is in rotation (what `fleetchat up` waits for), else 503.
    monitor-uri {HEALTH_PATH}
    monitor fail if {{ nbsrv(gateways) lt 1 }}
    default_backend gateways

backend gateways
    balance leastconn
    option httpchk
    http-check send meth GET uri {HEALTH_PATH}
    http-check expect status 200
    default-server inter 1s fall 2 rise 2
{servers}
"""


def haproxy_binary(configured: str) -> str:
    """The HAProxy executable, or a SystemExit saying how to get it."""
    found = shutil.which(configured) or shutil.which(configured, path="/usr/sbin:/sbin")  # Debian's: not on users' PATH
    if found is None:
        raise SystemExit(
            f"`fleetchat up --gateways N` runs HAProxy, and {configured!r} is not on PATH: "
            "`sudo apt-get install haproxy` (Debian/Ubuntu) or set FLEETCHAT_BALANCER_BINARY"
        )
    return found


def balancer_command(config: Path, binary: str) -> list[str]:
    """What the supervisor runs: `fleetchat balancer`, which becomes HAProxy."""
    return [sys.executable, "-m", "functions.cli", "balancer", "--config", str(config), "--binary", binary]


def exec_haproxy(config: Path, binary: str) -> None:
    """Replace this process with HAProxy in the foreground (`-db`): its pid, its death signal, its output."""
    os.execv(binary, [binary, "-db", "-f", str(config)])
