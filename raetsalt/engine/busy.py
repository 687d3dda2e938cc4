"""Handshake load protection: "busy, come back later" instead of a collapse.

A main that takes more handshakes than it can serve answers late, its remotes time out
and try again, and the load grows (congestive collapse: the measured master with 2,000
minions never converged).  ``Admission`` decides, for each packet that would start a
handshake (a join request, an allow hello), whether the road takes it now: at most
``config.handshake_rate`` per second (a token bucket of ``handshake_burst``), none
while the driver reports the road ``loaded`` (its socket had a backlog at the last
read); while the join desk is three quarters full, new joins only at the rate its
slots turn over (joins wait there for their joiners' acks; a full desk pushes out the
oldest, and its joiner has to join again).  An admitted join takes its allow's token
too and holds its allow's place, so a joiner is never refused between its join and its
allow (and made to do the join again).

A refused packet gets a stateless ``BUSY`` answer at once, before any signature check
or key work: the request's ids mirrored, unsigned, and never bigger than the request
(anti-amplification; the guard's budget for unvalidated addresses applies too), with a
retry-after hint in its ``ml`` field (milliseconds, ``Admission.retry_after``): the
refused are given successive places at the pace the main has been taking handshakes,
so they come back spread out at the rate it can serve.
Packets of working sessions (native frames, alives, messages) are never refused, so an
overloaded main never tears down a session that works.

A ``BUSY`` answering a signed packet (an allow hello, or the signed join request of a
raetsalt estate that knows us: ``raetsalt.engine.join``) is signed too, at most
``SIGNED_BUSY_RATE`` a second (beyond, the packet is not answered: its sender
retransmits), so that the refused can tell it from a forgery.

On the other side, ``take_busy_untrusted`` honours a ``BUSY`` only as an answer to a
join or allow this road started, from the address it sent it to.  If that packet was
signed, the ``BUSY`` must verify with the remote's key, or it is a counted drop (an
attacker who can inject but not drop could otherwise keep a minion out for as long as
it sends them).  An unsigned one (first contact, when no key is known) is honoured for
one attempt in two: the attempt after one that honoured it ignores unsigned ``BUSY``
answers (counted), so a forger can at most delay every other attempt while the main's
real answers get through.  An honoured ``BUSY`` ends the handshake and
the road tries again after the hint (plus up to 10 %), or, from a main that gives none,
at a random time within a back-off that is ``config.busy_retry`` the first time and
doubles up to ``retry_max`` (0.1 to 1 times it: a crowd that was refused comes back
spread out).  A hint counts for at most ``retry_max``: a forged ``BUSY`` can therefore
only delay a handshake of ours within the back-off's bounds, as dropping its packets
could, and never touches a working session.  A raet 0.6.8 peer never
sees one unless it joins a busy main, and ignores a packet kind it does not know (it
retries on its own schedule).
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from raetsalt.drops import DropReason
from raetsalt.engine.events import TransactionFailed
from raetsalt.engine.join import JoinInitiator, signed_by
from raetsalt.engine.timers import backoff
from raetsalt.engine.transaction import mirrored_header
from raetsalt.errors import BadPacket
from raetsalt.wire.enums import CoatKind, Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.packet import pack_packet

if TYPE_CHECKING:
    from raetsalt.engine.config import RoadConfig
    from raetsalt.engine.events import Event
    from raetsalt.engine.identity import LocalEstate
    from raetsalt.engine.joindesk import JoinDesk
    from raetsalt.engine.remote import Address, Remote
    from raetsalt.wire.packet import Packet

BUSY_JITTER = 0.1
"""A refused joiner returns after 0.1 to 1 times its back-off."""

JOIN_REQUEST = (TransactionKind.JOIN, PacketKind.REQUEST)
ALLOW_HELLO = (TransactionKind.ALLOW, PacketKind.HELLO)
HANDSHAKE_STARTS = frozenset({JOIN_REQUEST, ALLOW_HELLO})
"""(transaction kind, packet kind) of the packets that start a handshake on our side."""

RESERVED_FOR = 10.0
"""Seconds an admitted join keeps its allow's place (a join lasts at most ``join_timeout``,
5 s by default, and the joiner allows at once after it)."""
MAX_RESERVED = 4096
"""Allows held for admitted joins at most (the oldest are dropped first)."""
DESK_SHARE = 0.75
"""The join desk is crowded from this share of ``max_joins`` on: a join admitted when the
desk is full pushes out one still waiting for its joiner's ack (that joiner is then told
"unjoined" at its allow and joins again)."""
SIGNED_BUSY_RATE = 2000.0
"""Signed ``BUSY`` answers a second at most (an Ed25519 signature each)."""
PACE_MIN = 20.0
"""Handshakes a second a busy main assumes it takes at least, for its retry-after hints."""


class Admitting(Protocol):
    """A road with its handshake admission (``Road`` implements it)."""

    config: RoadConfig
    stats: Counter[str]
    remotes: dict[int, Remote]
    admission: Admission


class Screening(Admitting, Protocol):
    """What of the road this module uses."""

    joins: JoinDesk

    @property
    def local(self) -> LocalEstate: ...

    def transmit_datagram(self, data: bytes, address: Address) -> None: ...

    def emit(self, event: Event) -> None: ...

    rng: random.Random

    def service_remote(self, remote: Remote, now: float) -> None: ...


class TokenBucket:
    """``rate`` a second, at most ``burst`` at once (rate 0: no limit)."""

    __slots__ = ("rate", "burst", "tokens", "refilled")

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = max(1.0, burst)
        self.tokens = self.burst
        self.refilled: float | None = None

    def take(self, now: float, cost: float = 1.0) -> bool:
        """Take ``cost`` tokens if one is there (the count may go below zero)."""
        if self.rate <= 0:
            return True
        if self.refilled is not None and now > self.refilled:
            self.tokens = min(self.burst, self.tokens + (now - self.refilled) * self.rate)
        self.refilled = now
        if self.tokens >= 1.0:
            self.tokens -= cost
            return True
        return False


class Admission:
    """Which handshakes a road takes now (module docstring)."""

    def __init__(self, rate: float, burst: float, *, crowded_rate: float = 0.0) -> None:
        self.bucket = TokenBucket(rate, burst)
        self.crowded = TokenBucket(crowded_rate, crowded_rate)
        """New joins taken while the join desk is crowded (its turnover: ``for_config``)."""
        self.signed_busy = TokenBucket(SIGNED_BUSY_RATE, SIGNED_BUSY_RATE)
        """Signed ``BUSY`` answers (module docstring)."""
        self.loaded = False
        """Set by the driver: the socket had a backlog at the last read."""
        self.reserved: OrderedDict[Address, float] = OrderedDict()
        """Addresses whose join was admitted: their allow hello passes (until when)."""
        self.next_slot = 0.0
        """When the next refused handshake is told to come back (see ``retry_after``)."""
        self.pace = PACE_MIN
        """Handshakes a second taken lately (an average over whole seconds)."""
        self._second = 0.0
        self._taken = 0

    @classmethod
    def for_config(cls, config: RoadConfig) -> Admission:
        """The admission of a road: while its join desk is crowded, new joins at the rate
        its slots turn over if nobody answers (``max_joins`` per ``join_timeout``)."""
        return cls(config.handshake_rate, config.handshake_burst,
                   crowded_rate=config.max_joins / max(config.join_timeout, 0.1))

    def admit(self, now: float, *, loaded_too: bool = False) -> bool:
        """Take a handshake now?  (``loaded_too``: even while the socket has a backlog.)"""
        if (self.loaded and not loaded_too) or not self.bucket.take(now):
            return False
        self._count(now)
        return True

    def admit_handshake(self, kind: tuple[TransactionKind, PacketKind], address: Address,
                        now: float) -> bool:
        """``admit`` for a packet that starts a handshake: an admitted join request also
        takes its allow's token and holds the allow's place, so that a joiner is not
        refused between its join and its allow (and made to repeat the join's work)."""
        if kind == ALLOW_HELLO and self.reserved.pop(address, 0.0) > now:
            self._count(now)
            return True
        if not self.admit(now):
            return False
        if kind == JOIN_REQUEST:
            while self.reserved and (
                len(self.reserved) >= MAX_RESERVED or next(iter(self.reserved.values())) <= now
            ):
                self.reserved.popitem(last=False)
            self.reserved[address] = now + RESERVED_FOR
            self.reserved.move_to_end(address)
            self.bucket.take(now, 1.0)  # the allow's token, taken now (may go below zero)
        return True

    def retry_after(self, now: float, least: float, cap: float) -> float:
        """Seconds a refused handshake is told to wait: the refused are given successive
        places, from ``least`` on, at the pace the main has been taking handshakes, so that
        they come back spread out at the rate it can serve, not all at once.  Places end
        at ``cap``: then they start again from ``least`` (a crowd larger than the cap
        holds is spread evenly over it, and those refused again get new places)."""
        self._count(now, taken=0)
        slot = max(self.next_slot, now + least)
        if slot - now > cap:
            slot = now + least
        self.next_slot = slot + 1.0 / self.pace
        return slot - now

    def _count(self, now: float, taken: int = 1) -> None:
        if now >= self._second + 1.0:
            elapsed = now - self._second
            rate = self._taken / elapsed if elapsed < 2.0 else 0.0
            self.pace = max(PACE_MIN, (self.pace + rate) / 2)
            self._second, self._taken = now, 0
        self._taken += taken


def screen_untrusted(road: Screening, packet: Packet, address: Address, now: float) -> bool:
    """Handle ``packet`` here if it is a ``BUSY`` answer or a handshake the road does not
    admit now; True if it was handled (the road does nothing more with it)."""
    header = packet.header
    if header.packet_kind == PacketKind.BUSY:
        take_busy_untrusted(road, packet, address, now)
        return True
    kind = (header.transaction_kind, header.packet_kind)
    if header.flags & Flag.CF or kind not in HANDSHAKE_STARTS:
        return False
    admission = road.admission
    if kind == JOIN_REQUEST:
        desk = road.joins.live
        if (address, header.source_uid, header.transaction_id) in desk:
            return False  # a retransmission: its correspondent answers it again, no new work
        # A crowded desk takes new joins only as fast as its slots turn over, so that a
        # crowd of joiners does not push out each other's joins before their acks come
        # (a flood still cannot keep a real joiner out: it gets a slot in turn).
        crowded = len(desk) >= road.config.max_joins * DESK_SHARE
        if (not crowded or admission.crowded.take(now)) and admission.admit_handshake(
            kind, address, now
        ):
            return False
    elif admission.admit_handshake(kind, address, now):
        return False
    config = road.config
    hint = admission.retry_after(now, config.busy_retry / 2, config.retry_max)
    answer = replace(
        mirrored_header(packet, PacketKind.BUSY),
        coat_kind=CoatKind.NADA,
        foot_kind=FootKind.NADA,
        message_length=max(1, round(hint * 1000)),
    )
    sign = None
    if header.foot_kind == FootKind.NACL:
        # The refused can check this one: sign it (within the rate, else say nothing).
        if not admission.signed_busy.take(now):
            road.stats["handshake_busy_sign_limit"] += 1
            return True
        answer = replace(answer, foot_kind=FootKind.NACL)
        sign = road.local.signer.sign
    data = pack_packet(answer, b"", sign, max_size=road.config.max_packet_size)
    road.stats["handshake_busy"] += 1
    if len(data) <= len(packet.head) + len(packet.coat) + len(packet.foot):
        road.transmit_datagram(data, address)
    else:  # never more than the request: count it, answer nothing
        road.stats["handshake_busy_unanswered"] += 1
    return True


def take_busy_untrusted(road: Screening, packet: Packet, address: Address, now: float) -> None:
    """A ``BUSY`` answer: end our handshake it names and back off."""
    header = packet.header
    remote = road.remotes.get(header.destination_uid)
    if remote is None or not header.flags & Flag.CF or address != remote.ha:
        raise BadPacket("busy answer for no handshake of ours", DropReason.STALE)
    txn = remote.transactions.get((True, header.session_id, header.transaction_id))
    if txn is None or txn.kind not in (TransactionKind.JOIN, TransactionKind.ALLOW):
        raise BadPacket("busy answer for no handshake of ours", DropReason.STALE)
    joining = txn if isinstance(txn, JoinInitiator) else None
    if joining is None or joining.signed:
        # We signed what it answers, so the main signs its answer.
        if not signed_by(packet, remote.verifier):
            raise BadPacket("unsigned or forged busy answer", DropReason.SIGNATURE)
    elif joining.busy_deaf:
        raise BadPacket("unsigned busy answer in an attempt that ignores them",
                        DropReason.UNSIGNED)
    else:
        remote.busy_honoured = True  # the next attempt ignores unsigned ones
        road.stats["busy_rx_unsigned"] += 1
    txn.finish()
    road.stats["busy_rx"] += 1
    road.emit(TransactionFailed(remote.name, txn.kind.name.lower(), "busy"))
    config = road.config
    remote.retry_delay = backoff(max(remote.retry_delay, config.busy_retry / 2),
                                 config.retry_min, config.retry_max)
    if header.message_length:
        # The main's retry-after hint (milliseconds): its place in the main's queue.  It is
        # unauthenticated, so it is bounded by retry_max, as our own back-off is.
        wait = min(header.message_length / 1000, config.retry_max)
        remote.retry_at = now + wait * road.rng.uniform(1.0, 1.0 + BUSY_JITTER)
    else:
        # Come back at a uniformly random time within the back-off (busy_retry, doubling up
        # to retry_max): a crowd of refused joiners returns spread out, at the rate it left.
        remote.retry_at = now + remote.retry_delay * road.rng.uniform(BUSY_JITTER, 1.0)
    road.service_remote(remote, now)
