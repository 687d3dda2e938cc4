"""``JoinDesk``: where join packets come in (requests, and replies to our own joins), and
the join correspondents live.

A join request proves nothing about its sender (plaintext, unsigned, any source address),
so everything here is bounded and keyed so that one address cannot steer another's join:

* a correspondent is found by (source address, the joiner's uid, its transaction id):
  a packet from one address never reaches a transaction started from another;
* a request for a known estate from a new address gets its own correspondent, which
  answers that address and changes nothing about the known estate (``Road.on_joined``);
* at most ``max_joins`` correspondents at once and ``max_joins_per_remote`` per estate:
  the one whose joiner asked least recently gives way (a flood churns through the slots
  but cannot keep a real joiner out: its next request gets a slot), and a newer request
  from the same address supersedes an older one;
* ids never seen before: ``new_ids_burst`` per source address, then ``new_ids_per_second``;
  beyond ``max_pending`` waiting keys they are dropped (``KeyBook``);
* a role whose key record the keep could not read is refused, not taken for a new id;
* a signed request (a raetsalt joiner that knows us: ``raetsalt.engine.join``) gets
  signed replies, its ``reject`` and ``renew`` too (they mirror the request's foot kind).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from raetsalt.drops import DropReason
from raetsalt.engine.events import JoinRejected
from raetsalt.engine.identity import parse_join_body_untrusted
from raetsalt.engine.join import JoinCorrespondent
from raetsalt.engine.port import RoadPort
from raetsalt.errors import BadPacket
from raetsalt.keep.records import Acceptance
from raetsalt.wire.enums import FootKind, PacketKind

if TYPE_CHECKING:
    from raetsalt.engine.guard import Guard
    from raetsalt.engine.keybook import KeyBook
    from raetsalt.engine.remote import Address, Remote
    from raetsalt.wire.packet import Packet

JoinKey = tuple["Address", int, int]
"""A join correspondent: (the joiner's address, its uid for us, its transaction id)."""


class JoinHost(RoadPort, Protocol):
    """What the desk needs of its road beyond the transactions' port."""

    remotes: dict[int, Remote]
    keys: KeyBook
    guard: Guard

    def new_remote(self, name: str, ha: Address) -> Remote: ...

    def reply_stale(self, packet: Packet, address: Address, kind: PacketKind) -> None: ...


class JoinDesk:
    """The join correspondents of one road (module docstring)."""

    def __init__(self, host: JoinHost) -> None:
        self.host = host
        self.live: dict[JoinKey, JoinCorrespondent] = {}
        self._of: dict[int, dict[JoinKey, None]] = {}

    def __len__(self) -> int:
        return len(self.live)

    def of_remote(self, remote: Remote) -> list[JoinCorrespondent]:
        return [self.live[key] for key in self._of.get(remote.uid, ())]

    def from_address(self, remote: Remote, address: Address) -> list[JoinCorrespondent]:
        return [self.live[key] for key in self._of.get(remote.uid, ()) if key[0] == address]

    def of_role(self, role: str) -> list[JoinCorrespondent]:
        return [txn for txn in self.live.values() if txn.join.role == role]

    def forget(self, txn: JoinCorrespondent) -> None:
        key = (txn.address, txn.destination_uid, txn.tid)
        if self.live.get(key) is not txn:
            return
        del self.live[key]
        joins = self._of.get(txn.remote.uid)
        if joins is not None:
            joins.pop(key, None)
            if not joins:
                del self._of[txn.remote.uid]

    def receive_reply(self, packet: Packet, address: Address, now: float) -> None:
        """A join packet of a correspondent (``cf`` set): an answer to our own join."""
        host, header = self.host, packet.header
        remote = host.remotes.get(header.destination_uid)
        if remote is None:
            raise BadPacket("join reply for an unknown remote", DropReason.UNKNOWN_REMOTE)
        if address != remote.ha:
            raise BadPacket("join reply from an address we did not join", DropReason.WRONG_ADDRESS)
        txn = remote.transactions.get((True, 0, header.transaction_id))
        if txn is not None:
            txn.receive(packet, now)  # (a signed join checks the reply's signature)
        elif header.packet_kind == PacketKind.RESPONSE and remote.joined:
            # Our ack was lost and the correspondent repeats its response: ack again, so it
            # does not wait for its time-out and answer our allow with "unjoined".
            host.reply_stale(packet, address, PacketKind.ACK)
        else:
            raise BadPacket("join reply for no transaction", DropReason.STALE)

    def receive(self, packet: Packet, address: Address, now: float) -> None:
        """A join packet of an initiator (``cf`` clear)."""
        host, header = self.host, packet.header
        if header.source_uid == 0:
            raise BadPacket("join packet without a source id", DropReason.IDS)
        key = (address, header.source_uid, header.transaction_id)
        txn = self.live.pop(key, None)
        if txn is not None:
            self.live[key] = txn  # asked again: the most recent now
            joins = self._of[txn.remote.uid]
            joins[key] = joins.pop(key)
            txn.receive(packet, now)
            return
        if header.packet_kind != PacketKind.REQUEST:
            raise BadPacket("join packet for no transaction", DropReason.STALE)
        known = None
        if header.destination_uid:
            known = host.remotes.get(header.destination_uid)
            if known is None:
                # We lost the ids the joiner remembers: tell it to join afresh.
                host.reply_stale(packet, address, PacketKind.RENEW)
                return
        self._start(packet, address, known, now)

    def _start(self, packet: Packet, address: Address, known: Remote | None, now: float) -> None:
        host, header, config = self.host, packet.header, self.host.config
        join = parse_join_body_untrusted(packet, response=False)
        if known is None and not host.local.main:
            raise BadPacket("vacuous join sent to an estate that is not main", DropReason.NOT_MAIN)
        existing = known if known is not None else host.name_holder(join.name)
        if existing is not None and (existing.role != join.role or existing.name != join.name):
            raise BadPacket("join claims a name held by another role", DropReason.REFUSED)
        if join.role in host.keys.broken:
            raise BadPacket("the keep cannot read this role's key", DropReason.UNREADABLE_KEY)
        if (
            existing is None
            and join.role not in host.keys.roles
            and not host.guard.admit_new_id(address, now)
        ):
            raise BadPacket("too many new ids from one address", DropReason.RATE_LIMIT)
        decision = host.keys.decide(join.role, join.verhex, join.pubhex)
        if decision is None:
            raise BadPacket("too many keys pending", DropReason.PENDING_LIMIT)
        if decision.acceptance is Acceptance.REJECTED:
            host.reply_stale(packet, address, PacketKind.REJECT)
            host.emit(JoinRejected(join.name, join.role, here=True, denied=decision.denial))
            return
        remote = existing
        if remote is None:
            remote = host.new_remote(join.name, address)
            host.adopt_identity(remote, join, fuid=header.source_uid)
        for older in self.from_address(remote, address):
            older.finish()  # a newer request from there supersedes an older one
        joins = self._of.setdefault(remote.uid, {})
        while len(joins) >= config.max_joins_per_remote:
            self.live[next(iter(joins))].finish()
            host.stats["join_superseded"] += 1
        while len(self.live) >= config.max_joins:
            self.live[next(iter(self.live))].finish()
            host.stats["join_evicted"] += 1
        txn = JoinCorrespondent(
            host,
            remote,
            tid=header.transaction_id,
            source_uid=header.destination_uid,
            destination_uid=header.source_uid,
            reply_to=address,
            join=join,
            now=now,
            signed=header.foot_kind == FootKind.NACL,
        )
        key = (address, header.source_uid, header.transaction_id)
        self.live[key] = txn
        self._of.setdefault(remote.uid, {})[key] = None
        txn.start(decision.acceptance, now)
