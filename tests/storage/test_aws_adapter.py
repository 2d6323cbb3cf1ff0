"""AWS-only behaviour of the conversation store, against moto over HTTP: layout, encryption, crash safety, retries."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import httpx
import pytest

from shared.errors import InvalidRequestError
from shared.storage.aws.conversations import AwsConversationStore, AwsStoreConfig, ensure_resources
from shared.storage.aws.layout import TTL_GRACE
from shared.storage.conversations import StoreUnavailableError, VersionConflictError, new_conversation_id
from tests.storage.contracts.test_conversation_contract import T0, TENANT, create, msgs
from tests.support.moto_server import unique_names
from tests.support.processes import free_port

SECRET = "the launch code is 0000"


@pytest.fixture
def config(aws_env: None, moto_endpoint: str) -> AwsStoreConfig:
    table, bucket = unique_names()
    config = AwsStoreConfig(table_name=table, bucket=bucket, endpoint_url=moto_endpoint)
    ensure_resources(config)
    return config


@pytest.fixture
def open_store(config: AwsStoreConfig) -> Iterator[Callable[..., AwsConversationStore]]:
    """Opens stores on the test's table and bucket, with config changes; closes them all at the end."""
    opened: list[AwsConversationStore] = []

    def open_with(**changes: Any) -> AwsConversationStore:
        opened.append(AwsConversationStore(config.model_copy(update=changes)))
        return opened[-1]

    yield open_with
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Callable[..., AwsConversationStore]) -> AwsConversationStore:
    return open_store()


def s3(config: AwsStoreConfig) -> Any:
    return boto3.client("s3", endpoint_url=config.endpoint_url, region_name=config.region)


def table_items(config: AwsStoreConfig) -> list[dict[str, Any]]:
    ddb = boto3.resource("dynamodb", endpoint_url=config.endpoint_url, region_name=config.region)
    return ddb.Table(config.table_name).scan(ConsistentRead=True)["Items"]


def append(store: AwsConversationStore, conv_id: str, expected: int, text: str) -> Any:
    return store.append_turn(
        TENANT,
        conv_id,
        expected_version=expected,
        messages=msgs(("user", text)),
        expires_at=None,
        render_version=1,
        now=T0,
    )


# -- layout and encryption ----------------------------------------------------------------------------------------


def test_bodies_are_encrypted_s3_objects_and_dynamodb_holds_no_content(config, store) -> None:
    meta = create(store)
    append(store, meta.id, 1, SECRET)
    keys = [o["Key"] for o in s3(config).list_objects_v2(Bucket=config.bucket)["Contents"]]
    assert keys == [f"{TENANT}/{meta.id}/2.json"]  # the previous version's body is gone once the pointer moved
    head = s3(config).head_object(Bucket=config.bucket, Key=keys[0])
    assert head["ServerSideEncryption"] == "AES256"
    body = json.loads(s3(config).get_object(Bucket=config.bucket, Key=keys[0])["Body"].read())
    assert (body["version"], body["message_count"], body["messages"][-1]["content"]) == (2, 3, SECRET)
    items = table_items(config)
    assert SECRET not in repr(items) and "hello" not in repr(items)
    assert {i["sk"] for i in items} == {
        f"CONV#{meta.id}",
        f"CONV#{meta.id}#TURN#00000001",
        f"CONV#{meta.id}#TURN#00000002",
    }


def test_kms_key_is_used_for_every_body(config, open_store) -> None:
    kms_store = open_store(kms_key_id="alias/fleetchat-test")
    meta = create(kms_store)
    head = s3(config).head_object(Bucket=config.bucket, Key=f"{TENANT}/{meta.id}/1.json")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", "alias/fleetchat-test")


def test_ttl_attribute_is_the_sweep_time_plus_grace(config, store) -> None:
    ddb = boto3.client("dynamodb", endpoint_url=config.endpoint_url, region_name=config.region)
    ttl = ddb.describe_time_to_live(TableName=config.table_name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "expires_at")
    expiring = create(store, expires_in=timedelta(days=30))
    forever = create(store)
    records = {i["sk"]: i for i in table_items(config)}
    assert records[f"CONV#{expiring.id}"]["expires_at"] == int((T0 + timedelta(days=30) + TTL_GRACE).timestamp())
    assert "expires_at" not in records[f"CONV#{forever.id}"]
    ensure_resources(config)  # idempotent


def test_short_body_reads_as_incomplete(config, store) -> None:
    meta = create(store)
    key = f"{TENANT}/{meta.id}/1.json"
    short = {
        "version": 1,
        "message_count": 1,
        "messages": [{"role": "user", "content": "hello", "created_at": T0.isoformat()}],
    }
    s3(config).put_object(Bucket=config.bucket, Key=key, Body=json.dumps(short).encode())
    got = store.get(TENANT, meta.id, now=T0)
    assert got is not None and got.message_count == 2 and len(got.messages) == 1 and not got.complete
    with pytest.raises(StoreUnavailableError):  # appending on top would make the loss permanent
        append(store, meta.id, 1, "more")


def test_list_fills_pages_past_expired_records_and_rejects_garbage_cursors(store) -> None:
    live = create(store, at=T0)
    for minutes in (1, 2, 3):
        create(store, at=T0 + timedelta(minutes=minutes), expires_in=timedelta(days=1))
    page = store.list(TENANT, limit=1, now=T0 + timedelta(days=2))
    assert [c.id for c in page.items] == [live.id] and page.next_cursor is None
    for garbage in ("not base64!", "e30", "Y29udl8x"):
        with pytest.raises(InvalidRequestError) as info:
            store.list(TENANT, cursor=garbage)
        assert info.value.param == "after"


# -- crash between the S3 body and the DynamoDB pointer -----------------------------------------------------------


def test_crash_before_the_pointer_moves_changes_nothing_and_the_orphan_is_reclaimed(
    config, store, open_store, monkeypatch
) -> None:
    meta = create(store)

    def crash(**_: Any) -> None:
        raise RuntimeError("process died")

    with monkeypatch.context() as patched, pytest.raises(RuntimeError):
        patched.setattr(store._ddb, "transact_write_items", crash)
        append(store, meta.id, 1, "lost in the crash")

    orphan = f"{TENANT}/{meta.id}/2.json"
    assert s3(config).head_object(Bucket=config.bucket, Key=orphan)  # the body landed, the pointer did not
    got = store.get(TENANT, meta.id, now=T0)
    assert got is not None and got.version == 1 and got.complete and got.messages[-1].content == "hi there"
    assert not any("TURN#00000002" in i["sk"] for i in table_items(config))
    with pytest.raises(VersionConflictError):  # young orphan: could be a writer still in flight
        append(store, meta.id, 1, "too soon")

    reclaiming = open_store(orphan_reclaim_s=0)
    new = append(reclaiming, meta.id, 1, "after the crash")
    got = store.get(TENANT, meta.id, now=T0)
    assert new.version == 2 and got is not None and got.complete
    assert [m.content for m in got.messages] == ["hello", "hi there", "after the crash"]


# -- retries, through a fault-injecting proxy in front of moto ----------------------------------------------------

THROTTLED = (
    400,
    {"Content-Type": "application/x-amz-json-1.0"},
    json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException", "message": "Rate exceeded"}),
)
UNAVAILABLE = (503, {"Content-Type": "text/plain"}, "Service Unavailable")


class FaultProxy:
    """Real HTTP in front of moto: answers the next `failures` requests with `fault`, forwards the rest.

    `seen` records every request by operation: the DynamoDB target (e.g. "GetItem") or "S3 <METHOD>".
    """

    def __init__(self, upstream: str) -> None:
        self.seen: list[str] = []
        self.failures = 0
        self.fault = UNAVAILABLE
        self._client = httpx.Client(base_url=upstream, timeout=10)
        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def fail(self, failures: int, fault: tuple[int, dict[str, str], str]) -> None:
        self.failures, self.fault = failures, fault
        self.reset()

    def reset(self) -> None:
        self.seen.clear()

    def count(self, operation: str) -> int:
        return self.seen.count(operation)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_one(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = self.headers.get("X-Amz-Target")
                proxy.seen.append(target.split(".")[-1] if target else f"S3 {self.command}")
                if proxy.failures > 0:
                    proxy.failures -= 1
                    status, headers, text = proxy.fault
                    return self.reply(status, headers, text.encode())
                skip = {"host", "connection", "content-length", "transfer-encoding"}
                upstream = proxy._client.request(
                    self.command,
                    self.path,
                    content=body,
                    headers={k: v for k, v in self.headers.items() if k.lower() not in skip},
                )
                passed = {"connection", "content-length", "transfer-encoding", "content-encoding"}
                headers = {k: v for k, v in upstream.headers.items() if k.lower() not in passed}
                if self.command == "HEAD":
                    headers["Content-Length"] = upstream.headers.get("content-length", "0")
                self.reply(upstream.status_code, headers, upstream.content)

            def reply(self, status: int, headers: dict[str, str], content: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(content)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_one

        return Handler


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(moto_endpoint)
    yield proxy
    proxy.close()


@pytest.fixture
def proxied(open_store: Callable[..., AwsConversationStore], proxy: FaultProxy) -> AwsConversationStore:
    return open_store(endpoint_url=proxy.url)


def test_5xx_and_throttling_are_retried_until_they_pass(proxied, proxy) -> None:
    proxy.fail(2, UNAVAILABLE)
    meta = create(proxied)  # the S3 put is the first request: it fails twice, then lands
    assert proxy.seen[:3] == ["S3 PUT"] * 3 and proxy.count("TransactWriteItems") == 1

    proxy.fail(2, THROTTLED)
    got = proxied.get(TENANT, meta.id, now=T0)
    assert got is not None and got.complete and proxy.count("GetItem") == 3


def test_failed_conditions_are_tried_exactly_once(proxied, proxy) -> None:
    meta = create(proxied)
    proxy.reset()
    with pytest.raises(VersionConflictError):  # 1.json exists: S3 answers 412
        proxied.append_turn(
            TENANT, meta.id, expected_version=0, messages=msgs(("user", "x")), expires_at=None, render_version=1
        )
    assert proxy.count("S3 PUT") == 1

    append(proxied, meta.id, 1, "second")  # 1.json is deleted once version 2 is committed
    proxy.reset()
    with pytest.raises(VersionConflictError):  # the body lands, the transaction's condition fails
        proxied.append_turn(
            TENANT, meta.id, expected_version=0, messages=msgs(("user", "x")), expires_at=None, render_version=1
        )
    assert proxy.count("TransactWriteItems") == 1

    proxied.soft_delete(TENANT, meta.id, now=T0)
    proxy.reset()
    assert proxied.rename(TENANT, meta.id, "nope", now=T0) is None
    assert proxy.count("UpdateItem") == 1


def test_exhausted_retries_raise_store_unavailable(proxied, proxy, config) -> None:
    proxy.fail(1000, UNAVAILABLE)
    with pytest.raises(StoreUnavailableError):
        proxied.get(TENANT, new_conversation_id(), now=T0)
    assert proxy.count("GetItem") == config.max_attempts


def test_dead_endpoint_fails_fast_with_store_unavailable(open_store) -> None:
    dead = open_store(endpoint_url=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        dead.get(TENANT, new_conversation_id(), now=T0)
    assert time.monotonic() - started < 3
