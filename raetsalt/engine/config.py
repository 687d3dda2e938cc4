"""``RoadConfig``: the tunables of one road (frozen; defaults follow raet 0.6.8 where raet
has one)."""

from __future__ import annotations

from dataclasses import dataclass

from raetsalt.keep.records import AutoMode
from raetsalt.wire.enums import BodyKind


@dataclass(frozen=True, slots=True)
class RoadConfig:
    """Tunables of a road.  Defaults follow raet 0.6.8 where raet has one."""

    auto: AutoMode = AutoMode.NEVER
    """How remote keys seen for the first time are accepted."""
    join_timeout: float = 5.0
    join_pending_timeout: float = 120.0
    """How long a join waits for an operator while the other side keeps asking."""
    pending_retry: float = 0.5
    """How often a correspondent whose key the joiner holds as pending asks again."""
    acceptance_wait_time: float = 10.0
    """Seconds a joiner whose key is pending on the other side waits before it asks
    again (Salt's minion key, same default; at least ``MIN_ACCEPTANCE_WAIT``)."""
    acceptance_wait_time_max: float = 0.0
    """When above ``acceptance_wait_time``: the wait doubles after each ask, up to this
    (Salt's key; 0, the default: the wait does not grow).  ``raetsalt.engine.join``."""
    alive_timeout: float = 2.0
    presence_period: float = 1.0
    """An alive is sent to a remote that has been silent this long (at least)."""
    alive_rate: float = 200.0
    """Alives per second a road sends at most on average: with more remotes than
    ``alive_rate * presence_period`` the period grows with their number (0: fixed)."""
    message_timeout: float = 30.0
    window: int = 256
    """Segments a raet-profile message sender may have in flight beyond the receiver's last
    ack (0: all).  256 x 1 KiB stays well below the 4 MiB socket buffers the UDP driver
    asks for; a smaller buffer only costs resends."""
    ack_every: int = 32
    """A raet-profile sender flags every this many-th segment ``wf`` (the receiver acks it)."""
    lazy_verify: bool = True
    """Store message segments without ``wf`` of a known message before checking their
    signatures; the message's box authenticates them (see ``raetsalt.engine.message``)."""
    max_packet_size: int = 1024
    max_message_size: int = 16 * 1024 * 1024
    max_receivers: int = 64
    """Concurrent incoming messages per remote."""
    rejoin_after: int = 3
    """Consecutive unanswered alives after which a connecting side re-joins."""
    retry_min: float = 0.5
    retry_max: float = 10.0
    """Bounds of the jittered back-off between connection attempts."""
    body_kind: BodyKind = BodyKind.JSON
    native: bool = True
    """Offer and accept the native profile (used only when both ends are raetsalt)."""
    native_datagram_size: int = 1400
    """Largest native datagram on real networks (fits a 1500-byte MTU with IPv6)."""
    native_loopback_datagram_size: int = 65000
    """Largest native datagram to a loopback address, where the MTU is 64 KiB."""
    native_trains: bool = False
    """``datagrams_to_send`` may return a burst of equal-size native datagrams as one
    ``trains.Train`` (set by a driver that sends them: one UDP GSO send, or each alone)."""
    native_window: int = 2 * 1024 * 1024
    """Bytes a native sender may have unacknowledged (below the receiver's socket buffer)."""
    # Reserved bytes of undelivered messages per remote / in all, a partial one's time-out
    # (engine.reassembly); the largest native message on the express stream (scheduler).
    reassembly_per_remote: int = 32 * 1024 * 1024
    reassembly_total: int = 256 * 1024 * 1024
    reassembly_timeout: float = 30.0
    native_express_size: int = 16 * 1024
    native_rekey_interval: float = 120.0
    native_rekey_packets: int = 1 << 24
    """A native session's key rotates after this many seconds or datagrams sealed under it,
    whichever comes first (engine/native/rekey.py; WireGuard rotates every 120 s)."""
    native_reject_after: float = 180.0
    native_reject_packets: int = 1 << 25
    """A native session whose key is this many seconds old, or sealed this many datagrams,
    because no rotation completed (a path that drops key frames) is ended and handshaken
    again (WireGuard's REJECT_AFTER_TIME / REJECT_AFTER_MESSAGES).  Each counts as at
    least 1.5 times the rotation's own limit above, so a rotation always comes first."""
    native_rekey_min_gap: float = 5.0
    """Seconds a key is used at least before the other end may start the next rotation
    (at most half of ``native_rekey_interval``; also allowed once we sealed half of
    ``native_rekey_packets`` under it): an offer that comes sooner is a counted drop."""
    # -- limits on unauthenticated input --------------------------------------------------
    max_pending: int = 1000
    """Keys waiting for an operator; joins of further new ids are dropped and counted."""
    new_ids_burst: int = 20
    new_ids_per_second: float = 2.0
    """Joins of ids never seen before, per source address: a burst, then this rate."""
    amplification: int = 3
    """An address no session has validated gets at most this many bytes per byte it sent."""
    max_joins: int = 1024
    """Join correspondents at once (each holds a little state for an unsigned request)."""
    max_joins_per_remote: int = 4
    """Join correspondents for one known estate, from different addresses."""
    handshake_rate: float = 2000.0
    handshake_burst: float = 1000.0
    """Handshakes (join requests, allow hellos) a road takes per second, and at once; the
    others get a stateless ``BUSY`` answer (``raetsalt.engine.busy``; rate 0: no limit)."""
    recall_window: int = 256
    """A main restarted from its keep starts allows towards the remotes it knows as joined,
    this many at a time (``raetsalt.engine.recall``; 0: it waits for them to come)."""
    busy_retry: float = 2.0
    """A ``BUSY`` answer makes us try again within this long (doubling while it lasts)."""
    departed_memory: float = 600.0
    """Seconds a remote whose key was deleted still gets told ``unjoined`` (so it re-joins
    at once) when it sends authenticated packets."""
