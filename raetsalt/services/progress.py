"""Jobs still running, reported by the minion on its own: the waiting client waits on.

Salt's command line waits ``-t`` seconds, then asks each silent minion whether it is
still running the job (``saltutil.find_job``, answered within ``gather_job_timeout``)
and goes on waiting for those that are.  Over RAET the minion says so unasked: while a
published job runs, it sends the master a ``running`` message (road share ``running``,
``{jids: [...]}``, every job of this minion due for a beat in one message) every
``beat_period(ttl)`` seconds, ``ttl`` being the publisher's wait carried by the
publication.  The first beat leaves ``beat_period(ttl)`` after the job started, so a job
shorter than that costs nothing.

The master passes each beat on to the client still waiting for that job's returns, in
the ``job_ret`` messages of that job (``alive``: ids of minions still running it, with
``returns`` empty), and keeps the client's interest in the job alive as long.  The
client extends its wait for a minion to ``-t`` seconds after its last beat: a minion
that runs a long job is waited for, a minion that is gone (stopped, frozen, cut off) is
reported ``-t`` seconds after it last spoke.

Everything here is pure: the minion's beat schedule (``Beats``) and the validation of
what peers send (``running_jids_untrusted``, ``alive_untrusted``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .jids import is_jid

SHARE_RUNNING = "running"
"""Road share: a minion's beat for the jobs it is still running (``{jids}``)."""
BEAT_MIN = 0.25
"""The shortest beat period (s), whatever the ``-t``."""
BEAT_MAX = 5.0
"""The longest beat period (s): a long ``-t`` still hears of the job this often."""
MAX_BEAT_JIDS = 256
"""The most jids one ``running`` message carries (the minion sends more messages, the
master reads no further)."""
MAX_ALIVE = 512
"""The most minion ids one ``alive`` list carries."""


def beat_period(ttl: float) -> float:
    """Seconds between two beats of a job whose publisher waits ``ttl`` seconds: half
    the wait, so that a beat reaches the client well before its wait runs out."""
    if not math.isfinite(ttl) or ttl <= 0:
        return BEAT_MAX
    return min(BEAT_MAX, max(BEAT_MIN, ttl / 2.0))


class Beats:
    """The beat schedule of the published jobs running on one minion."""

    def __init__(self) -> None:
        self._due: dict[str, tuple[float, float]] = {}
        """jid -> (when its next beat is due, its period)."""

    def started(self, jid: str, ttl: float, now: float) -> None:
        """Job ``jid``, published with ``ttl``, started at ``now`` (monotonic)."""
        period = beat_period(ttl)
        self._due[jid] = (now + period, period)

    def finished(self, jid: str) -> None:
        self._due.pop(jid, None)

    def next_due(self) -> float | None:
        """When the next beat is due, or None when no job is running."""
        return min((due for due, _period in self._due.values()), default=None)

    def due(self, now: float) -> list[list[str]]:
        """The jids whose beat is due at ``now`` (each rescheduled), in groups of at most
        ``MAX_BEAT_JIDS`` (one ``running`` message each)."""
        jids: list[str] = []
        for jid, (due, period) in self._due.items():
            if due <= now:
                jids.append(jid)
                # The next beat a period after this one (never in the past again).
                self._due[jid] = (max(due + period, now + period / 2.0), period)
        jids.sort()
        return [jids[i:i + MAX_BEAT_JIDS] for i in range(0, len(jids), MAX_BEAT_JIDS)]

    def __len__(self) -> int:
        return len(self._due)


def running_jids_untrusted(body: Mapping[str, Any]) -> list[str]:
    """The jids of a minion's ``running`` message: well-formed jids only, each once, at
    most ``MAX_BEAT_JIDS``; anything else is left out."""
    jids = body.get("jids")
    if not isinstance(jids, list):
        return []
    seen: dict[str, None] = {}
    for jid in jids[:MAX_BEAT_JIDS]:
        if isinstance(jid, str) and is_jid(jid):
            seen[jid] = None
    return list(seen)


def alive_untrusted(body: Mapping[str, Any]) -> list[str]:
    """The minion ids of a ``job_ret`` message's ``alive`` list (strings only, at most
    ``MAX_ALIVE``); a message without one has none."""
    alive = body.get("alive")
    if not isinstance(alive, list):
        return []
    return [m for m in alive[:MAX_ALIVE] if isinstance(m, str)]


def chunks(ids: list[str]) -> list[list[str]]:
    """``ids`` in groups of at most ``MAX_ALIVE`` (one ``alive`` list each)."""
    return [ids[i:i + MAX_ALIVE] for i in range(0, len(ids), MAX_ALIVE)]
