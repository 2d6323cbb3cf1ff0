"""A local HTTP fake of Stripe's Billing meter-events API, speaking Stripe's v1 wire protocol, with fault injection."""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

METER_EVENTS_PATH = "/v1/billing/meter_events"
METERS_PATH = "/v1/billing/meters"
CUSTOMER_KEY = "stripe_customer_id"
VALUE_KEY = "value"
MAX_STRING_LEN = 100
MAX_PAST_S = 35 * 24 * 3600
MAX_FUTURE_S = 5 * 60
IDEMPOTENCY_TTL_S = 24 * 3600
DEFAULT_API_VERSION = "2025-01-27.acacia"


@dataclass(frozen=True)
class MeterEvent:
    """One meter event the fake accepted (recorded exactly once per identifier)."""

    event_name: str
    identifier: str
    customer_id: str
    value: Decimal
    timestamp: int
    created: int
    payload: dict[str, str] = field(hash=False)
    livemode: bool = False
    idempotency_key: str | None = None

    def as_stripe_object(self) -> dict[str, Any]:
        return {
            "object": "billing.meter_event",
            "created": self.created,
            "event_name": self.event_name,
            "identifier": self.identifier,
            "livemode": self.livemode,
            "payload": dict(self.payload),
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True)
class ReceivedRequest:
    """One HTTP request the fake read; status is None when the connection was dropped without a response."""

    method: str
    path: str
    idempotency_key: str | None
    status: int | None
    replayed: bool = False


class _StripeHTTPError(Exception):
    def __init__(
        self,
        status: int,
        error: dict[str, Any],
        headers: dict[str, str] | None = None,
        should_retry: bool | None = None,
    ) -> None:
        super().__init__(error.get("message"))
        self.status = status
        self.error = error
        self.headers = headers or {}
        self.should_retry = should_retry


def _invalid(message: str, param: str | None = None, code: str | None = None) -> _StripeHTTPError:
    error: dict[str, Any] = {"type": "invalid_request_error", "message": message}
    if param is not None:
        error["param"] = param
    if code is not None:
        error["code"] = code
    return _StripeHTTPError(400, error)


def _missing(param: str) -> _StripeHTTPError:
    return _invalid(f"Missing required param: {param}.", param, "parameter_missing")


def _injected_error(status: int) -> dict[str, Any]:
    if status == 429:
        return {
            "type": "invalid_request_error",
            "code": "rate_limit",
            "message": "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.",
        }
    if status == 409:
        return {
            "type": "invalid_request_error",
            "code": "lock_timeout",
            "message": "This object cannot be accessed right now because another API request or Stripe process is "
            "currently accessing it.",
        }
    if status >= 500:
        return {"type": "api_error", "message": "An unknown error occurred"}
    return {"type": "invalid_request_error", "message": f"Injected failure with HTTP status {status}."}


def _request_id() -> str:
    return "req_" + secrets.token_hex(7)


@dataclass
class _Reply:
    status: int
    body: bytes
    headers: dict[str, str]
    drop: bool = False
    replayed: bool = False


@dataclass
class _Saved:
    fingerprint: tuple[str, str, tuple[tuple[str, str], ...]]
    status: int
    body: bytes
    request_id: str
    saved_at: float


class FakeStripe:
    """Stripe's `POST /v1/billing/meter_events` on a real loopback port, in a background thread.

    Use as `with FakeStripe() as fake:` and point the SDK at it with
    `stripe.StripeClient(key, base_addresses={"api": fake.url})`.
    """

    def __init__(
        self,
        *,
        api_key: str | None = None,
        clock: Callable[[], float] = time.time,
        identifier_window_s: float | None = None,
        meters: tuple[str, ...] = (),
    ) -> None:
        """api_key: accept only this key (default: any `sk_`/`rk_` key). clock: epoch seconds, see `now`.
        identifier_window_s: how long an identifier blocks a re-send (default: forever; Stripe: at least 24 h).
        meters: the event names of the account's active Billing meters (`GET /v1/billing/meters` lists them)."""
        self.api_key = api_key
        self.meters = meters
        self.clock: Callable[[], float] = clock
        self.identifier_window_s = identifier_window_s
        self._lock = threading.Lock()
        self._events: list[MeterEvent] = []
        self._requests: list[ReceivedRequest] = []
        self._identifiers: dict[str, float] = {}
        self._idempotency: dict[tuple[str, str], _Saved] = {}
        self._fail_budget = 0
        self._fail_status = 500
        self._fail_should_retry: bool | None = None
        self._drop_budget = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    # lifecycle

    def start(self) -> FakeStripe:
        if self._server is None:
            self._serve(self._port or 0)
        return self

    def stop(self) -> None:
        self._shutdown()

    def __enter__(self) -> FakeStripe:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FakeStripe is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self, port: int) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", port), _make_handler(self))
        server.daemon_threads = True
        self._port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-stripe", daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread

    def _shutdown(self) -> None:
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    # clock

    @property
    def now(self) -> int:
        """The fake's current time in epoch seconds (used for `created` and the timestamp window)."""
        return int(self.clock())

    @now.setter
    def now(self, value: float | datetime) -> None:
        """Freeze the clock at `value` (epoch seconds or an aware datetime)."""
        frozen = value.timestamp() if isinstance(value, datetime) else float(value)
        self.clock = lambda: frozen

    def advance(self, seconds: float) -> None:
        """Freeze the clock `seconds` after the current fake time."""
        self.now = self.clock() + seconds

    # recorded state

    @property
    def events(self) -> list[MeterEvent]:
        with self._lock:
            return list(self._events)

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def requests_received(self) -> int:
        with self._lock:
            return len(self._requests)

    def totals(self) -> dict[tuple[str, str], Decimal]:
        """Sum of accepted values per (customer_id, event_name)."""
        sums: dict[tuple[str, str], Decimal] = {}
        for event in self.events:
            key = (event.customer_id, event.event_name)
            sums[key] = sums.get(key, Decimal(0)) + event.value
        return sums

    def identifiers(self) -> set[str]:
        return {event.identifier for event in self.events}

    def clear(self) -> None:
        """Forget events, identifiers, idempotency keys, request log and pending faults (the server keeps running)."""
        with self._lock:
            self._events.clear()
            self._requests.clear()
            self._identifiers.clear()
            self._idempotency.clear()
            self._fail_budget = 0
            self._drop_budget = 0

    # fault injection

    def fail_next(self, n: int, status: int = 500, *, should_retry: bool | None = None) -> None:
        """Answer the next n requests (any path, before auth) with `status` and a Stripe error body; nothing is
        recorded or saved for idempotency. should_retry sets the `Stripe-Should-Retry` header when not None."""
        with self._lock:
            self._fail_budget, self._fail_status, self._fail_should_retry = n, status, should_retry

    def accept_then_drop(self, n: int) -> None:
        """Record the next n newly accepted meter events, then close the connection without any response."""
        with self._lock:
            self._drop_budget = n

    def go_down(self) -> None:
        """Close the listening socket: clients get connection refused until `come_back()`."""
        if self._port is None:
            raise RuntimeError("FakeStripe is not started")
        self._shutdown()

    def come_back(self) -> None:
        """Listen again on the same port (same `url`)."""
        if self._server is None:
            self._serve(self.port)

    @property
    def is_down(self) -> bool:
        return self._server is None

    # request handling (called from handler threads)

    def _handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> _Reply:
        path = urlsplit(raw_path).path
        idempotency_key = headers.get("idempotency-key")
        request_id = _request_id()
        api_version = headers.get("stripe-version", DEFAULT_API_VERSION)
        with self._lock:
            try:
                reply = self._dispatch(method, path, headers, body, idempotency_key, request_id)
            except _StripeHTTPError as exc:
                reply = _Reply(exc.status, _json({"error": exc.error}), dict(exc.headers))
                if exc.should_retry is not None:
                    reply.headers["Stripe-Should-Retry"] = "true" if exc.should_retry else "false"
            reply.headers.setdefault("request-id", request_id)
            reply.headers["Stripe-Version"] = api_version
            if idempotency_key:
                reply.headers["Idempotency-Key"] = idempotency_key
            status = None if reply.drop else reply.status
            self._requests.append(ReceivedRequest(method, path, idempotency_key, status, reply.replayed))
        return reply

    def _dispatch(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        idempotency_key: str | None,
        request_id: str,
    ) -> _Reply:
        if self._fail_budget > 0:
            self._fail_budget -= 1
            status = self._fail_status
            raise _StripeHTTPError(status, _injected_error(status), should_retry=self._fail_should_retry)
        api_key = self._authenticate(headers.get("authorization"))
        if path == METERS_PATH and method == "GET":
            data = [_meter(event_name, api_key) for event_name in self.meters]
            return _Reply(200, _json({"object": "list", "data": data, "has_more": False, "url": METERS_PATH}), {})
        if path != METER_EVENTS_PATH or method != "POST":
            raise _StripeHTTPError(
                404,
                {
                    "type": "invalid_request_error",
                    "message": f"Unrecognized request URL ({method}: {path}). Please see https://stripe.com/docs "
                    "or we can help at https://support.stripe.com/.",
                },
            )
        try:
            params = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError as exc:
            raise _invalid("Invalid request body: not UTF-8 form data.") from exc
        fingerprint = (method, path, tuple(sorted(params)))
        now = self.clock()
        if idempotency_key:
            saved = self._saved_response(api_key, idempotency_key, now)
            if saved is not None:
                if saved.fingerprint != fingerprint:
                    raise _StripeHTTPError(
                        400,
                        {
                            "type": "idempotency_error",
                            "message": "Keys for idempotent requests can only be used with the same parameters they "
                            f"were first used with. Try using a key other than '{idempotency_key}' if you meant to "
                            "execute a different request.",
                        },
                    )
                replay_headers = {"Idempotent-Replayed": "true", "Original-Request": saved.request_id}
                return _Reply(saved.status, saved.body, replay_headers, replayed=True)
        event = self._create_meter_event(dict(params), params, now, api_key, idempotency_key)
        body_out = _json(event.as_stripe_object())
        if idempotency_key:
            self._idempotency[(api_key, idempotency_key)] = _Saved(fingerprint, 200, body_out, request_id, now)
        drop = self._drop_budget > 0
        if drop:
            self._drop_budget -= 1
        return _Reply(200, body_out, {}, drop=drop)

    def _authenticate(self, authorization: str | None) -> str:
        scheme, _, key = (authorization or "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise _StripeHTTPError(
                401,
                {
                    "type": "invalid_request_error",
                    "message": "You did not provide an API key. You need to provide your API key in the Authorization "
                    "header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See "
                    "https://stripe.com/docs/api#authentication for details, or we can help at "
                    "https://support.stripe.com/.",
                },
                {"WWW-Authenticate": 'Bearer realm="Stripe"'},
            )
        if not key.startswith(("sk_", "rk_")) or (self.api_key is not None and key != self.api_key):
            raise _StripeHTTPError(
                401,
                {"type": "invalid_request_error", "message": f"Invalid API Key provided: {_mask(key)}"},
                {"WWW-Authenticate": 'Bearer realm="Stripe"'},
            )
        return key

    def _saved_response(self, api_key: str, idempotency_key: str, now: float) -> _Saved | None:
        saved = self._idempotency.get((api_key, idempotency_key))
        if saved is not None and now - saved.saved_at >= IDEMPOTENCY_TTL_S:
            del self._idempotency[(api_key, idempotency_key)]
            return None
        return saved

    def _create_meter_event(
        self,
        flat: dict[str, str],
        params: list[tuple[str, str]],
        now: float,
        api_key: str,
        idempotency_key: str | None,
    ) -> MeterEvent:
        payload: dict[str, str] = {}
        for key, value in params:
            if key.startswith("payload[") and key.endswith("]") and len(key) > len("payload[]"):
                payload[key[len("payload[") : -1]] = value
            elif key not in ("event_name", "identifier", "timestamp") and not key.startswith("expand["):
                raise _invalid(f"Received unknown parameter: {key}", key, "parameter_unknown")

        event_name = flat.get("event_name", "")
        if not event_name:
            raise _missing("event_name")
        if len(event_name) > MAX_STRING_LEN:
            raise _invalid(f"Invalid event_name: must be at most {MAX_STRING_LEN} characters", "event_name")
        if not payload:
            raise _missing("payload")
        customer_id = payload.get(CUSTOMER_KEY, "")
        if not customer_id:
            raise _missing(f"payload[{CUSTOMER_KEY}]")
        raw_value = payload.get(VALUE_KEY, "")
        if not raw_value:
            raise _missing(f"payload[{VALUE_KEY}]")
        try:
            value = Decimal(raw_value)
        except InvalidOperation:
            value = Decimal("NaN")
        if not value.is_finite():
            raise _invalid(
                f"Invalid payload[{VALUE_KEY}]: must be a number, got {raw_value!r}", f"payload[{VALUE_KEY}]"
            )

        timestamp = int(now)
        raw_timestamp = flat.get("timestamp", "")
        if raw_timestamp:
            try:
                timestamp = int(raw_timestamp)
            except ValueError as exc:
                raise _invalid(f"Invalid integer: {raw_timestamp}", "timestamp", "parameter_invalid_integer") from exc
            if timestamp < now - MAX_PAST_S or timestamp > now + MAX_FUTURE_S:
                raise _invalid(
                    "Timestamp must be within the past 35 calendar days and no more than 5 minutes in the future.",
                    "timestamp",
                )

        identifier = flat.get("identifier", "") or str(uuid.uuid4())
        if len(identifier) > MAX_STRING_LEN:
            raise _invalid(f"Invalid identifier: must be at most {MAX_STRING_LEN} characters", "identifier")
        seen_at = self._identifiers.get(identifier)
        if seen_at is not None and (self.identifier_window_s is None or now - seen_at < self.identifier_window_s):
            raise _invalid(
                f"An event already exists with identifier {identifier}.", "identifier", "resource_already_exists"
            )

        event = MeterEvent(
            event_name=event_name,
            identifier=identifier,
            customer_id=customer_id,
            value=value,
            timestamp=timestamp,
            created=int(now),
            payload=payload,
            livemode=api_key.startswith(("sk_live_", "rk_live_")),
            idempotency_key=idempotency_key,
        )
        self._identifiers[identifier] = now
        self._events.append(event)
        return event


def _meter(event_name: str, api_key: str) -> dict[str, Any]:
    """A Billing meter as Stripe lists it (the fields a client reads)."""
    return {
        "object": "billing.meter",
        "id": "mtr_" + uuid.uuid5(uuid.NAMESPACE_URL, event_name).hex[:24],
        "event_name": event_name,
        "display_name": event_name,
        "status": "active",
        "livemode": api_key.startswith(("sk_live_", "rk_live_")),
        "default_aggregation": {"formula": "sum"},
        "customer_mapping": {"event_payload_key": CUSTOMER_KEY, "type": "by_id"},
        "value_settings": {"event_payload_key": VALUE_KEY},
    }


def _json(obj: object) -> bytes:
    return json.dumps(obj, indent=2).encode()


def _mask(key: str) -> str:
    prefix = key[: key.find("_", 3) + 1] if key.count("_") >= 2 else ""
    return f"{prefix}{'*' * 12}{key[-4:]}"


def _make_handler(fake: FakeStripe) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "nginx"
        sys_version = ""

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = fake._handle(self.command, self.path, headers, body)
            if reply.drop:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply.body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply.body)

        do_GET = _serve
        do_POST = _serve
        do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
