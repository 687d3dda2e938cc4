"""Presence over a native session: cheap alives, only when a remote has been silent.

raet's alive (``engine/alive.py``) is a signed packet answered by a signed packet: an
Ed25519 signature and a verification on each side, per alive.  Once a native session is
up, ``NativeAlive`` instead sends one native packet whose only frame is ``ACK_NOW``: the
session box authenticates it (no signature), and the other end answers with its native
ack, which the road already counts as authenticated traffic (``last_rx``).  A raet-compat
session keeps raet's alive.

If the native probe gets no answer within half the alive time-out, a raet alive follows
it for the other half before the remote counts as silent (so a silent remote is declared
dead as soon as with raet's alive alone): a restarted remote has lost the session key and
cannot read the probe, but answers the signed alive with ``unallowed`` (so we allow again
at once), and a raetsalt of an older native version acknowledges only data.

The presence period adapts to the number of remotes (``presence_period``): an alive goes
to a remote only after it has been silent for the period, and the period grows so that a
road probes at most ``config.alive_rate`` remotes per second on average.  A main also
tells its remotes how long they may stay silent (``announced_period``: a little less
than its own period, at most ``ALIVE_HINT_MAX``), in a ``HINT`` frame of the session
(``native/frames.py``) at its start and in the answer to every probe, so a remote that
connected early learns a longer period at its next probe; the remote takes it as its
period for that main (``Remote.presence_hint``, bounded).  So the minions' probes, not
the main's, keep both sides informed, and a main with 10,000 minions gets a few hundred
probes a second, not thousands.  A road that asks for nothing sends no hint (and a 0
to withdraw one it gave).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from raetsalt.engine.alive import AliveInitiator
from raetsalt.engine.native.frames import ACK_NOW
from raetsalt.engine.transaction import Transaction

if TYPE_CHECKING:
    from raetsalt.engine.config import RoadConfig
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Remote


ALIVE_HINT_MAX = 20.0
"""The longest silence a main asks of its remotes (they notice its loss within this plus
the alive time-out)."""
HINT_SHARE = 0.8
"""A main asks its remotes to probe a little before its own period is up, so that it
never probes them itself."""


def presence_period(config: RoadConfig, remotes: int, hint: float = 0.0) -> float:
    """Seconds of silence after which a remote gets an alive, for a road with ``remotes``
    (``hint``: what that remote asked for, see ``announced_period``)."""
    period = max(config.presence_period, hint)
    if config.alive_rate <= 0:
        return period
    return max(period, remotes / config.alive_rate)


PRESENCE_GRID = 0.125
"""Presence deadlines are rounded up to this grid, so that a main's thousands of per-remote
timers fire a few times a second together, not one wake-up each."""


def probe_at(config: RoadConfig, remotes: int, remote: Remote) -> float:
    """When ``remote``, silent since ``last_rx``, gets an alive (of a road with ``remotes``),
    on the ``PRESENCE_GRID``."""
    due = remote.last_rx + presence_period(config, remotes, remote.presence_hint)
    return math.ceil(due / PRESENCE_GRID) * PRESENCE_GRID


def announced_period(config: RoadConfig, remotes: int) -> float:
    """The period a main asks its remotes to use (0: their own is fine)."""
    period = presence_period(config, remotes)
    if period <= config.presence_period:
        return 0.0
    return min(HINT_SHARE * period, ALIVE_HINT_MAX)


def hint_millis(period: float) -> int:
    """``announced_period``'s answer as a HINT frame carries it (milliseconds)."""
    return round(min(max(period, 0.0), ALIVE_HINT_MAX) * 1000)


def take_hint_untrusted(remote: Remote, value: Any) -> None:
    """The period ``remote`` asked for (a number of seconds; anything else is ignored,
    and it is bounded by ``ALIVE_HINT_MAX``)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        remote.presence_hint = min(max(float(value), 0.0), ALIVE_HINT_MAX)


def start_alive(port: RoadPort, remote: Remote, now: float) -> Transaction:
    """Start the alive that fits the session: native if there is a native channel."""
    txn: Transaction
    if remote.channel is not None:
        txn = NativeAlive(port, remote, now=now)
    else:
        txn = AliveInitiator(port, remote, now=now)
    remote.transactions[txn.key] = txn
    txn.start(now)
    return txn


class NativeAlive(AliveInitiator):
    """A native probe: ``ACK_NOW`` alone, answered by the other end's ack.

    raet's alive in kind, ids and redo times, but it sends nothing the other end must
    match to a transaction, so its ids are only our own bookkeeping key.  It checks for
    an answer at its redo times (the road marks the remote alive on receipt of anything
    authenticated) and sends the probe again while there is none.
    """

    def __init__(self, port: RoadPort, remote: Remote, *, now: float) -> None:
        super().__init__(port, remote, now=now)
        self.timeout_at = now + port.config.alive_timeout / 2

    def start(self, now: float) -> None:
        self._probe(now)

    def _probe(self, now: float) -> None:
        channel = self.remote.channel
        if channel is None:  # the session ended meanwhile
            self.finish()
            return
        self.port.transmit_datagram(bytes(channel.seal_packet(ACK_NOW)), self.remote.ha)
        self.port.stats["native_alive_tx"] += 1
        self.restart_redo(now)

    def _answered(self, now: float) -> bool:
        if self.remote.last_rx <= self.started:
            return False
        self.finish()
        self.port.service_remote(self.remote, now)
        return True

    def on_redo(self, now: float) -> None:
        if not self._answered(now):
            self._probe(now)

    def on_timeout(self, now: float) -> None:
        if self._answered(now):
            return
        self.finish()
        self.port.stats["native_alive_fallback"] += 1
        # The session may be gone on the other side (restart): a signed alive finds out.
        fallback = AliveInitiator(self.port, self.remote, now=now)
        fallback.timeout_at = self.started + self.port.config.alive_timeout
        self.remote.transactions[fallback.key] = fallback
        fallback.start(now)
