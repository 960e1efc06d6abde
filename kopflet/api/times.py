"""
The API's timestamps (metav1.Time), written and read in one place.

Pure: no I/O, no clock. On the wire a metav1.Time is RFC 3339 in UTC with ``Z``, truncated to whole seconds
(``Time.MarshalJSON``); `timestamp` writes that form, `parse_timestamp` reads one from a body.
"""

from __future__ import annotations

import datetime
from typing import Any

NANOS = 1_000_000_000


def timestamp(value: datetime.datetime | int) -> str:
    """RFC 3339 in UTC with ``Z``, truncated to seconds as the API stores it; ints are CRI nanoseconds (since the
    epoch), a naive datetime is taken as UTC."""
    if isinstance(value, int):
        value = datetime.datetime.fromtimestamp(value // NANOS, tz=datetime.UTC)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_timestamp(value: datetime.datetime) -> str:
    """RFC 3339 in UTC with ``Z`` and microseconds (metav1.MicroTime's form); a naive datetime is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(value: Any) -> datetime.datetime | None:
    """A metav1.Time from a body as an aware datetime (a naive one is UTC); None when it is absent or unreadable.

    Takes the RFC 3339 text, or a datetime (some clients hand over parsed timestamps).
    """
    if isinstance(value, datetime.datetime):
        parsed = value
    elif isinstance(value, str) and value:
        try:
            parsed = datetime.datetime.fromisoformat(value)  # reads the "Z" of RFC 3339 too
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)
