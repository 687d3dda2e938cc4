"""Join (tk 1): exchange names, ids and long-term keys, and record key acceptance.

Theory of operation (protocol.md 7.1).  The initiator (usually a minion) sends a
``request`` with its name, mode (bit 0 = main), kind, Ed25519 verify key, Curve25519
public key and role.  The correspondent decides acceptance from its keep: ``accepted``
answers with a ``response`` carrying its own keys and the initiator's future ``fuid``;
``pending`` answers ``pend`` and re-reads the keep on every redo tick until an operator
decides; ``rejected`` answers ``reject``.  The initiator applies the same acceptance check
to the correspondent's keys (acceptance is mutual) and finishes with an ``ack``.

All join packets are plaintext, unsigned and carry ``si = 0``: the key exchange is
authorised by acceptance, not by a signature.  Deliberate differences from raet 0.6.8:

* identity is the role and its keys, not the address: a known, accepted estate may
  come back from another address (raet's immutable road rejected that, quirk Q7);
* a key that differs from an accepted one is never silently replaced: the keep records
  it as *denied* and the join is rejected, whatever the auto-accept mode;
* a new request from the same estate supersedes an older pending one instead of being
  refused, so a joiner that timed out and retried is not locked out;
* a pending correspondent lives as long as the joiner keeps asking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raetsalt.engine.events import DropReason, Joined, JoinPending, JoinRejected, TransactionFailed
from raetsalt.engine.transaction import Transaction
from raetsalt.errors import BadPacket
from raetsalt.keep.records import Acceptance, name_problem
from raetsalt.wire.body import decode_body_untrusted, encode_body
from raetsalt.wire.enums import BodyKind, PacketKind, TransactionKind

if TYPE_CHECKING:
    from raetsalt.engine.remote import Remote
    from raetsalt.engine.road import Road
    from raetsalt.wire.packet import Packet

_HEX64 = re.compile(r"[0-9a-fA-F]{64}\Z")


def valid_name(name: object) -> bool:
    """Estate names and roles follow the keep's one rule (``name_problem``), so a name
    the join accepts can always be stored."""
    return name_problem(name) is None


@dataclass(frozen=True, slots=True)
class JoinBody:
    """The validated contents of a join request or response body."""

    name: str
    main: bool
    kind: int
    verhex: str
    pubhex: str
    role: str
    uid: int = 0  # responses only: the correspondent's id for the initiator


def parse_join_body_untrusted(packet: Packet, *, response: bool) -> JoinBody:
    body: Any = decode_body_untrusted(BodyKind(packet.header.body_kind), packet.coat)
    if not isinstance(body, dict):
        raise BadPacket("join body is not a mapping", DropReason.BODY.value)
    name, role = body.get("name"), body.get("role")
    mode, kind = body.get("mode"), body.get("kind")
    verhex, pubhex = body.get("verhex"), body.get("pubhex")
    if not valid_name(name) or not valid_name(role):
        raise BadPacket("join body has an invalid name or role", DropReason.BODY.value)
    if not _is_byte(mode) or not _is_byte(kind):
        raise BadPacket("join body has an invalid mode or kind", DropReason.BODY.value)
    if not (isinstance(verhex, str) and _HEX64.match(verhex)):
        raise BadPacket("join body has an invalid verhex", DropReason.BODY.value)
    if not (isinstance(pubhex, str) and _HEX64.match(pubhex)):
        raise BadPacket("join body has an invalid pubhex", DropReason.BODY.value)
    uid = 0
    if response:
        claimed = body.get("uid")
        if not isinstance(claimed, int) or isinstance(claimed, bool) or not 0 < claimed < 1 << 32:
            raise BadPacket("join response has an invalid uid", DropReason.BODY.value)
        uid = claimed
    return JoinBody(
        name=name,  # type: ignore[arg-type]
        main=bool(mode & 1),  # type: ignore[operator]
        kind=kind,  # type: ignore[arg-type]
        verhex=verhex.lower(),
        pubhex=pubhex.lower(),
        role=role,  # type: ignore[arg-type]
        uid=uid,
    )


def _is_byte(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255


def local_join_body(road: Road, *, uid: int | None = None) -> dict[str, Any]:
    """Our side of a join body, in raet's key order."""
    body: dict[str, Any] = {"name": road.name, "mode": 1 if road.main else 0, "kind": road.kind}
    if uid is not None:
        body["uid"] = uid
    body["verhex"] = road.signer.verify_key.hex()
    body["pubhex"] = road.long_keys.public.hex()
    body["role"] = road.role
    return body


class JoinInitiator(Transaction):
    """Our join with a remote main (raet's Joiner)."""

    kind = TransactionKind.JOIN
    redo_min = 1.0
    redo_max = 4.0

    def __init__(self, road: Road, remote: Remote, *, now: float) -> None:
        super().__init__(road, remote, initiator=True, sid=0, tid=remote.next_tid(), now=now)
        self.vacuous = remote.fuid == 0
        self.timeout_at = now + road.config.join_timeout
        self.pended = False  # the remote holds our key as pending
        self.waiting_here: JoinBody | None = None  # we hold the remote's key as pending

    def start(self, now: float) -> None:
        self.remote.joined = None
        self._send_request(now)

    def _send_request(self, now: float) -> None:
        self.road.transmit(
            self.header(PacketKind.REQUEST),
            encode_body(BodyKind.JSON, local_join_body(self.road)),
            self.remote.ha,
        )
        self.restart_redo(now)

    def _send(self, kind: PacketKind) -> None:
        self.road.transmit(self.header(kind), b"", self.remote.ha)

    def receive(self, packet: Packet, now: float) -> None:
        kind = packet.header.packet_kind
        if kind == PacketKind.RESPONSE:
            self._accept(parse_join_body_untrusted(packet, response=True), now)
        elif kind == PacketKind.PEND:
            if not self.pended:
                self.pended = True
                self.road.emit(JoinPending(self.remote.name, self.road.role, here=False))
            # Stay alive while the remote's operator decides; keep asking now and then.
            self.timeout_at = now + self.road.config.join_pending_timeout
            self.schedule()
        elif kind == PacketKind.REJECT:
            self.road.emit(JoinRejected(self.remote.name, self.road.role, here=False))
            self.fail("rejected")
        elif kind == PacketKind.RENEW:
            # The remote no longer knows our ids (it lost its keep): rejoin vacuously.
            self.finish()
            self.remote.fuid = 0
            self.road.join(self.remote.uid, now)
        elif kind in (PacketKind.NACK, PacketKind.REFUSE):
            self.fail("refused")

    def _accept(self, join: JoinBody, now: float) -> None:
        road, remote = self.road, self.remote
        other = road.remotes_by_name.get(join.name)
        if other is not None and other is not remote:
            self._send(PacketKind.REJECT)
            self.fail("name_taken")
            return
        status = road.keep.status_role(join.role, join.verhex, join.pubhex, road.config.auto)
        if status is Acceptance.REJECTED:
            self._send(PacketKind.REJECT)
            road.emit(JoinRejected(join.name, join.role, here=True))
            self.fail("rejected")
            return
        road.adopt_identity(remote, join, fuid=join.uid)
        if status is Acceptance.PENDING:
            if self.waiting_here is None:
                road.emit(JoinPending(remote.name, join.role, here=True))
            self.waiting_here = join
            road.save_remote(remote)
            self._send(PacketKind.PEND)
            self.timeout_at = now + road.config.join_pending_timeout
            self.restart_redo(now)
            return
        self._complete(now)

    def _complete(self, now: float) -> None:
        road, remote = self.road, self.remote
        if remote.sid == 0:
            remote.next_sid()
        if self.vacuous:
            remote.rsid = 0
        remote.joined = True
        road.save_remote(remote)
        self._send(PacketKind.ACK)
        self.finish()
        road.emit(Joined(remote.name, initiator=True))
        road.on_joined(remote, now, initiator=True)

    def on_redo(self, now: float) -> None:
        if self.waiting_here is not None:
            join = self.waiting_here
            status = self.road.keep.status_role(
                join.role, join.verhex, join.pubhex, self.road.config.auto
            )
            if status is Acceptance.ACCEPTED:
                self._complete(now)
            elif status is Acceptance.REJECTED:
                self._send(PacketKind.REJECT)
                self.fail("rejected")
            else:
                self.restart_redo(now)
            return
        self._send_request(now)

    def restart_redo(self, now: float) -> None:
        if self.pended or self.waiting_here is not None:
            self.redo_at = now + self.road.config.pending_recheck
            self.schedule()
        else:
            super().restart_redo(now)

    def on_timeout(self, now: float) -> None:
        self.fail("timeout")

    def fail(self, reason: str) -> None:
        self.finish()
        if self.remote.joined is None:
            self.remote.joined = False
        self.road.emit(TransactionFailed(self.remote.name, "join", reason))
        self.road.on_connect_failed(self.remote)


class JoinCorrespondent(Transaction):
    """A remote's join with us (raet's Joinent)."""

    kind = TransactionKind.JOIN
    redo_min = 0.1
    redo_max = 2.0

    def __init__(
        self,
        road: Road,
        remote: Remote,
        *,
        tid: int,
        source_uid: int,
        destination_uid: int,
        vacuous_key: tuple[tuple[str, int], int, int] | None,
        join: JoinBody,
        now: float,
    ) -> None:
        super().__init__(
            road,
            remote,
            initiator=False,
            sid=0,
            tid=tid,
            now=now,
            source_uid=source_uid,
            destination_uid=destination_uid,
        )
        self.vacuous_key = vacuous_key
        self.join = join
        self.pending = False
        self.remote_pended = False
        self.timeout_at = now + road.config.join_timeout

    def start(self, status: Acceptance, now: float) -> None:
        if status is Acceptance.PENDING:
            self.pending = True
            self.road.save_remote(self.remote)
            self.road.emit(JoinPending(self.remote.name, self.remote.role, here=True))
            self.timeout_at = now + self.road.config.join_pending_timeout
        self._reply(now)

    def _reply(self, now: float) -> None:
        if self.pending:
            self._send(PacketKind.PEND)
            if self.redo_at is None:  # a stream of retransmitted requests must not starve it
                self.redo_at = now + self.road.config.pending_recheck
                self.schedule()
            return
        body = local_join_body(self.road, uid=self.remote.uid)
        self.road.transmit(
            self.header(PacketKind.RESPONSE), encode_body(BodyKind.JSON, body), self.remote.ha
        )
        self.restart_redo(now)

    def _send(self, kind: PacketKind) -> None:
        self.road.transmit(self.header(kind), b"", self.remote.ha)

    def receive(self, packet: Packet, now: float) -> None:
        kind = packet.header.packet_kind
        if kind == PacketKind.ACK and not self.pending:
            self.complete(now)
        elif kind == PacketKind.REQUEST:
            # A retransmitted request: the joiner missed our reply, or asks again while
            # its key is pending here (a good moment to re-read the operator's decision).
            if self.pending:
                self.timeout_at = now + self.road.config.join_pending_timeout
                self._recheck(now)
            else:
                self._reply(now)
        elif kind == PacketKind.PEND:
            # The joiner's operator has not accepted our key yet; wait with it.
            if not self.remote_pended:
                self.remote_pended = True
                self.road.emit(JoinPending(self.remote.name, self.road.role, here=False))
            self.timeout_at = now + self.road.config.join_pending_timeout
            self.redo_at = now + self.road.config.pending_recheck
            self.schedule()
        elif kind == PacketKind.REJECT:
            self.road.emit(JoinRejected(self.remote.name, self.road.role, here=False))
            self.finish()
        elif kind in (PacketKind.NACK, PacketKind.REFUSE):
            self.finish()

    @property
    def awaiting_ack(self) -> bool:
        """Our response is out and only the joiner's ack is missing."""
        return not self.pending and not self.remote_pended

    def complete(self, now: float) -> None:
        road, remote = self.road, self.remote
        if remote.sid == 0:
            remote.next_sid()
        if self.vacuous_key is not None:
            remote.rsid = 0
        remote.joined = True
        road.save_remote(remote)
        self.finish()
        road.emit(Joined(remote.name, initiator=False))
        road.on_joined(remote, now, initiator=False)

    def on_redo(self, now: float) -> None:
        if self.pending:
            self._recheck(now)
        else:
            self._reply(now)

    def _recheck(self, now: float) -> None:
        """Re-read the operator's decision on the pending key and answer accordingly."""
        join = self.join
        status = self.road.keep.status_role(
            join.role, join.verhex, join.pubhex, self.road.config.auto
        )
        if status is Acceptance.REJECTED:
            self._send(PacketKind.REJECT)
            self.road.emit(JoinRejected(self.remote.name, join.role, here=True))
            self.finish()
            return
        if status is Acceptance.ACCEPTED:
            self.pending = False
            self.redo_duration = 0.0
            self.timeout_at = now + self.road.config.join_timeout
        self._reply(now)

    def finish(self) -> None:
        super().finish()
        if self.vacuous_key is not None and self.road.vacuous_joins.get(self.vacuous_key) is self:
            del self.road.vacuous_joins[self.vacuous_key]
