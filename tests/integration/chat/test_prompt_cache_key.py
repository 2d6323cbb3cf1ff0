"""OpenAI's `prompt_cache_key` through the real gateway: requests sharing it stick to one replica (where their prefix
KV blocks are) and the key itself never reaches a worker."""

from __future__ import annotations

import openai

from functions.control.routing import HashRing
from tests.integration.conftest import GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker


def test_requests_sharing_a_prompt_cache_key_share_a_replica(gateway_for: GatewayFactory) -> None:
    first_app, second_app = stand_in_worker("first"), stand_in_worker("second")
    with serve(first_app) as first, serve(second_app) as second:
        replicas = [first, second]
        ring = HashRing(replicas)
        keys = {
            owner: next(f"k{i}" for i in range(1000) if next(ring.candidates(f"k{i}")) == owner) for owner in replicas
        }
        gw = gateway_for({"mini": replicas, "flagship": [first]})
        api = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        for owner, name in ((first, "first"), (second, "second")):
            for _ in range(3):
                reply = api.chat.completions.create(
                    model="mini",
                    messages=[{"role": "user", "content": "hi"}],
                    extra_body={"prompt_cache_key": keys[owner]},
                )
                assert reply.choices[0].message.content == name
        assert first_app.state.calls == second_app.state.calls == 3
        bodies = [*first_app.state.bodies, *second_app.state.bodies]
        assert all("prompt_cache_key" not in body and "safety_identifier" not in body for body in bodies)
