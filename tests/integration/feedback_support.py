"""A gateway on loopback in front of a scripted worker, with helpers to rate answers and read the feedback database."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import openai

from shared.storage.feedback import FeedbackRecord
from shared.storage.sqlite.feedback import SQLiteFeedback
from tests.integration.conftest import Gateway, GatewayFactory
from tests.support.servers import serve
from tests.support.stand_ins.scripted_worker import scripted_worker

ANSWER = "The capital of Portugal is Madrid."


@dataclass
class Setup:
    gw: Gateway
    api: openai.OpenAI
    feedback: SQLiteFeedback  # the gateway's own database file, read directly

    def send(self, method: str, path: str, key: str | None = None, headers: dict | None = None, **kwargs):
        headers = {**self.gw.headers(key), **(headers or {})}
        return httpx.request(method, f"{self.gw.url}{path}", headers=headers, timeout=10, **kwargs)

    def rate(self, conversation_id: str, index: int | str, key: str | None = None, **body) -> httpx.Response:
        path = f"/v1/conversations/{conversation_id}/messages/{index}/feedback"
        return self.send("POST", path, key, json=body)

    def conversation(self, turns: int = 2) -> str:
        """A stored conversation of `turns` user/assistant pairs (messages 0..2*turns-1; answers at odd indices)."""
        first = self.api.chat.completions.create(
            model="mini", messages=[{"role": "user", "content": "Capital of Portugal?"}], extra_body={"store": True}
        )
        conversation_id = first.model_extra["conversation"]["id"]
        for n in range(turns - 1):
            self.api.chat.completions.create(
                model="mini",
                messages=[{"role": "user", "content": f"Are you sure? ({n})"}],
                extra_body={"conversation_id": conversation_id},
            )
        return conversation_id

    def stored(self) -> list[FeedbackRecord]:
        """Every record of every tenant, as the database holds them."""
        return [r for tenant in self.feedback.tenants() for r in self.feedback.list_tenant(tenant)]


@contextmanager
def feedback_gateway(gateway_for: GatewayFactory) -> Iterator[Setup]:
    with serve(scripted_worker(ANSWER, chunk_chars=8, delay_s=0)) as url:
        gw = gateway_for({"mini": [url], "flagship": [url]})
        store = SQLiteFeedback(gw.data_dir / "fleetchat.db")
        try:
            yield Setup(gw, openai.OpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0), store)
        finally:
            store.close()
