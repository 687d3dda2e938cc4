"""Allow (tk 3): the CurveCP-like handshake that sets up a session's short-term keys.

Theory of operation (protocol.md 7.2).  Notation: ``L``/``l`` long-term Curve25519
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
completes, so a replayed hello cannot tear down a working session (raet re-keys at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raetsalt.crypto import KeyPair, SessionBox, random_bytes
from raetsalt.engine.events import DropReason, TransactionFailed
from raetsalt.engine.native import FQDN_MARK, OREO_MARK
from raetsalt.engine.transaction import Transaction
from raetsalt.errors import BadPacket
from raetsalt.wire import allow as layout
from raetsalt.wire.enums import BodyKind, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header

if TYPE_CHECKING:
    from raetsalt.engine.remote import Remote
    from raetsalt.engine.road import Road
    from raetsalt.wire.packet import Packet

NONCE = 24


class _AllowBase(Transaction):
    kind = TransactionKind.ALLOW
    redo_min = 0.25
    redo_max = 1.0
    timeout = 4.0

    def __init__(self, road: Road, remote: Remote, **kwargs: object) -> None:
        super().__init__(road, remote, **kwargs)  # type: ignore[arg-type]
        self.last: tuple[Header, bytes] | None = None

    def _send(self, kind: PacketKind, body: bytes, now: float) -> None:
        header = self.header(kind, body_kind=BodyKind.RAW, foot_kind=FootKind.NACL)
        self.last = (header, body)
        self.road.transmit(header, body, self.remote.ha)
        self.restart_redo(now)

    def on_redo(self, now: float) -> None:
        if self.last is not None:
            self.road.transmit(self.last[0], self.last[1], self.remote.ha)
            self.restart_redo(now)

    def on_timeout(self, now: float) -> None:
        self.finish()
        self.road.emit(TransactionFailed(self.remote.name, "allow", "timeout"))
        self.road.on_connect_failed(self.remote)


class AllowInitiator(_AllowBase):
    """Our handshake with a joined remote (raet's Allower)."""

    def __init__(self, road: Road, remote: Remote, *, now: float) -> None:
        super().__init__(
            road, remote, initiator=True, sid=remote.sid, tid=remote.next_tid(), now=now
        )
        self.short = KeyPair.generate()
        # box(., ., L_r, s_i) for the hello; the same shared key opens the cookie.
        self.hello_box = SessionBox(self.short.secret, remote.long_public)
        self.their_short: bytes | None = None
        self.native = False

    def start(self, now: float) -> None:
        nonce = random_bytes(NONCE)
        sealed = self.hello_box.encrypt(layout.HELLO_PLAIN, nonce)
        self._send(PacketKind.HELLO, layout.pack_hello(self.short.public, sealed, nonce), now)

    def receive(self, packet: Packet, now: float) -> None:
        kind = packet.header.packet_kind
        if kind == PacketKind.COOKIE and self.their_short is None:
            self._on_cookie(packet, now)
        elif kind == PacketKind.ACK and self.their_short is not None:
            self._on_ack(now)
        elif kind == PacketKind.UNJOINED:
            self.finish()
            self.road.on_unjoined(self.remote, now)
        elif kind in (PacketKind.NACK, PacketKind.REFUSE, PacketKind.REJECT):
            self.finish()
            self.road.emit(
                TransactionFailed(self.remote.name, "allow", PacketKind(kind).name.lower())
            )
            self.road.on_connect_failed(self.remote)

    def _on_cookie(self, packet: Packet, now: float) -> None:
        remote, road = self.remote, self.road
        cookie = layout.unpack_cookie_untrusted(packet.coat)
        stuff = layout.unpack_cookie_stuff_untrusted(
            self.hello_box.decrypt_untrusted(cookie.box, cookie.nonce)
        )
        if stuff.near_uid != remote.fuid or stuff.far_uid != remote.uid:
            raise BadPacket("allow cookie names other estate ids", DropReason.IDS.value)
        self.their_short = stuff.short_public
        # The responder offers the native profile inside the cookie box; we accept inside
        # the initiate box.  Neither mark can be changed without breaking a box.
        self.native = road.config.native and stuff.oreo.startswith(OREO_MARK)
        fqdn = FQDN_MARK if self.native else remote.ha[0].encode("ascii", "replace")
        vouch_nonce = random_bytes(NONCE)
        vouch = road.long_box(remote).encrypt(self.short.public, vouch_nonce)
        inner = layout.pack_initiate_stuff(road.long_keys.public, vouch, vouch_nonce, fqdn)
        nonce = random_bytes(NONCE)
        sealed = SessionBox(self.short.secret, self.their_short).encrypt(inner, nonce)
        self._send(
            PacketKind.INITIATE,
            layout.pack_initiate(self.short.public, stuff.oreo, sealed, nonce),
            now,
        )

    def _on_ack(self, now: float) -> None:
        assert self.their_short is not None
        header = self.header(PacketKind.ACK, body_kind=BodyKind.RAW, foot_kind=FootKind.NACL)
        self.road.transmit(header, b"", self.remote.ha)
        self.finish()
        session = SessionBox(self.short.secret, self.their_short)
        self.road.on_allowed(self.remote, session, now, native=self.native, initiator=True)


class AllowCorrespondent(_AllowBase):
    """A remote's handshake with us (raet's Allowent)."""

    def __init__(self, road: Road, remote: Remote, *, sid: int, tid: int, now: float) -> None:
        super().__init__(road, remote, initiator=False, sid=sid, tid=tid, now=now)
        self.short = KeyPair.generate()
        self.their_short = b""
        self.oreo = b""
        self.acked = False

    def start(self, packet: Packet, now: float) -> None:
        hello = layout.unpack_hello_untrusted(packet.coat)
        long_box = SessionBox(self.road.long_keys.secret, hello.short_public)
        if (
            hello.plain != layout.HELLO_PLAIN
            or long_box.decrypt_untrusted(hello.box, hello.nonce) != layout.HELLO_PLAIN
        ):
            raise BadPacket(
                "allow hello does not open to the agreed plain text", DropReason.DECRYPT.value
            )
        self.their_short = hello.short_public
        offer = OREO_MARK if self.road.config.native else b""
        self.oreo = offer + random_bytes(NONCE - len(offer))
        stuff = layout.pack_cookie_stuff(
            self.short.public, self.remote.uid, self.remote.fuid, self.oreo
        )
        nonce = random_bytes(NONCE)
        self._send(
            PacketKind.COOKIE, layout.pack_cookie(long_box.encrypt(stuff, nonce), nonce), now
        )

    def receive(self, packet: Packet, now: float) -> None:
        kind = packet.header.packet_kind
        if kind == PacketKind.HELLO:
            self.on_redo(now)  # the initiator missed our cookie
        elif kind == PacketKind.INITIATE and not self.acked:
            self._on_initiate(packet, now)
        elif kind == PacketKind.ACK and self.acked:
            self.finish()
        elif kind in (PacketKind.NACK, PacketKind.REFUSE, PacketKind.REJECT):
            self.finish()

    def _on_initiate(self, packet: Packet, now: float) -> None:
        road, remote = self.road, self.remote
        initiate = layout.unpack_initiate_untrusted(packet.coat)
        if initiate.short_public != self.their_short or initiate.oreo != self.oreo:
            raise BadPacket(
                "allow initiate does not match the hello and cookie", DropReason.BODY.value
            )
        session = SessionBox(self.short.secret, self.their_short)
        stuff = layout.unpack_initiate_stuff_untrusted(
            session.decrypt_untrusted(initiate.box, initiate.nonce)
        )
        if stuff.long_public != remote.long_public:
            raise BadPacket("allow initiate carries another long-term key", DropReason.BODY.value)
        if (
            road.long_box(remote).decrypt_untrusted(stuff.vouch, stuff.vouch_nonce)
            != self.their_short
        ):
            raise BadPacket(
                "allow vouch does not vouch for the short-term key", DropReason.DECRYPT.value
            )
        native = self.oreo.startswith(OREO_MARK) and stuff.fqdn.startswith(FQDN_MARK)
        self.acked = True
        self._send(PacketKind.ACK, b"", now)
        road.on_allowed(remote, session, now, native=native, initiator=False)

    def on_timeout(self, now: float) -> None:
        # After our ack the session is up whether or not the final ack arrived.
        if self.acked:
            self.finish()
        else:
            super().on_timeout(now)
