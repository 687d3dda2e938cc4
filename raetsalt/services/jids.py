"""Job ids: Salt 3008's, the UTC time as ``YYYYMMDDhhmmssffffff`` (20 digits).

Pure: the caller passes the time in (``now``, aware UTC)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

JID = re.compile(r"\d{20}\Z")
"""What a jid looks like (the job cache refuses anything else as a directory name)."""


def new_jid(now: datetime, last: str | None = None) -> str:
    """The jid for a job published at ``now`` (aware UTC); strictly after ``last``."""
    jid = now.astimezone(UTC).strftime("%Y%m%d%H%M%S%f")
    if last is not None and jid <= last:
        jid = f"{int(last) + 1:020d}"
    return jid


def start_time(jid: str) -> str:
    """Salt's ``StartTime`` text for a jid, e.g. ``2026, Nov 21 04:27:25.667286``."""
    moment = datetime.strptime(jid, "%Y%m%d%H%M%S%f")
    return moment.strftime("%Y, %b %d %H:%M:%S.%f")


def is_jid(jid: str) -> bool:
    """``jid`` has the shape of a jid (20 digits)."""
    return JID.match(jid) is not None
