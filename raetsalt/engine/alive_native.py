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
road probes at most ``config.alive_rate`` remotes per second on average.  A master with
10,000 minions that each probe it every few seconds therefore hardly probes at all: their
probes keep its ``last_rx`` fresh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raetsalt.engine.alive import AliveInitiator
from raetsalt.engine.native import ACK_NOW
from raetsalt.engine.transaction import Transaction

if TYPE_CHECKING:
    from raetsalt.engine.config import RoadConfig
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Remote


def presence_period(config: RoadConfig, remotes: int) -> float:
    """Seconds of silence after which a remote gets an alive, for a road with ``remotes``."""
    if config.alive_rate <= 0:
        return config.presence_period
    return max(config.presence_period, remotes / config.alive_rate)


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
        self.port.on_alive_answered(self.remote, now)
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
