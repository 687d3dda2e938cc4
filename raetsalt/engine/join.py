"""Join (tk 1): exchange names, ids and long-term keys, and record key acceptance.

Theory of operation (docs/raet-wire.md §8.1; the acceptance table is docs/keys.md).  The
initiator (usually a minion) sends a ``request`` with its name, mode (bit 0 = main), kind,
Ed25519 verify key, Curve25519 public key and role.  The correspondent decides acceptance
with its key policy:
``accepted`` answers with a ``response`` carrying its own keys and the initiator's future
``fuid``; ``pending`` answers ``pend`` until an operator decides (the road hands the
decision to the waiting transaction: ``decided``); ``rejected`` answers ``reject``.  The
initiator applies the same check to the correspondent's keys (acceptance is mutual) and
finishes with an ``ack``.

All join packets are plaintext, unsigned and carry ``si = 0``: the key exchange is
authorised by acceptance, not by a signature, so a join proves nothing about who sent
it.  Deliberate differences from raet 0.6.8:

* identity is the role and its keys, not the address: a known, accepted estate may come
  back from another address (raet's immutable road rejected that, quirk Q7), but its
  join changes nothing about the known estate (its address, ids and session stay): the
  road moves it to the new address only when an allow from there completes, which an
  unsigned join cannot fake (``raetsalt.engine.allow``);
* a correspondent answers the address the request came from and lives in the road's
  table of join correspondents under (address, ids), so packets from one address never
  reach the join of another;
* a key that differs from an accepted one is never silently replaced: it is recorded as
  *denied* and the join is rejected, whatever the auto-accept mode;
* a new request from the same estate and address supersedes an older one instead of
  being refused, so a joiner that timed out and retried is not locked out;
* a pending correspondent lives as long as the joiner keeps asking;
* a joiner whose key is pending asks again as a Salt minion does, after
  ``acceptance_wait_time`` (10 s), doubling up to ``acceptance_wait_time_max`` when that
  is set (``next_acceptance_wait``; raet re-asked within a second or two, forever), and
  the wait carries over the attempts a ``BUSY`` answer or a lost reply ends (it is the
  remote's, reset when a join completes);
* an initiator that finds the estate it joined already known under its name, with the
  same role and keys, at another address, takes it over (the estate moved) instead of
  refusing the name.

Signed joins (raetsalt only).  Unsigned replies would let anyone who can send from the
main's address reject, renew or answer a minion's join (one forged ``reject`` made a
minion exit).  So once an estate knows the other's key *and* knows it is a raetsalt
estate (``Remote.signs_joins``: an authenticated allow showed the native marks; the keep
records it), its join request carries an Ed25519 foot, and the correspondent of a signed
request signs every reply (its ``reject`` and ``renew`` too: ``JoinDesk``).  Such an
initiator takes only replies that verify: a ``response`` with the key it carries (the
key itself must then pass the key policy, so only the accepted key completes a join),
everything else with the key it knows; anything else is a counted drop and the join goes
on.  raet 0.6.8 never signs a join packet and never sees a signed one (we sign only
towards an estate that showed it is ours), so it is served byte for byte as before; an
unsigned ``reject`` (first contact, or a raet peer) still ends that join attempt, but is
reported as unauthenticated (``JoinRejected.authenticated``): it never makes a daemon
exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raetsalt.crypto import Verifier
from raetsalt.drops import DropReason
from raetsalt.engine.events import Joined, JoinPending, JoinRejected, TransactionFailed
from raetsalt.engine.identity import JoinBody, parse_join_body_untrusted
from raetsalt.engine.transaction import Transaction
from raetsalt.errors import BadPacket
from raetsalt.keep.records import Acceptance
from raetsalt.wire.body import encode_body
from raetsalt.wire.enums import BodyKind, FootKind, PacketKind, TransactionKind

if TYPE_CHECKING:
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Address, Remote
    from raetsalt.wire.packet import Packet


MIN_ACCEPTANCE_WAIT = 0.5
"""The shortest wait between the asks of a pending joiner (Salt's minion asks at once
with ``acceptance_wait_time: 0``; a road never floods its main so)."""


def next_acceptance_wait(wait: float, base: float, ceiling: float) -> float:
    """The wait after ``wait`` while our key stays pending: Salt's minion doubles it while
    it is below ``acceptance_wait_time_max`` (``ceiling``; 0 or below ``base``: it never
    grows).  Salt may overshoot the ceiling (10 with a ceiling of 25 grows to 40); here
    it stops at the ceiling."""
    wait = max(MIN_ACCEPTANCE_WAIT, wait)
    if ceiling <= max(base, MIN_ACCEPTANCE_WAIT) or wait >= ceiling:
        return wait
    return min(wait * 2.0, ceiling)


class JoinInitiator(Transaction):
    """Our join with a remote main (raet's Joiner)."""

    kind = TransactionKind.JOIN
    redo_min = 1.0
    redo_max = 4.0

    def __init__(self, port: RoadPort, remote: Remote, *, now: float) -> None:
        super().__init__(port, remote, initiator=True, sid=0, tid=remote.next_tid(), now=now)
        self.vacuous = remote.fuid == 0
        self.timeout_at = now + port.config.join_timeout
        self.pended = False  # the remote holds our key as pending
        self.asked = False  # a request is out that no ``pend`` has answered yet
        self.waiting_here: JoinBody | None = None  # we hold the remote's key as pending
        self.signed = remote.signs_joins and remote.verifier is not None
        """Our packets are signed and the replies must be (module docstring)."""
        self.renew_unverified = False
        self.busy_deaf = remote.busy_honoured
        """The attempt before honoured an unsigned ``BUSY``: this one ignores them
        (``raetsalt.engine.busy``)."""
        remote.busy_honoured = False

    def send(self, kind: PacketKind, coat: bytes = b"", **fields: Any) -> None:
        if self.signed:
            fields.setdefault("foot_kind", FootKind.NACL)
        super().send(kind, coat, **fields)

    def receive(self, packet: Packet, now: float) -> None:
        if self.signed and packet.header.packet_kind != PacketKind.RESPONSE:
            verifier = self.remote.verifier
            if not signed_by(packet, verifier):
                if packet.header.packet_kind == PacketKind.RENEW:
                    # Someone at its address does not know our ids: the main lost its
                    # keep, or another estate answers there.  If nothing authentic
                    # answers this attempt, the next one is vacuous (``on_timeout``).
                    self.renew_unverified = True
                raise BadPacket("unsigned or forged join reply", DropReason.SIGNATURE)
        super().receive(packet, now)

    def start(self, now: float) -> None:
        self._send_request(now)

    def _send_request(self, now: float) -> None:
        self.send(PacketKind.REQUEST, encode_body(BodyKind.JSON, self.port.local.join_body()))
        self.asked = True
        self.restart_redo(now)

    def _on_response(self, packet: Packet, now: float) -> None:
        join = parse_join_body_untrusted(packet, response=True)
        if self.signed and not signed_by(packet, Verifier(bytes.fromhex(join.verhex))):
            # A key of ours (only the accepted one passes the key policy below) must sign.
            raise BadPacket("unsigned or forged join response", DropReason.SIGNATURE)
        port, remote = self.port, self.remote
        other = port.name_holder(join.name)
        if other is not None and other is not remote:
            if other.role != join.role or not join.same_keys(other.verify_key, other.long_public):
                self.send(PacketKind.REJECT)
                self.fail("name_taken", now)
                return
            port.on_estate_moved(remote, other)
        decision = port.decide_key(join.role, join.verhex, join.pubhex)
        if decision.acceptance is Acceptance.REJECTED:
            self.send(PacketKind.REJECT)
            port.emit(JoinRejected(join.name, join.role, here=True, denied=decision.denial,
                                   unpinned=decision.unpinned, verhex=join.verhex))
            self.fail("rejected", now)
            return
        port.adopt_identity(remote, join, fuid=join.uid)
        if decision.acceptance is Acceptance.PENDING:
            if self.waiting_here is None:
                port.emit(JoinPending(remote.name, join.role, here=True))
            self.waiting_here = join
            port.remote_changed(remote)
            self.send(PacketKind.PEND)
            self.timeout_at = now + port.config.join_pending_timeout
            self.restart_redo(now)
            return
        self._complete(now)

    def _on_pend(self, packet: Packet, now: float) -> None:
        if not self.pended:
            self.pended = True
            self.port.emit(JoinPending(self.remote.name, self.port.local.role, here=False))
        if self.asked:
            # One wait per answered request: duplicated ``pend`` packets change nothing.
            self.asked = False
            config, remote = self.port.config, self.remote
            wait = remote.acceptance_wait or max(
                MIN_ACCEPTANCE_WAIT, config.acceptance_wait_time
            )
            remote.acceptance_wait = next_acceptance_wait(
                wait, config.acceptance_wait_time, config.acceptance_wait_time_max
            )
            self.redo_at = now + wait
        # Stay alive while the remote's operator decides, at least until the next ask.
        self.timeout_at = (
            now + self.remote.acceptance_wait + self.port.config.join_pending_timeout
        )
        self.schedule()

    def _on_reject(self, packet: Packet, now: float) -> None:
        if not self.signed:
            # Anyone can send this from the main's address: it ends this attempt (raet
            # does as much) but is reported as proving nothing.
            self.port.stats["join_reject_unauthenticated"] += 1
        self.port.emit(JoinRejected(self.remote.name, self.port.local.role, here=False,
                                    authenticated=self.signed))
        self.fail("rejected", now)

    def _on_renew(self, packet: Packet, now: float) -> None:
        # The remote no longer knows our ids (it lost its keep): rejoin vacuously.
        if not self.signed:
            self.port.stats["join_renew_unauthenticated"] += 1
        self.finish()
        self.port.on_renew(self.remote, now)

    def _on_refused(self, packet: Packet, now: float) -> None:
        self.fail("refused", now)

    handlers = {
        PacketKind.RESPONSE: _on_response,
        PacketKind.PEND: _on_pend,
        PacketKind.REJECT: _on_reject,
        PacketKind.RENEW: _on_renew,
        PacketKind.NACK: _on_refused,
        PacketKind.REFUSE: _on_refused,
    }

    def decided(self, acceptance: Acceptance, now: float) -> None:
        """An operator decided on the remote's key we held as pending."""
        if self.waiting_here is None or acceptance is Acceptance.PENDING:
            return
        if acceptance is Acceptance.ACCEPTED:
            self._complete(now)
        else:
            self.send(PacketKind.REJECT)
            self.fail("rejected", now)

    def _complete(self, now: float) -> None:
        self.send(PacketKind.ACK)
        self.finish()
        self.port.on_joined(self.remote, now, initiator=True, vacuous=self.vacuous)
        self.port.emit(Joined(self.remote.name, initiator=True))

    def restart_redo(self, now: float) -> None:
        if self.waiting_here is not None:
            self.redo_at = None  # the other side keeps asking; we only wait
            self.schedule()
        elif self.pended:
            # Asked again while pending: the next ask waits as long, answered or not.
            self.redo_at = now + max(MIN_ACCEPTANCE_WAIT, self.remote.acceptance_wait)
            self.schedule()
        else:
            super().restart_redo(now)

    def on_redo(self, now: float) -> None:
        self._send_request(now)

    def on_timeout(self, now: float) -> None:
        if self.renew_unverified:
            # A main that lost its keep, or a new one with other keys, can only answer a
            # vacuous join: the next attempt is one (its reply is checked as any other).
            self.port.stats["join_vacuous_after_unverified_renew"] += 1
            self.remote.fuid = 0
        self.fail("timeout", now)

    def fail(self, reason: str, now: float) -> None:
        self.finish()
        self.port.emit(TransactionFailed(self.remote.name, "join", reason))
        self.port.on_connect_failed(self.remote, now)


class JoinCorrespondent(Transaction):
    """A remote's join with us (raet's Joinent), answering the address it came from."""

    kind = TransactionKind.JOIN
    redo_min = 0.1
    redo_max = 2.0

    def __init__(
        self,
        port: RoadPort,
        remote: Remote,
        *,
        tid: int,
        source_uid: int,
        destination_uid: int,
        reply_to: Address,
        join: JoinBody,
        now: float,
        signed: bool = False,
    ) -> None:
        super().__init__(
            port,
            remote,
            initiator=False,
            sid=0,
            tid=tid,
            now=now,
            source_uid=source_uid,
            destination_uid=destination_uid,
            reply_to=reply_to,
        )
        self.join = join
        self.pending = False
        self.remote_pended = False
        self.timeout_at = now + port.config.join_timeout
        self.signed = signed
        """The request was signed: a raetsalt joiner that checks our replies' signatures."""

    def send(self, kind: PacketKind, coat: bytes = b"", **fields: Any) -> None:
        if self.signed:
            fields.setdefault("foot_kind", FootKind.NACL)
        super().send(kind, coat, **fields)

    def start(self, acceptance: Acceptance, now: float) -> None:
        if acceptance is Acceptance.PENDING:
            self.pending = True
            self.port.remote_changed(self.remote)
            self.port.emit(JoinPending(self.remote.name, self.remote.role, here=True))
            self.timeout_at = now + self.port.config.join_pending_timeout
        self._reply(now)

    def _reply(self, now: float) -> None:
        if self.pending:
            self.send(PacketKind.PEND)
            self.schedule()  # only the time-out: the decision comes as ``decided``
            return
        body = self.port.local.join_body(uid=self.remote.uid)
        self.send(PacketKind.RESPONSE, encode_body(BodyKind.JSON, body))
        self.restart_redo(now)

    def _on_ack(self, packet: Packet, now: float) -> None:
        if not self.pending:
            self.complete(now)

    def _on_request(self, packet: Packet, now: float) -> None:
        # A retransmitted request: the joiner missed our reply, or asks again while its
        # key is pending here.
        if self.pending:
            self.timeout_at = now + self.port.config.join_pending_timeout
        self._reply(now)

    def _on_pend(self, packet: Packet, now: float) -> None:
        # The joiner's operator has not accepted our key yet; wait with it.
        if not self.remote_pended:
            self.remote_pended = True
            self.port.emit(JoinPending(self.remote.name, self.port.local.role, here=False))
        self.timeout_at = now + self.port.config.join_pending_timeout
        self.redo_at = now + self.port.config.pending_retry
        self.schedule()

    def _on_reject(self, packet: Packet, now: float) -> None:
        self.port.emit(JoinRejected(self.remote.name, self.port.local.role, here=False))
        self.finish()

    def _on_refused(self, packet: Packet, now: float) -> None:
        self.finish()

    handlers = {
        PacketKind.ACK: _on_ack,
        PacketKind.REQUEST: _on_request,
        PacketKind.PEND: _on_pend,
        PacketKind.REJECT: _on_reject,
        PacketKind.NACK: _on_refused,
        PacketKind.REFUSE: _on_refused,
    }

    @property
    def awaiting_ack(self) -> bool:
        """Our response is out and only the joiner's ack is missing."""
        return not self.pending and not self.remote_pended

    def decided(self, acceptance: Acceptance, now: float) -> None:
        """An operator decided on the joiner's pending key."""
        if not self.pending or acceptance is Acceptance.PENDING:
            return
        if acceptance is Acceptance.REJECTED:
            self.send(PacketKind.REJECT)
            self.port.emit(JoinRejected(self.remote.name, self.join.role, here=True))
            self.finish()
            return
        self.pending = False
        self.redo_duration = 0.0
        self.timeout_at = now + self.port.config.join_timeout
        self._reply(now)

    def complete(self, now: float) -> None:
        self.finish()
        self.port.on_joined(self.remote, now, initiator=False, vacuous=self.source_uid == 0)
        self.port.emit(Joined(self.remote.name, initiator=False))

    def on_redo(self, now: float) -> None:
        if not self.pending:
            self._reply(now)

    def finish(self) -> None:
        super().finish()
        self.port.forget_join(self)


def signed_by(packet: Packet, verifier: Verifier | None) -> bool:
    """``packet`` carries an Ed25519 foot that ``verifier`` verifies."""
    return (
        verifier is not None
        and packet.header.foot_kind == FootKind.NACL
        and verifier.verify(packet.signed_bytes(), packet.foot)
    )
