"""The local fleet's HAProxy configuration: HAProxy itself accepts it (`haproxy -c`), and it says what the fleet relies
on — every gateway health-checked, retries that cannot reach a dead gateway twice, timeouts no shorter than a stream."""

from __future__ import annotations

import subprocess
from pathlib import Path

from functions.local_stack.balancer import haproxy_config
from shared.settings import Settings
from tests.integration.local_stack.test_local_fleet import require_haproxy


def test_haproxy_accepts_the_configuration_and_it_names_every_gateway(tmp_path: Path) -> None:
    require_haproxy()
    from functions.local_stack.balancer import haproxy_binary

    text = haproxy_config("127.0.0.1", 8000, [8001, 8002, 8003], stream_timeout_s=660, max_body_bytes=1 << 20)
    config = tmp_path / "haproxy.cfg"
    config.write_text(text)
    checked = subprocess.run([haproxy_binary("haproxy"), "-c", "-f", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for i, port in enumerate((8001, 8002, 8003)):
        assert f"server gateway-{i} 127.0.0.1:{port} check" in text
    assert "bind 127.0.0.1:8000" in text and "timeout server 660s" in text and "timeout client 660s" in text
    assert "retry-on conn-failure empty-response" in text and "option http-buffer-request" in text


def test_one_gateway_needs_no_balancer_and_more_listen_after_the_stacks_port() -> None:
    assert Settings(port=9000).local_gateway_ports() == []
    assert Settings(port=9000, gateways=3).local_gateway_ports() == [9001, 9002, 9003]
    assert Settings(port=9000, gateways=2, gateway_base_port=9500).local_gateway_ports() == [9500, 9501]
