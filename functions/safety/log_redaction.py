"""Log redaction: a logging filter that replaces PII in log lines with placeholders before any handler writes them.

Where the filter goes, and why: a filter on a *logger* only sees records logged on that very logger, not those
propagated up from its children (``functions.chat.service`` reaching the root logger's handler), so
``install_log_redaction`` puts the filter on every *handler* of the named loggers, where every record that is
written passes. It also goes on the loggers themselves, which covers handlers those loggers gain later. We do not
replace the log record factory (``logging.setLogRecordFactory``): it is process-wide, other libraries install
their own, and it would redact records before ``%`` arguments are known to be final.

Install after logging is configured (``logging.config.dictConfig``, uvicorn's ``log_config``): configuring
replaces handlers, and the new ones carry no filter.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Iterable

from functions.safety.pii import PiiDetector, pii_detector

# "" is the root logger. Under uvicorn's log config "uvicorn" and "uvicorn.access" have their own handlers and do
# not propagate to the root, so they are named.
DEFAULT_LOGGERS: tuple[str, ...] = (
    "",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "fastapi",
    "functions",
    "gpu_workers",
)
REDACTION_FAILED = "[redaction failed]"
# Set on a record once redacted, so a record passing several filtered handlers is scanned once.
_DONE_ATTR = "_fleetchat_pii_redacted"


class PiiRedactingFilter(logging.Filter):
    """Redacts PII from a record's message, exception text and stack text; never drops a record, never raises.

    When the message holds PII and the record has ``%``-style positional arguments, the arguments are redacted one
    by one and the format string is kept, because some formatters read ``record.args`` themselves (uvicorn's access
    formatter unpacks it into client address, method, path...). If that is not enough (PII in the format string,
    or split across arguments), ``record.msg`` becomes the redacted message and ``record.args`` becomes ``()``.
    If redaction itself fails, the message becomes ``"[redaction failed] <logger name>"``.

    Records logged *while* redacting (Presidio logs "Loaded recognizer" when the detector is built and pattern
    timings at DEBUG) get that marker too: redacting them would recurse, and building the shared detector again
    from inside its own construction would deadlock on its lock.
    """

    def __init__(self, detector: PiiDetector | None = None) -> None:
        super().__init__()
        self._detector = detector
        self._busy = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _DONE_ATTR, False):
            return True
        if getattr(self._busy, "active", False):
            _replace_with_marker(record)
        else:
            self._busy.active = True
            try:
                self._redact(record, self._detector or pii_detector())
            except Exception:
                _replace_with_marker(record)
            finally:
                self._busy.active = False
        setattr(record, _DONE_ATTR, True)
        return True

    def _redact(self, record: logging.LogRecord, detector: PiiDetector) -> None:
        message = record.getMessage()
        if detector.find(message):
            args = _redacted_args(record, detector)
            if args is None:
                record.msg = detector.redact(message)
                record.args = ()
            else:
                record.args = args
        if record.exc_info and not record.exc_text:
            # What logging.Formatter.format would cache; formatters reuse exc_text when it is set.
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            record.exc_text = detector.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = detector.redact(record.stack_info)


def _replace_with_marker(record: logging.LogRecord) -> None:
    record.msg = f"{REDACTION_FAILED} {record.name}"
    record.args = ()
    record.exc_info = None
    record.exc_text = None
    record.stack_info = None


def _redacted_args(record: logging.LogRecord, detector: PiiDetector) -> tuple[object, ...] | None:
    """``record.args`` with PII redacted, or None when redacting the arguments alone leaves PII in the message."""
    if not isinstance(record.args, tuple) or not record.args or not isinstance(record.msg, str):
        return None
    if detector.find(record.msg):
        return None
    args = tuple(_redacted_arg(arg, detector) for arg in record.args)
    try:
        message = record.msg % args
    except (TypeError, ValueError, KeyError):
        return None
    return None if detector.find(message) else args


def _redacted_arg(arg: object, detector: PiiDetector) -> object:
    if isinstance(arg, int | float) or arg is None:
        return arg  # kept for %d; a number that is PII shows up in the message check after formatting
    text = arg if isinstance(arg, str) else str(arg)
    redacted = detector.redact(text)
    return arg if redacted == text else redacted


def install_log_redaction(logger_names: Iterable[str] = DEFAULT_LOGGERS) -> PiiRedactingFilter:
    """Attach one shared ``PiiRedactingFilter`` to the named loggers (``""`` is the root) and to their handlers.

    Idempotent: a logger or handler that already has a ``PiiRedactingFilter`` gets no second one. Returns the filter.
    Builds the shared detector now (seconds, the first time), so no log call pays for it.
    """
    redacting = PiiRedactingFilter(pii_detector())
    for name in logger_names:
        logger = logging.getLogger(name)
        for target in (logger, *logger.handlers):
            if not any(isinstance(existing, PiiRedactingFilter) for existing in target.filters):
                target.addFilter(redacting)
    return redacting
