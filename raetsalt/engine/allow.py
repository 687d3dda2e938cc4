"""Allow (tk 3): the CurveCP-like handshake that sets up a session's short-term keys.

Theory of operation (docs/raet-wire.md §8.2).  Notation: ``L``/``l`` long-term Curve25519
public/secret keys from the join, ``S``/``s`` fresh short-term keys, ``_i`` initiator,
``_r`` responder, ``box(m, n, pk, sk)`` crypto_box.

1. hello     i -> r  ``plain || S_i || box(plain, n1, L_r, s_i) || n1``
2. cookie    r -> i  ``box(S_r || r's uid for i || i's uid for r || oreo, n2, S_i, l_r) || n2``
3. initiate  i -> r  ``S_i || oreo || box(L_i || vouch || n4 || fqdn, n3, S_r, s_i) || n3``
   with ``vouch = box(S_i, n4, L_r, l_i)``
4. ack       r -> i  (the responder's session is up)
5. ack       i -> r  (final)

Every allow packet is signed with the sender's long-term Ed25519 key, so by the time a
transaction sees a packet it is authenticated; a box that does not open is dropped and
counted, never answered.  Each side swaps its new session in only when the handshake
completes, so a replayed hello cannot tear down a working session (raet re-keys at once),
and a replayed hello from another address gets a cookie it cannot open, so it cannot
move the estate there either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raetsalt.crypto import KeyPair, SessionBox, random_bytes
from raetsalt.drops import DropReason
from raetsalt.engine.events import TransactionFailed
from raetsalt.engine.native.frames import FQDN_MARK, OREO_MARK
from raetsalt.engine.remote import Link
from raetsalt.engine.transaction import Transaction
from raetsalt.errors import BadPacket
from raetsalt.keep.records import name_problem
from raetsalt.wire import allow as layout
from raetsalt.wire.enums import BodyKind, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header

if TYPE_CHECKING:
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Address, Remote
    from raetsalt.wire.packet import Packet

NONCE = 24


class _AllowBase(Transaction):
    kind = TransactionKind.ALLOW
    redo_min = 0.25
    redo_max = 1.0
    timeout = 4.0

    def __init__(self, port: RoadPort, remote: Remote, **kwargs: object) -> None:
        super().__init__(port, remote, **kwargs)  # type: ignore[arg-type]
        self.last: tuple[Header, bytes] | None = None

    def _send(self, kind: PacketKind, body: bytes, now: float) -> None:
        header = self.header(kind, body_kind=BodyKind.RAW, foot_kind=FootKind.NACL)
        self.last = (header, body)
        self.port.transmit(header, body, self.address)
        self.restart_redo(now)

    def on_redo(self, now: float) -> None:
        if self.last is not None:
            self.port.transmit(self.last[0], self.last[1], self.address)
            self.restart_redo(now)

    def _adoption_over(self) -> None:
        """(The initiator of an adoption joins next.)"""

    def on_timeout(self, now: float) -> None:
        self.finish()
        self._adoption_over()
        self.port.emit(TransactionFailed(self.remote.name, "allow", "timeout"))
        self.port.on_connect_failed(self.remote, now)


class AllowInitiator(_AllowBase):
    """Our handshake with a joined remote (raet's Allower)."""

    def __init__(self, port: RoadPort, remote: Remote, *, now: float) -> None:
        super().__init__(
            port, remote, initiator=True, sid=remote.sid, tid=remote.next_tid(), now=now
        )
        self.short = KeyPair.generate()
        # box(., ., L_r, s_i) for the hello; the same shared key opens the cookie.
        self.hello_box = SessionBox(self.short.secret, remote.long_public)
        self.their_short: bytes | None = None
        self.session: SessionBox | None = None
        self.native = False
        self.adopting = remote.adopt and remote.fuid == 0
        """An adoption hello: the remote has no id of ours yet (``engine.adopt``)."""

    def start(self, now: float) -> None:
        nonce = random_bytes(NONCE)
        sealed = self.hello_box.encrypt(layout.HELLO_PLAIN, nonce)
        plain = (self.port.local.signer.verify_key.hex().encode("ascii") if self.adopting
                 else layout.HELLO_PLAIN)
        self._send(PacketKind.HELLO,
                   layout.pack_hello(self.short.public, sealed, nonce, plain), now)

    def open_cookie(self, packet: Packet) -> layout.CookieStuff:
        """What a cookie packet's box holds (BadPacket if it does not open); changes
        nothing (``engine/precrypt.py`` reads the responder's short key from it)."""
        cookie = layout.unpack_cookie_untrusted(packet.coat)
        return layout.unpack_cookie_stuff_untrusted(
            self.hello_box.decrypt_untrusted(cookie.box, cookie.nonce)
        )

    def _on_cookie(self, packet: Packet, now: float) -> None:
        if self.their_short is not None:
            return
        remote, port = self.remote, self.port
        stuff = self.open_cookie(packet)
        if self.adopting and stuff.far_uid == remote.uid and stuff.near_uid != 0:
            # The remote's id for us comes in the box only the cluster key opens.
            remote.fuid = self.destination_uid = stuff.near_uid
        if stuff.near_uid != remote.fuid or stuff.far_uid != remote.uid:
            raise BadPacket("allow cookie names other estate ids", DropReason.IDS)
        self.their_short = stuff.short_public
        # The responder offers the native profile inside the cookie box; we accept inside
        # the initiate box.  Neither mark can be changed without breaking a box.
        self.native = port.config.native and stuff.oreo.startswith(OREO_MARK)
        if self.adopting and not self.native:
            raise BadPacket("adoption cookie without the native offer", DropReason.BODY)
        fqdn = FQDN_MARK if self.native else remote.ha[0].encode("ascii", "replace")
        vouch_nonce = random_bytes(NONCE)
        vouch = port.long_box(remote).encrypt(self.short.public, vouch_nonce)
        inner = layout.pack_initiate_stuff(
            port.local.long_keys.public, vouch, vouch_nonce, fqdn
        )
        nonce = random_bytes(NONCE)
        self.session = port.precomputed.box(self.short.secret, self.their_short)
        sealed = self.session.encrypt(inner, nonce)
        self._send(
            PacketKind.INITIATE,
            layout.pack_initiate(self.short.public, stuff.oreo, sealed, nonce),
            now,
        )

    def _on_ack(self, packet: Packet, now: float) -> None:
        if self.session is None:
            return
        header = self.header(PacketKind.ACK, body_kind=BodyKind.RAW, foot_kind=FootKind.NACL)
        self.port.transmit(header, b"", self.address)
        self.finish()
        remote = self.remote
        if self.adopting:
            self._take_name(packet.coat)
        self.port.on_allowed(
            remote,
            self.session,  # the initiate's (one key agreement, not two)
            now,
            native=self.native,
            initiator=True,
            ha=remote.ha,
            fuid=remote.fuid,
            rsid=remote.rsid,
            adopted=self.adopting,
        )

    def _take_name(self, coat: bytes) -> None:
        """The name the adopting estate gave in its ack (signed with the key we know),
        unless it is not a valid name or another remote holds it."""
        name = coat.decode("ascii", "replace")
        if name_problem(name) is None and self.port.name_holder(name) in (None, self.remote):
            self.port.rename(self.remote, name)
        else:
            self.port.stats["adopt_name_ignored"] += 1

    def _adoption_over(self) -> None:
        """An adoption that did not complete: the next attempt is a join."""
        if self.adopting:
            # Back to a first contact: an unsigned join, as with any new estate (that
            # estate may not hold the keys we took for it).
            remote = self.remote
            remote.adopt = remote.signs_joins = False
            remote.link = Link.UNJOINED
            remote.fuid = 0  # (an id from a cookie: that estate forgets it)

    def _on_unjoined(self, packet: Packet, now: float) -> None:
        self.finish()
        self._adoption_over()
        self.port.on_unjoined(self.remote, now)

    def _on_refused(self, packet: Packet, now: float) -> None:
        self.finish()
        self._adoption_over()
        reason = PacketKind(packet.header.packet_kind).name.lower()
        self.port.emit(TransactionFailed(self.remote.name, "allow", reason))
        self.port.on_connect_failed(self.remote, now)

    handlers = {
        PacketKind.COOKIE: _on_cookie,
        PacketKind.ACK: _on_ack,
        PacketKind.UNJOINED: _on_unjoined,
        PacketKind.NACK: _on_refused,
        PacketKind.REFUSE: _on_refused,
        PacketKind.REJECT: _on_refused,
    }


class AllowCorrespondent(_AllowBase):
    """A remote's handshake with us (raet's Allowent).

    It answers the address the hello came from, with the ids the hello carries, and only
    a valid initiate from there (which needs the cookie we sent there, opened with the
    initiator's fresh short-term key, and a vouch made with its long-term key) completes
    it: that is the path validation that lets a known estate move to a new address.
    """

    def __init__(
        self,
        port: RoadPort,
        remote: Remote,
        *,
        sid: int,
        tid: int,
        fuid: int,
        reply_to: Address,
        now: float,
        adopted: bool = False,
    ) -> None:
        super().__init__(
            port,
            remote,
            initiator=False,
            sid=sid,
            tid=tid,
            now=now,
            destination_uid=fuid,
            reply_to=reply_to,
        )
        self.short = KeyPair.generate()
        self.their_short = b""
        self.oreo = b""
        self.acked = False
        self.adopted = adopted
        """Started by an adoption hello (``engine.adopt``): the remote exists for it."""

    def start(self, packet: Packet, now: float) -> None:
        hello = layout.unpack_hello_untrusted(packet.coat)
        long_box = self.port.precomputed.box(self.port.local.long_keys.secret, hello.short_public)
        plain = (self.remote.verify_key.hex().encode("ascii") if self.adopted
                 else layout.HELLO_PLAIN)
        if (
            hello.plain != plain
            or long_box.decrypt_untrusted(hello.box, hello.nonce) != layout.HELLO_PLAIN
        ):
            raise BadPacket(
                "allow hello does not open to the agreed plain text", DropReason.DECRYPT
            )
        self.their_short = hello.short_public
        if self.adopted and not self.port.config.native:
            raise BadPacket("adoption hello on a raet road", DropReason.BODY)
        offer = OREO_MARK if self.port.config.native else b""
        self.oreo = offer + random_bytes(NONCE - len(offer))
        stuff = layout.pack_cookie_stuff(
            self.short.public, self.remote.uid, self.destination_uid, self.oreo
        )
        nonce = random_bytes(NONCE)
        self._send(
            PacketKind.COOKIE, layout.pack_cookie(long_box.encrypt(stuff, nonce), nonce), now
        )

    def _on_hello(self, packet: Packet, now: float) -> None:
        self.on_redo(now)  # the initiator missed our cookie

    def _on_initiate(self, packet: Packet, now: float) -> None:
        if self.acked:
            return
        port, remote = self.port, self.remote
        initiate = layout.unpack_initiate_untrusted(packet.coat)
        if initiate.short_public != self.their_short or initiate.oreo != self.oreo:
            raise BadPacket(
                "allow initiate does not match the hello and cookie", DropReason.BODY
            )
        session = port.precomputed.box(self.short.secret, self.their_short)
        stuff = layout.unpack_initiate_stuff_untrusted(
            session.decrypt_untrusted(initiate.box, initiate.nonce)
        )
        if stuff.long_public != remote.long_public:
            raise BadPacket("allow initiate carries another long-term key", DropReason.BODY)
        if (
            port.long_box(remote).decrypt_untrusted(stuff.vouch, stuff.vouch_nonce)
            != self.their_short
        ):
            raise BadPacket(
                "allow vouch does not vouch for the short-term key", DropReason.DECRYPT
            )
        native = self.oreo.startswith(OREO_MARK) and stuff.fqdn.startswith(FQDN_MARK)
        if self.adopted and not native:
            raise BadPacket("adoption initiate without the native mark", DropReason.BODY)
        self.acked = True
        # An adopting initiator learns our name here (it joined another estate of ours).
        name = port.local.name.encode("ascii") if self.adopted else b""
        self._send(PacketKind.ACK, name, now)
        port.on_allowed(
            remote,
            session,
            now,
            native=native,
            initiator=False,
            ha=self.address,
            fuid=self.destination_uid,
            rsid=self.sid,
            adopted=self.adopted,
        )

    def _on_ack(self, packet: Packet, now: float) -> None:
        if self.acked:
            self.finish()

    def _on_refused(self, packet: Packet, now: float) -> None:
        self.finish()
        if self.adopted and not self.acked:
            self.port.on_adoption_failed(self.remote)

    handlers = {
        PacketKind.HELLO: _on_hello,
        PacketKind.INITIATE: _on_initiate,
        PacketKind.ACK: _on_ack,
        PacketKind.NACK: _on_refused,
        PacketKind.REFUSE: _on_refused,
        PacketKind.REJECT: _on_refused,
    }

    def on_timeout(self, now: float) -> None:
        # After our ack the session is up whether or not the final ack arrived.
        if self.acked:
            self.finish()
        else:
            super().on_timeout(now)
            if self.adopted:
                self.port.on_adoption_failed(self.remote)
