"""Log redaction through real loggers and handlers: messages, %-arguments, exceptions, propagation, installing."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from uvicorn.logging import AccessFormatter

from functions.safety.log_redaction import REDACTION_FAILED, PiiRedactingFilter, install_log_redaction
from functions.safety.pii import PiiDetector, PiiSpan, pii_detector


class Captured:
    """A logger whose only handler writes formatted lines to a StringIO."""

    def __init__(self, name: str, formatter: logging.Formatter | None = None) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(formatter or logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.logger = logging.getLogger(name)
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self.handler)

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def close(self) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.filters.clear()
        self.handler.close()


@pytest.fixture
def captured(request: pytest.FixtureRequest) -> Iterator[Captured]:
    capture = Captured(f"test_log_redaction.{request.node.name}")
    capture.handler.addFilter(PiiRedactingFilter())
    yield capture
    capture.close()


def test_a_message_with_pii_is_redacted(captured: Captured) -> None:
    captured.logger.info("signup from jane@example.com at 10.1.2.3")
    assert captured.text.endswith("INFO signup from [EMAIL] at [IP]\n")


def test_percent_arguments_are_redacted_and_kept_as_arguments(captured: Captured) -> None:
    records: list[logging.LogRecord] = []
    captured.handler.addFilter(lambda record: records.append(record) or True)
    captured.logger.warning("user %s paid with %s (%d items)", "jane@example.com", "4111 1111 1111 1111", 3)
    assert captured.text.endswith("WARNING user [EMAIL] paid with [CARD] (3 items)\n")
    assert records[0].msg == "user %s paid with %s (%d items)"
    assert records[0].args == ("[EMAIL]", "[CARD]", 3)


def test_pii_split_across_arguments_is_redacted_in_the_whole_message(captured: Captured) -> None:
    captured.logger.info("card %s %s", "4111 1111", "1111 1111")
    assert captured.text.endswith("INFO card [CARD]\n")


def test_a_number_argument_that_is_pii_is_redacted(captured: Captured) -> None:
    captured.logger.info("card %d charged", 4111111111111111)
    assert captured.text.endswith("INFO card [CARD] charged\n")


def test_pii_in_the_format_string_itself_is_redacted(captured: Captured) -> None:
    email = "jane@example.com"
    captured.logger.info(f"mail to {email} failed after %d tries", 3)
    assert captured.text.endswith("INFO mail to [EMAIL] failed after 3 tries\n")


def test_mapping_arguments_are_redacted(captured: Captured) -> None:
    captured.logger.info("%(who)s called %(phone)s", {"who": "support", "phone": "+1 415 555 2671"})
    assert captured.text.endswith("INFO support called [PHONE]\n")


def test_a_message_without_pii_is_left_alone(captured: Captured) -> None:
    records: list[logging.LogRecord] = []
    captured.handler.addFilter(lambda record: records.append(record) or True)
    args = ("mini", 42)
    captured.logger.info("routed to %s in %d ms", *args)
    assert captured.text.endswith("INFO routed to mini in 42 ms\n")
    assert records[0].msg == "routed to %s in %d ms"
    assert records[0].args == args


def test_an_exception_with_pii_in_its_message_is_redacted(captured: Captured) -> None:
    try:
        raise ValueError("no account for jane@example.com (key fc-Zq3_x-9Lm2Pp7Rt0Vw5Yb8Nc4Kd1Jh6)")
    except ValueError:
        captured.logger.exception("lookup failed for %s", "+44 20 7946 0958")
    assert "jane@example.com" not in captured.text
    assert "fc-Zq3" not in captured.text
    assert "7946" not in captured.text
    assert "ERROR lookup failed for [PHONE]\n" in captured.text
    assert "Traceback (most recent call last):" in captured.text
    assert "ValueError: no account for [EMAIL] (key [SECRET])" in captured.text


def test_stack_info_is_redacted(captured: Captured) -> None:
    record = captured.logger.makeRecord(
        captured.logger.name,
        logging.INFO,
        __file__,
        1,
        "here",
        (),
        None,
        sinfo="Stack:\n  key = 'AKIAIOSFODNN7EXAMPLE'",
    )
    captured.logger.handle(record)
    assert captured.text.endswith("INFO here\nStack:\n  key = '[SECRET]'\n")


def test_uvicorn_access_lines_keep_working_with_client_ips_and_paths_redacted() -> None:
    capture = Captured(
        "test_log_redaction.access",
        AccessFormatter('%(client_addr)s "%(request_line)s" %(status_code)s', use_colors=False),
    )
    capture.handler.addFilter(PiiRedactingFilter())
    try:
        capture.logger.info(
            '%s - "%s %s HTTP/%s" %d', "203.0.113.9:51234", "GET", "/v1/export?email=jane@example.com", "1.1", 200
        )
    finally:
        capture.close()
    assert capture.text == '[IP]:51234 "GET /v1/export?email=[EMAIL] HTTP/1.1" 200 OK\n'


def test_a_failing_redaction_logs_a_marker_instead_of_dropping_the_line(captured: Captured) -> None:
    class Broken(PiiDetector):
        def __init__(self) -> None:
            pass

        def find(self, text: str) -> list[PiiSpan]:
            raise RuntimeError("boom")

    captured.handler.filters.clear()
    captured.handler.addFilter(PiiRedactingFilter(Broken()))
    try:
        raise KeyError("jane@example.com")
    except KeyError:
        captured.logger.exception("lost %s", "jane@example.com")
    assert captured.text == f"{captured.logger.name} ERROR {REDACTION_FAILED} {captured.logger.name}\n"


def test_a_record_logged_while_redacting_gets_the_marker_instead_of_recursing(captured: Captured) -> None:
    class Chatty(PiiDetector):
        """Logs from inside detection, as Presidio does at DEBUG."""

        def __init__(self, inner: PiiDetector) -> None:
            self._inner = inner

        def find(self, text: str) -> list[PiiSpan]:
            captured.logger.debug("matching %s", text)
            return self._inner.find(text)

    captured.handler.filters.clear()
    captured.handler.addFilter(PiiRedactingFilter(Chatty(pii_detector())))
    captured.logger.info("mail %s", "jane@example.com")
    name = captured.logger.name
    assert "jane@example.com" not in captured.text
    assert f"{name} INFO mail [EMAIL]\n" in captured.text
    assert f"{name} DEBUG {REDACTION_FAILED} {name}\n" in captured.text


def test_several_filtered_handlers_each_write_the_redacted_line(captured: Captured) -> None:
    second = io.StringIO()
    handler = logging.StreamHandler(second)
    handler.addFilter(PiiRedactingFilter())
    captured.logger.addHandler(handler)
    try:
        captured.logger.info("ssn %s", "536-22-1234")
    finally:
        captured.logger.removeHandler(handler)
    assert captured.text.endswith("INFO ssn [SSN]\n")
    assert second.getvalue() == "ssn [SSN]\n"


@pytest.fixture
def parent() -> Iterator[Captured]:
    capture = Captured("test_log_redaction_install")
    yield capture
    capture.close()


def test_install_covers_records_propagated_from_child_loggers(parent: Captured) -> None:
    install_log_redaction([parent.logger.name])
    logging.getLogger(f"{parent.logger.name}.chat_service").error("prompt had jane@example.com")
    parent.logger.info("key %s", "AKIAIOSFODNN7EXAMPLE")
    assert parent.text.splitlines() == [
        f"{parent.logger.name}.chat_service ERROR prompt had [EMAIL]",
        f"{parent.logger.name} INFO key [SECRET]",
    ]


def test_install_is_idempotent(parent: Captured) -> None:
    first = install_log_redaction([parent.logger.name])
    install_log_redaction([parent.logger.name, parent.logger.name])
    assert [f for f in parent.handler.filters if isinstance(f, PiiRedactingFilter)] == [first]
    assert [f for f in parent.logger.filters if isinstance(f, PiiRedactingFilter)] == [first]
    parent.logger.info("mail %s", "jane@example.com")
    assert parent.text.endswith("INFO mail [EMAIL]\n")


def test_install_with_defaults_reaches_the_root_loggers_handlers() -> None:
    root = logging.getLogger()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root.addHandler(handler)
    touched = [root, handler, *(logging.getLogger(n) for n in ("uvicorn", "uvicorn.error", "uvicorn.access"))]
    before = {id(t): list(t.filters) for t in touched}
    try:
        install_log_redaction()
        logging.getLogger("functions.test_log_redaction").warning("call +1 415 555 2671")
    finally:
        root.removeHandler(handler)
        for target in touched:
            target.filters[:] = before[id(target)]
        for name in ("", "uvicorn", "uvicorn.error", "uvicorn.access", "fastapi", "functions", "gpu_workers"):
            logger = logging.getLogger(name)
            logger.filters[:] = [f for f in logger.filters if not isinstance(f, PiiRedactingFilter)]
    assert stream.getvalue() == "call [PHONE]\n"
