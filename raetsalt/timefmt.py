"""Salt's time texts, pure: the caller reads the clock and passes the moment in."""

from __future__ import annotations

from datetime import UTC, datetime


def salt_stamp(now: datetime) -> str:
    """Salt's ``_stamp`` of an event: naive ISO-8601 UTC, e.g.
    ``2026-05-01T12:00:00.123456`` (``now`` is aware; a naive one is taken as local)."""
    return now.astimezone(UTC).replace(tzinfo=None).isoformat()
