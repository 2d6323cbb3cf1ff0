"""Conversations under faults: store down, torn history, concurrent turns, a gateway killed with -9."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from pathlib import Path

import httpx
import openai
import pytest
from moto.server import ThreadedMotoServer

from shared.api_keys import hash_api_key, new_api_key
from shared.fleet.tiers import Tier
from shared.metric_names import GATEWAY_CONVERSATION_TURNS, counter_sample
from shared.storage.aws.conversations import AwsConversationStore, AwsStoreConfig, ensure_resources
from shared.storage.sqlite.accounts import SQLiteStore
from shared.storage.sqlite.conversations import SQLiteConversationStore
from tests.integration.conftest import GatewayFactory
from tests.support.moto_server import DUMMY_CREDENTIALS, unique_names
from tests.support.processes import ProcessGroup, free_port, start_gateway
from tests.support.prom import labelled
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def _start(api: openai.OpenAI, text: str = "first") -> str:
    reply = api.chat.completions.create(
        model="mini", messages=[{"role": "user", "content": text}], extra_body={"store": True}
    )
    return reply.model_dump()["conversation"]["id"]


def test_store_that_cannot_write_still_answers_and_says_not_saved(gateway_for: GatewayFactory, tmp_path: Path) -> None:
    worker = stand_in_worker("w", echo=True)
    conversations = SQLiteConversationStore(tmp_path / "fleetchat.db", busy_timeout_s=0.2)
    with serve(worker) as url:
        gw = gateway_for({"mini": [url], "flagship": [url]}, conversations=conversations)
        api = _client(gw.url, gw.key)
        conv_id = _start(api)
        # Another process holds the database's write lock (WAL readers still read): no turn can be saved.
        blocker = sqlite3.connect(tmp_path / "fleetchat.db", isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            raw = api.chat.completions.with_raw_response.create(
                model="mini", messages=[{"role": "user", "content": "second"}], extra_body={"conversation_id": conv_id}
            )
            assert raw.headers["x-fleetchat-stored"] == "false"
            assert raw.parse().model_dump()["conversation"] == {
                "id": conv_id,
                "stored": False,
                "history": "loaded",
                "version": None,
            }
            assert raw.parse().choices[0].message.content == "echo: second"
            streamed = list(
                api.chat.completions.create(
                    model="mini",
                    messages=[{"role": "user", "content": "new one"}],
                    extra_body={"store": True},
                    stream=True,
                )
            )
            assert streamed[-1].model_dump()["conversation"]["stored"] is False
            rename = httpx.patch(
                f"{gw.url}/v1/conversations/{conv_id}", json={"title": "x"}, headers=gw.headers(), timeout=10
            )
            assert rename.status_code == 503 and 1 <= int(rename.headers["retry-after"]) <= 60
            turns = counter_sample(GATEWAY_CONVERSATION_TURNS)
            assert labelled(gw.url, turns, history="loaded", stored="false") == 1
            assert labelled(gw.url, turns, history="new", stored="false") == 1
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        detail = httpx.get(f"{gw.url}/v1/conversations/{conv_id}", headers=gw.headers(), timeout=10).json()
        assert (detail["version"], detail["message_count"], detail["title"]) == (1, 2, "first")


def test_torn_history_falls_back_to_a_cold_render(gateway_for: GatewayFactory) -> None:
    worker = stand_in_worker("w", echo=True)
    with serve(worker) as url:
        gw = gateway_for({"mini": [url], "flagship": [url]})
        api = _client(gw.url, gw.key)
        conv_id = _start(api)
        with sqlite3.connect(gw.data_dir / "fleetchat.db") as db:  # lose the stored answer behind the store's back
            db.execute("DELETE FROM messages WHERE conversation_id = ? AND seq = 1", (conv_id,))
        raw = api.chat.completions.with_raw_response.create(
            model="mini", messages=[{"role": "user", "content": "again"}], extra_body={"conversation_id": conv_id}
        )
        assert raw.headers["x-fleetchat-history"] == "cold"
        assert [m["role"] for m in worker.state.bodies[-1]["messages"]] == ["system", "user"]
        assert raw.parse().model_dump()["conversation"]["stored"] is True


async def test_concurrent_turns_on_one_conversation_are_both_kept(gateway_for: GatewayFactory) -> None:
    worker = stand_in_worker("w", echo=True)
    with serve(worker) as url:
        gw = gateway_for({"mini": [url], "flagship": [url]})
        conv_id = _start(_client(gw.url, gw.key))
        api = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=gw.key, max_retries=0)
        replies = await asyncio.gather(
            *(
                api.chat.completions.create(
                    model="mini",
                    messages=[{"role": "user", "content": f"tab {i}"}],
                    stream=True,
                    extra_body={"conversation_id": conv_id},
                )
                for i in range(2)
            )
        )
        closings = [[c async for c in stream][-1].model_dump()["conversation"] for stream in replies]
        assert all(c["stored"] for c in closings) and sorted(c["version"] for c in closings) == [2, 3]
        detail = httpx.get(f"{gw.url}/v1/conversations/{conv_id}", headers=gw.headers(), timeout=10).json()
        contents = [m["content"] for m in detail["messages"]]
        assert detail["version"] == 3 and sorted(contents[2:]) == sorted(
            ["tab 0", "echo: tab 0", "tab 1", "echo: tab 1"]
        )


def test_a_turn_survives_kill_9_of_the_gateway(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    store = SQLiteStore(data_dir / "fleetchat.db")
    tenant = store.create_tenant("t", Tier.PLUS)
    key = new_api_key()
    store.add_api_key(tenant.id, hash_api_key(key), "t")
    store.close()
    group = ProcessGroup(tmp_path / "logs")
    with serve(stand_in_worker("w", echo=True)) as worker_url:
        workers = {"mini": [worker_url], "flagship": [worker_url]}
        try:
            url = start_gateway(group, data_dir, workers, free_port())
            api = _client(url, key)
            conv_id = _start(api, "remember me")
            chunks = list(
                api.chat.completions.create(
                    model="mini",
                    messages=[{"role": "user", "content": "streamed"}],
                    stream=True,
                    extra_body={"conversation_id": conv_id},
                )
            )
            assert chunks[-1].model_dump()["conversation"]["stored"] is True
            group.procs[-1].send_signal(signal.SIGKILL)
            group.procs[-1].wait(timeout=10)
            url = start_gateway(group, data_dir, workers, free_port())
            detail = httpx.get(
                f"{url}/v1/conversations/{conv_id}", headers={"authorization": f"Bearer {key}"}, timeout=10
            ).json()
            assert [m["content"] for m in detail["messages"]] == [
                "remember me",
                "echo: remember me",
                "streamed",
                "echo: streamed",
            ]
        finally:
            group.stop()


def test_aws_store_down_answers_single_turn_and_loses_nothing(
    gateway_for: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    table, bucket = unique_names()
    config = AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=f"http://127.0.0.1:{port}")
    ensure_resources(config)
    worker = stand_in_worker("w", echo=True)
    with serve(worker) as url:
        gw = gateway_for({"mini": [url], "flagship": [url]}, conversations=AwsConversationStore(config))
        api = _client(gw.url, gw.key)
        conv_id = _start(api)
        moto.stop()  # DynamoDB and S3 unreachable
        try:
            raw = api.chat.completions.with_raw_response.create(
                model="mini", messages=[{"role": "user", "content": "second"}], extra_body={"conversation_id": conv_id}
            )
            assert (raw.headers["x-fleetchat-history"], raw.headers["x-fleetchat-stored"]) == ("unavailable", "false")
            assert raw.parse().choices[0].message.content == "echo: second"
            assert [m["role"] for m in worker.state.bodies[-1]["messages"]] == ["system", "user"]
            listing = httpx.get(f"{gw.url}/v1/conversations", headers=gw.headers(), timeout=30)
            assert listing.status_code == 503 and listing.json()["error"]["code"] == "store_unavailable"
        finally:
            moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)  # same backend state
            moto.start()
        try:
            detail = httpx.get(f"{gw.url}/v1/conversations/{conv_id}", headers=gw.headers(), timeout=30).json()
            assert (detail["version"], detail["message_count"]) == (1, 2)
            continued = api.chat.completions.create(
                model="mini", messages=[{"role": "user", "content": "third"}], extra_body={"conversation_id": conv_id}
            )
            assert continued.model_dump()["conversation"] == {
                "id": conv_id,
                "stored": True,
                "history": "loaded",
                "version": 2,
                "message_ids": [2, 3],
            }
        finally:
            moto.stop()
