"""Continuation inside a pool that is one URL in front of many replicas, as a deployed Modal Server is: the gateway
cannot pick a replica, only the balancer can. Here the balancer is Debian's HAProxy, hashing the `Modal-Session-ID`
header over two worker processes (consistent hashing, health checks, a refused connection redispatched), the closest
real thing to Modal's Server proxy that runs here. A replica killed mid-answer leaves the pool URL usable: the answer
continues on it under a new session id, landing on the live replica, even where the tier has no fallback pool.
Without `FLEETCHAT_WORKER_BALANCED` the URL is taken for the dead replica and the answer ends with an error event."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from functions.local_stack.balancer import haproxy_binary
from tests.integration.conftest import Gateway, GatewayFactory
from tests.integration.control.test_failover import SCRIPT, WORDS, _bodies, _events, _metric
from tests.integration.local_stack.test_local_fleet import require_haproxy
from tests.support.processes import ProcessGroup, free_port, wait_http_ok
from tests.support.stand_ins.continuing_worker import start_continuing_worker


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ProcessGroup]:
    procs = ProcessGroup(tmp_path / "logs")
    yield procs
    procs.stop()


def session_balancer(group: ProcessGroup, tmp_path: Path, replicas: list[str]) -> str:
    """HAProxy in front of `replicas`, picking one by a hash of the Modal-Session-ID header (as Modal's Server proxy
    does), dropping one that fails its check, and sending a refused connection to another."""
    port = free_port()
    servers = "\n".join(
        f"    server r{i} {url.removeprefix('http://')} check inter 300ms fall 1 rise 1"
        for i, url in enumerate(replicas)
    )
    config = tmp_path / "pool.cfg"
    config.write_text(f"""global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    option http-server-close
    retries 3
    retry-on conn-failure empty-response
    option redispatch 1
frontend pool
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance hdr(Modal-Session-ID)
    hash-type consistent
    option httpchk
    http-check send meth GET uri /health
{servers}
""")
    group.procs.append(
        subprocess.Popen([haproxy_binary("haproxy"), "-db", "-f", str(config)], stdout=subprocess.DEVNULL)
    )
    url = f"http://127.0.0.1:{port}"
    wait_http_ok(f"{url}/health", group.procs[-1], tmp_path / "pool.cfg", timeout_s=30)
    return url


def session_on(gw: Gateway, log: Path) -> str:
    """A session id the balancer sends to the replica that writes `log` (a one-token request per try)."""
    for i in range(40):
        before = len(_bodies(log))
        response, _ = _events(gw, "mini", f"s{i}", max_tokens=1)
        assert response.status_code == 200
        if len(_bodies(log)) > before:
            return f"s{i}"
    raise AssertionError("no session id reached the replica")


def pool_of_two(group: ProcessGroup, tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    a_log, b_log = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    dying = start_continuing_worker(group, free_port(), SCRIPT, "--die-after", "6", "--log", str(a_log))
    other = start_continuing_worker(group, free_port(), SCRIPT, "--log", str(b_log))
    return dying.proc, session_balancer(group, tmp_path, [dying.wait(), other.wait()])


def test_a_replica_dying_behind_the_pools_one_url_is_continued_on_that_url_by_another_replica(
    gateway_for: GatewayFactory, group: ProcessGroup, tmp_path: Path
) -> None:
    require_haproxy()
    dying, pool = pool_of_two(group, tmp_path)
    # mini is the plus tier's last pool: no fallback, as for the free tier deployed.
    gw = gateway_for({"mini": [pool], "flagship": [pool]}, worker={"balanced": True})
    session = session_on(gw, tmp_path / "a.jsonl")
    response, events = _events(gw, "mini", session, store=True, stream_options={"include_usage": True})
    assert dying.wait(timeout=10) == -9, "the replica the session hashed to was killed mid-stream"
    assert response.status_code == 200 and not any(e.startswith("event: error") for e in events)
    assert events[-1] == "data: [DONE]" and events.count("data: [DONE]") == 1
    chunks = [json.loads(e.removeprefix("data: ")) for e in events if e.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == SCRIPT  # nothing lost, nothing repeated
    assert [c["continuation"] for c in chunks if "continuation" in c] == [{"pool": "mini", "fallback": False}]
    assert next(c["usage"] for c in reversed(chunks) if c.get("usage"))["completion_tokens"] == WORDS
    continued = _bodies(tmp_path / "b.jsonl")[-1]
    assert continued["continue_final_message"] is True  # the other replica got the partial answer to go on from
    assert _metric(gw, 'fleetchat_gateway_continuations_total{outcome="continued",pool="mini"}') == 1


def test_without_the_balanced_setting_the_pools_url_is_taken_for_the_dead_replica(
    gateway_for: GatewayFactory, group: ProcessGroup, tmp_path: Path
) -> None:
    require_haproxy()
    dying, pool = pool_of_two(group, tmp_path)
    gw = gateway_for({"mini": [pool], "flagship": [pool]})
    session = session_on(gw, tmp_path / "a.jsonl")
    _, events = _events(gw, "mini", session)
    assert dying.wait(timeout=10) == -9
    assert any(e.startswith("event: error") and "stopped before finishing" in e for e in events)
    assert _metric(gw, 'fleetchat_gateway_continuations_total{outcome="failed",pool="mini"}') == 1


def test_each_leg_on_a_balanced_url_carries_a_session_id_of_its_own() -> None:
    from functions.chat.streams.continuation import MODAL_SESSION_HEADER, rerouted

    first = {MODAL_SESSION_HEADER: "conv_1", "authorization": "Bearer k"}
    second = rerouted(first, "chatcmpl-1", 1)
    assert second == {MODAL_SESSION_HEADER: "conv_1~leg2", "authorization": "Bearer k"}
    assert rerouted(second, "chatcmpl-1", 2)[MODAL_SESSION_HEADER] == "conv_1~leg3"
    assert rerouted({}, "chatcmpl-1", 1) == {MODAL_SESSION_HEADER: "chatcmpl-1~leg2"}  # no session: the answer's id
    assert httpx.Headers(first)[MODAL_SESSION_HEADER] == "conv_1"  # unchanged
