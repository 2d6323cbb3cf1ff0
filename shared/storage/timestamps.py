"""UTC timestamps as fixed-width ISO strings: they sort as text the way the instants sort in time."""

from __future__ import annotations

from datetime import UTC, datetime

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def utc_now() -> datetime:
    return datetime.now(UTC)


def to_iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return moment.astimezone(UTC).strftime(_FORMAT)


def from_iso(text: str) -> datetime:
    return datetime.strptime(text, _FORMAT).replace(tzinfo=UTC)


def optional_iso(moment: datetime | None) -> str | None:
    return None if moment is None else to_iso(moment)


def optional_from_iso(text: str | None) -> datetime | None:
    return None if text is None else from_iso(text)
