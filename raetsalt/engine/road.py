"""``Road``: the sans-IO RAET engine of one estate.

Driving it (the UDP driver in ``raetsalt.drivers.udp`` does exactly this)::

    road.receive_datagram(data, address, now)     # for every datagram read
    for data, address in road.datagrams_to_send(now): sock.sendto(data, address)
    when = road.next_timer()                      # sleep at most until then
    road.handle_timer(now)                        # when it is due
    while (event := road.next_event()) is not None: ...

Receive pipeline (protocol.md 6, made strict):

1. parse the datagram (only ``BadPacket`` can come out; it is dropped and counted);
2. join packets (plaintext by design) go to the join handlers;
3. every other packet must be signed, name a known remote by ``de`` and verify with that
   remote's key; unsigned or forged packets are dropped without a reply;
4. for remotely initiated packets the session id must not be older than the remote's
   current one; a newer one starts a new remote session;
5. the packet goes to its transaction, or starts a correspondent, or gets a stale nack.

Nothing here replies to a packet that failed to authenticate, except what the join
protocol itself needs (``pend``, ``reject``, ``renew``).
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raetsalt.crypto import KeyPair, SessionBox, Signer
from raetsalt.engine.alive import AliveInitiator
from raetsalt.engine.allow import AllowCorrespondent, AllowInitiator
from raetsalt.engine.events import (
    Allowed,
    DropReason,
    Event,
    JoinRejected,
    PacketDropped,
    PresenceChanged,
    TransactionFailed,
)
from raetsalt.engine.join import (
    JoinBody,
    JoinCorrespondent,
    JoinInitiator,
    parse_join_body_untrusted,
    valid_name,
)
from raetsalt.engine.message import MessageReceiver, MessageSender
from raetsalt.engine.native import Channel, Datagram, is_native, parse_prefix_untrusted
from raetsalt.engine.reassembly import ReassemblyBudget
from raetsalt.engine.remote import Outgoing, Remote, next_id, sid_valid
from raetsalt.engine.timers import TimerQueue, backoff
from raetsalt.engine.transaction import Transaction
from raetsalt.errors import BadPacket, KeepError, LocalError
from raetsalt.keep.records import Acceptance, AutoMode, Keep, LocalRecord, RemoteRecord
from raetsalt.log import clip
from raetsalt.wire.body import decode_body_untrusted, encode_body, encode_message
from raetsalt.wire.enums import BodyKind, CoatKind, Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import Packet, pack_packet, parse_packet_untrusted

_NACK_KINDS = frozenset(
    {
        PacketKind.NACK,
        PacketKind.UNJOINED,
        PacketKind.UNALLOWED,
        PacketKind.RENEW,
        PacketKind.REFUSE,
        PacketKind.REJECT,
    }
)

# Segments with these flags are verified before anything looks at them: ``wf`` asks for
# a reply, ``cf`` marks a packet of a transaction we started.
_LAZY_EXCLUDED = int(Flag.WF | Flag.CF)
_LAZY_FAST_EXCLUDED = int(Flag.WF | Flag.CF | Flag.BF)


@dataclass(frozen=True, slots=True)
class RoadConfig:
    """Tunables of a road.  Defaults follow raet 0.6.8 where raet has one."""

    auto: AutoMode = AutoMode.NEVER
    """How remote keys seen for the first time are accepted."""
    join_timeout: float = 5.0
    join_pending_timeout: float = 120.0
    """How long a join waits for an operator while the other side keeps asking."""
    pending_recheck: float = 0.5
    """How often a pending join re-reads the keep for an operator's decision."""
    alive_timeout: float = 2.0
    presence_period: float = 1.0
    """An alive is sent to a remote that has been silent this long."""
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
    native_window: int = 2 * 1024 * 1024
    """Bytes a native sender may have unacknowledged (below the receiver's socket buffer)."""
    # Reassembly caps and time-out (engine.reassembly); the largest express message.
    reassembly_per_remote: int = 32 * 1024 * 1024
    reassembly_total: int = 256 * 1024 * 1024
    reassembly_timeout: float = 30.0
    native_express_size: int = 16 * 1024


@dataclass(eq=False)
class _Housekeeping:
    """Per-remote timer owner (presence, reconnect, queued-message expiry)."""

    remote: Remote
    deadline: float | None = None


@dataclass(eq=False)
class Road:
    """The engine of one estate on the road.  See the module docstring for the calls."""

    keep: Keep
    ha: tuple[str, int] = ("127.0.0.1", 7530)
    name: str = ""
    role: str = ""
    main: bool = False
    kind: int = 0
    config: RoadConfig = field(default_factory=RoadConfig)
    rng: random.Random = field(default_factory=random.Random)
    now: float = 0.0

    def __post_init__(self) -> None:
        self.remotes: dict[int, Remote] = {}
        self.remotes_by_name: dict[str, Remote] = {}
        self.vacuous_joins: dict[tuple[tuple[str, int], int, int], JoinCorrespondent] = {}
        self.timers = TimerQueue()
        self.stats: Counter[str] = Counter()
        self._outbox: list[tuple[Datagram, tuple[str, int]]] = []
        self._events: deque[Event] = deque()
        self._housekeeping: dict[int, _Housekeeping] = {}
        self._long_boxes: dict[bytes, SessionBox] = {}
        self._dirty: dict[Channel, None] = {}
        self._next_mid = 0
        # Lazily verifying message receivers by the stem of their segments' heads.
        self.lazy_heads: dict[bytes, MessageReceiver] = {}
        self.reassembly = ReassemblyBudget.for_config(self.config)
        self._restore()

    # -- set-up ---------------------------------------------------------------------------

    def _restore(self) -> None:
        local = self.keep.load_local()
        if local is None:
            if not valid_name(self.name):
                raise LocalError(f"a new road needs a valid estate name, got {clip(self.name)}")
            signer, long_keys = Signer.generate(), KeyPair.generate()
            local = LocalRecord(
                name=self.name,
                role=self.role or self.name,
                main=self.main,
                kind=self.kind,
                sighex=signer.seed.hex(),
                prihex=long_keys.secret.hex(),
                ha=self.ha,
                puid=1,
            )
            self.keep.save_local(local)
        elif self.name and self.name != local.name:
            raise LocalError(f"the keep belongs to estate {local.name!r}, not {self.name!r}")
        self.name, self.role, self.puid = local.name, local.role, local.puid
        self.signer = Signer(bytes.fromhex(local.sighex))
        self.long_keys = KeyPair(bytes.fromhex(local.prihex))
        for record in self.keep.load_remotes():
            role = self.keep.load_role(record.role)
            if role is None:
                continue  # keys deleted by an operator: the remote must join afresh
            remote = Remote(
                uid=record.uid,
                name=record.name,
                ha=tuple(record.ha),  # type: ignore[arg-type]
                fuid=record.fuid,
                role=record.role,
                main=record.main,
                kind=record.kind,
                # Sessions never repeat across restarts (protocol.md 4.3).
                sid=next_id(record.sid),
                joined=record.joined,
            )
            remote.set_keys(bytes.fromhex(role.verhex), bytes.fromhex(role.pubhex))
            self._add(remote)
            self.save_remote(remote)

    def _add(self, remote: Remote) -> None:
        self.remotes[remote.uid] = remote
        self.remotes_by_name[remote.name] = remote
        self._housekeeping[remote.uid] = _Housekeeping(remote)

    def _new_uid(self) -> int:
        uid = self.puid
        while True:
            uid = next_id(uid)
            if uid != 1 and uid not in self.remotes:
                self.puid = uid
                return uid

    # -- the sans-IO surface --------------------------------------------------------------

    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None:
        """Process one datagram; never raises for anything the datagram contains."""
        self.now = now
        self.stats["rx"] += 1
        try:
            if self.lazy_heads and self._receive_lazy_segment(data, address, now):
                return
            if is_native(data):
                self._receive_native(data, address, now)
                return
            packet = parse_packet_untrusted(data, max_size=self.config.max_packet_size)
            self._dispatch(packet, address, now)
        except BadPacket as exc:
            self._drop(exc.trigger, address, str(exc))
        except KeepError as exc:  # the keep refused a write (disk full ...): not the peer's
            self._drop(DropReason.STORAGE.value, address, str(exc))

    def datagrams_to_send(self, now: float) -> list[tuple[Datagram, tuple[str, int]]]:
        self.now = now
        # Native channels send here, once per batch: everything queued since the last
        # call shares datagrams, and one ack answers a whole batch of received packets.
        while self._dirty:
            channel = next(iter(self._dirty))
            del self._dirty[channel]
            if channel.remote.channel is channel:
                channel.flush(now, self._outbox)
        out, self._outbox = self._outbox, []
        return out

    def next_timer(self) -> float | None:
        return self.timers.next_deadline()

    def has_output(self) -> bool:
        """Datagrams are waiting for ``datagrams_to_send`` (so a driver must not sleep)."""
        return bool(self._outbox or self._dirty)

    def handle_timer(self, now: float) -> None:
        self.now = now
        for owner in self.timers.pop_due(now):
            try:
                if isinstance(owner, Transaction | Channel):
                    owner.on_timer(now)
                elif isinstance(owner, _Housekeeping):
                    self._service_remote(owner.remote, now)
            except BadPacket as exc:  # a retransmission found the state unusable
                self._drop(exc.trigger, ("", 0), str(exc))
            except KeepError as exc:
                self._drop(DropReason.STORAGE.value, ("", 0), str(exc))

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    # -- commands -------------------------------------------------------------------------

    def connect(self, ha: tuple[str, int], now: float, *, name: str | None = None) -> int:
        """Keep a session with the estate at ``ha`` (usually a main): join, allow, and
        re-establish it by itself after failures or restarts.  Returns the remote's uid.

        ``name`` is the name we expect the remote to have; it makes the remote addressable
        by that name at once (messages queue until the session is up).  If the join
        reveals another name, the remote is renamed to it.
        """
        self.now = now
        remote = self.remotes_by_name.get(name) if name else None
        if remote is None:
            remote = next((r for r in self.remotes.values() if r.ha == ha), None)
        if remote is None:
            uid = self._new_uid()
            remote = Remote(uid=uid, name=name or f"{ha[0]}:{ha[1]}", ha=ha)
            self._add(remote)
        remote.ha = ha
        remote.auto_connect = True
        remote.joined = None  # always re-join on (re)connect: the other side may have restarted
        remote.retry_at = now
        self._service_remote(remote, now)
        return remote.uid

    def join(self, uid: int, now: float) -> None:
        self.now = now
        remote = self.remotes[uid]
        if remote.in_progress(TransactionKind.JOIN) is not None:
            return
        txn = JoinInitiator(self, remote, now=now)
        remote.transactions[txn.key] = txn
        txn.start(now)

    def allow(self, uid: int, now: float) -> None:
        self.now = now
        remote = self.remotes[uid]
        if not remote.joined:
            self.join(uid, now)
            return
        if remote.in_progress(TransactionKind.ALLOW) is not None:
            return
        txn = AllowInitiator(self, remote, now=now)
        remote.transactions[txn.key] = txn
        txn.start(now)

    def alive(self, uid: int, now: float) -> None:
        self.now = now
        remote = self.remotes[uid]
        if not remote.allowed:
            self.allow(uid, now)
            return
        if remote.in_progress(TransactionKind.ALIVE) is not None:
            return
        txn = AliveInitiator(self, remote, now=now)
        remote.transactions[txn.key] = txn
        txn.start(now)

    def send_message(self, to: str | int, body: Mapping[str, Any], now: float) -> int:
        """Queue ``body`` (a mapping) for ``to`` (name or uid); returns the message id.

        Messages to one remote are delivered in order.  A message that cannot be delivered
        within ``config.message_timeout`` (also while the remote is not yet allowed) ends
        with ``TransactionFailed(kind="message")``; a delivered one with
        ``MessageDelivered``.
        """
        self.now = now
        remote = self.remote(to)
        kind = BodyKind.MSGPACK if remote.channel is not None else self.config.body_kind
        encoded = encode_message(kind, body, self.config.max_message_size)
        self._next_mid += 1
        outgoing = Outgoing(self._next_mid, encoded, now + self.config.message_timeout, kind)
        if remote.channel is not None and not remote.outbox:
            remote.channel.enqueue(outgoing, kind)
        else:
            remote.outbox.append(outgoing)
            self._pump(remote, now)
        return self._next_mid

    def send_messages(self, to: str | int, bodies: list[Mapping[str, Any]], now: float) -> range:
        """``send_message`` for each body; natively cheaper, confirmed by one event (``count``)."""
        remote, first = self.remote(to), self._next_mid + 1
        if remote.channel is None or remote.outbox:
            for body in bodies:
                self.send_message(to, body, now)
        else:
            size, self.now = self.config.max_message_size, now
            encoded = [encode_message(BodyKind.MSGPACK, body, size) for body in bodies]
            self._next_mid += len(encoded)
            remote.channel.enqueue_batch(first, encoded, now + self.config.message_timeout)
        return range(first, self._next_mid + 1)

    def remote(self, which: str | int) -> Remote:
        found = (
            self.remotes.get(which) if isinstance(which, int) else self.remotes_by_name.get(which)
        )
        if found is None:
            raise LocalError(f"no remote {which!r}")
        return found

    def remove_remote(self, which: str | int) -> None:
        """Forget a remote (its keep record too), e.g. after its key was deleted."""
        remote = self.remote(which)
        for txn in list(remote.transactions.values()):
            txn.finish()
        if remote.channel is not None:
            remote.channel.unfinished()  # ends it: its reassembly reservations go back
        self.timers.arm(self._housekeeping.pop(remote.uid), None)
        del self.remotes[remote.uid]
        del self.remotes_by_name[remote.name]
        self.keep.remove_remote(remote.name)

    # -- services for transactions ---------------------------------------------------------

    def transmit(self, header: Header, coat: bytes, address: tuple[str, int]) -> None:
        sign = self.signer.sign if header.foot_kind == FootKind.NACL else None
        self._outbox.append(
            (pack_packet(header, coat, sign, max_size=self.config.max_packet_size), address)
        )
        self.stats["tx"] += 1

    def transmit_datagram(self, data: bytes, address: tuple[str, int]) -> None:
        """Queue a datagram a transaction packed (and signed) itself."""
        self._outbox.append((data, address))
        self.stats["tx"] += 1

    def emit(self, event: Event) -> None:
        self._events.append(event)

    def mark_dirty(self, channel: Channel) -> None:
        """``channel`` has something to send at the next ``datagrams_to_send``."""
        self._dirty[channel] = None

    def long_box(self, remote: Remote) -> SessionBox:
        """The box between our and the remote's long-term keys (used by allow's vouch)."""
        box = self._long_boxes.get(remote.long_public)
        if box is None:
            box = self._long_boxes[remote.long_public] = SessionBox(
                self.long_keys.secret, remote.long_public
            )
        return box

    def open_coat(self, remote: Remote, coat: bytes, coat_kind: CoatKind) -> bytes:
        if coat_kind == CoatKind.NADA:
            return coat
        if remote.session is None:
            raise BadPacket(
                "encrypted packet from a remote without a session", DropReason.DECRYPT.value
            )
        return remote.session.open_untrusted(coat)

    def seal_body(self, remote: Remote, body: bytes, coat_kind: CoatKind) -> bytes:
        if coat_kind == CoatKind.NADA or not body:
            return body
        assert remote.session is not None
        return remote.session.seal(body)

    def open_body(self, remote: Remote, packet: Packet) -> Any:
        header = packet.header
        plain = self.open_coat(remote, packet.coat, CoatKind(header.coat_kind))
        return decode_body_untrusted(BodyKind(header.body_kind), plain)

    def save_remote(self, remote: Remote) -> None:
        if not remote.joined and remote.fuid == 0:
            return  # nothing worth keeping about a remote that never joined
        self.keep.save_remote(
            RemoteRecord(
                name=remote.name,
                role=remote.role,
                uid=remote.uid,
                fuid=remote.fuid,
                ha=remote.ha,
                sid=remote.sid,
                main=remote.main,
                kind=remote.kind,
                joined=bool(remote.joined),
            )
        )
        local = self.keep.load_local()
        if local is not None and local.puid != self.puid:
            local.puid = self.puid
            self.keep.save_local(local)

    def adopt_identity(self, remote: Remote, join: JoinBody, *, fuid: int) -> None:
        """Take name, role, keys and flags from a join body (renaming a vacuous remote)."""
        if join.name != remote.name:
            self.remotes_by_name.pop(remote.name, None)
            if remote.joined or remote.fuid:
                self.keep.remove_remote(remote.name)  # its record lives under the old name
            remote.name = join.name
            self.remotes_by_name[remote.name] = remote
        remote.role, remote.main, remote.kind, remote.fuid = join.role, join.main, join.kind, fuid
        remote.set_keys(bytes.fromhex(join.verhex), bytes.fromhex(join.pubhex))

    # -- connection life cycle (called by transactions) ------------------------------------

    def on_joined(self, remote: Remote, now: float, *, initiator: bool) -> None:
        remote.retry_delay = 0.0
        if initiator:
            # We joined because we (re)started or lost the remote: our session is stale,
            # and we allow next.  The correspondent keeps its session until that allow
            # replaces it, so a late duplicate join request costs nothing.
            self._lose_session(remote)
            if remote.auto_connect:
                self.allow(remote.uid, now)

    def on_allowed(
        self, remote: Remote, session: SessionBox, now: float, *, native: bool, initiator: bool
    ) -> None:
        if remote.channel is not None:
            remote.outbox.extendleft(reversed(remote.channel.unfinished()))
            remote.channel = None
        remote.profile = "native" if native else "raet"
        if native:
            loopback = remote.ha[0].startswith("127.") or remote.ha[0] == "::1"
            config = self.config
            size = config.native_loopback_datagram_size if loopback else config.native_datagram_size
            remote.channel = Channel(
                self,
                remote,
                session,
                initiator=initiator,
                datagram_size=size,
                window=config.native_window,
            )
        remote.session = session
        remote.allowed = True
        remote.retry_delay = 0.0
        remote.last_rx = now
        remote.next_sid()
        # Our transactions of the old session are void; their messages go out again.
        requeue: list[Outgoing] = []
        for txn in list(remote.transactions.values()):
            if txn.initiator and txn.sid != remote.sid and txn.kind != TransactionKind.JOIN:
                txn.finish()
                if isinstance(txn, MessageSender):
                    requeue.append(txn.outgoing)
        if remote.sender is not None and remote.sender.finished:
            remote.sender = None
        remote.outbox.extendleft(reversed(requeue))
        self.save_remote(remote)
        self._set_alive(remote, True)
        self.emit(Allowed(remote.name, remote.profile))
        self._pump(remote, now)
        self._rearm(remote, now)

    def on_unjoined(self, remote: Remote, now: float) -> None:
        remote.joined = False
        self._lose_session(remote)
        self.join(remote.uid, now)

    def on_unallowed(self, remote: Remote, now: float) -> None:
        self._lose_session(remote)
        self.allow(remote.uid, now)

    def on_alive_timeout(self, remote: Remote, now: float) -> None:
        if now - remote.last_rx < self.config.alive_timeout:
            # Only the alive was lost: other authenticated packets kept arriving.
            self._rearm(remote, now)
            return
        remote.alive_failures += 1
        self._set_alive(remote, False)
        self.emit(TransactionFailed(remote.name, "alive", "timeout"))
        if remote.auto_connect and remote.alive_failures >= self.config.rejoin_after:
            # Silent for several alives: it may have restarted without its keep.  A
            # restart with its keep answers "unallowed" and needs no re-join.
            self._lose_session(remote)
            remote.joined = None
            self.on_connect_failed(remote)
        else:
            self._rearm(remote, now)

    def on_connect_failed(self, remote: Remote) -> None:
        if not remote.auto_connect:
            return
        remote.retry_delay = backoff(
            remote.retry_delay, self.config.retry_min, self.config.retry_max
        )
        # Jitter spreads reconnects so a thousand minions do not hit a restarted main at once.
        remote.retry_at = self.now + remote.retry_delay * self.rng.uniform(0.5, 1.0)
        self._rearm(remote, self.now)

    def on_message_finished(self, remote: Remote, now: float) -> None:
        remote.sender = None
        self._pump(remote, now)

    def _lose_session(self, remote: Remote) -> None:
        """The session keys are gone: end its message transactions; ours go out again."""
        remote.allowed = False
        remote.session = None
        if remote.channel is not None:
            remote.outbox.extendleft(reversed(remote.channel.unfinished()))
            remote.channel = None
        for txn in list(remote.transactions.values()):
            if isinstance(txn, MessageSender):
                remote.outbox.appendleft(txn.outgoing)
                txn.finish()
            elif isinstance(txn, MessageReceiver):
                txn.finish()
        remote.sender = None

    def _set_alive(self, remote: Remote, alive: bool) -> None:
        if remote.alive is not alive:
            remote.alive = alive
            self.emit(PresenceChanged(remote.name, alive))

    # -- housekeeping ----------------------------------------------------------------------

    def _pump(self, remote: Remote, now: float) -> None:
        if remote.channel is not None and remote.allowed:
            while remote.outbox:
                outgoing = remote.outbox.popleft()
                remote.channel.enqueue(outgoing, outgoing.kind)
        elif (
            remote.sender is None
            and remote.outbox
            and remote.allowed
            and remote.session is not None
        ):
            outgoing = remote.outbox.popleft()
            if outgoing.kind != self.config.body_kind:
                # Queued for a native session that is now a raet one: raet reads JSON.
                value = decode_body_untrusted(outgoing.kind, outgoing.body)
                outgoing.body = encode_body(self.config.body_kind, value)
                outgoing.kind = self.config.body_kind
            txn = MessageSender(self, remote, outgoing, now=now)
            remote.transactions[txn.key] = txn
            remote.sender = txn
            txn.start(now)
        self._rearm(remote, now)

    def _rearm(self, remote: Remote, now: float) -> None:
        # Only what nothing else will wake us for: a live join, allow or alive has its own
        # timers, and arming a past deadline while it runs would spin the driver.
        kinds = {t.kind for t in remote.transactions.values()}
        times: list[float] = []
        connecting = TransactionKind.JOIN in kinds or TransactionKind.ALLOW in kinds
        if remote.auto_connect and not (remote.joined and remote.allowed) and not connecting:
            times.append(max(remote.retry_at, now))
        if remote.allowed and TransactionKind.ALIVE not in kinds:
            times.append(remote.last_rx + self.config.presence_period)
        if remote.outbox:
            times.append(remote.outbox[0].expires)
        keeper = self._housekeeping.get(remote.uid)
        if keeper is None:
            return
        when = min(times) if times else None
        if keeper.deadline is None or when is None or when < keeper.deadline:
            self.timers.arm(keeper, when)

    def _service_remote(self, remote: Remote, now: float) -> None:
        if remote.uid not in self.remotes:
            return
        busy = any(
            t.kind in (TransactionKind.JOIN, TransactionKind.ALLOW)
            for t in remote.transactions.values()
        )
        if remote.auto_connect and not busy and now >= remote.retry_at:
            if not remote.joined:
                self.join(remote.uid, now)
            elif not remote.allowed:
                self.allow(remote.uid, now)
        if (
            remote.allowed
            and now >= remote.last_rx + self.config.presence_period
            and remote.in_progress(TransactionKind.ALIVE) is None
        ):
            self.alive(remote.uid, now)
        while remote.outbox and remote.outbox[0].expires <= now:
            expired = remote.outbox.popleft()
            self.emit(TransactionFailed(remote.name, "message", "timeout", expired.mid))
        keeper = self._housekeeping[remote.uid]
        keeper.deadline = None
        self._rearm(remote, now)

    # -- receive pipeline --------------------------------------------------------------------

    def drop(self, trigger: str, address: tuple[str, int], detail: str) -> None:
        """Count and report a datagram dropped after its transaction took it."""
        self._drop(trigger, address, detail)

    def _drop(self, trigger: str, address: tuple[str, int], detail: str) -> None:
        try:
            reason = DropReason(trigger)
        except ValueError:
            reason = DropReason.MALFORMED
        self.stats[f"drop_{reason.value}"] += 1
        self.emit(PacketDropped(reason, address, detail))

    def _receive_native(self, data: bytes, address: tuple[str, int], now: float) -> None:
        uid, counter = parse_prefix_untrusted(data)
        remote = self.remotes.get(uid)
        channel = remote.channel if remote is not None else None
        if channel is None or remote is None:
            raise BadPacket(
                "native datagram for no native session", DropReason.UNKNOWN_REMOTE.value
            )
        channel.receive_untrusted(data, counter, now)
        remote.last_rx = now
        remote.alive_failures = 0
        if remote.alive is not True:
            self._set_alive(remote, True)

    def _receive_lazy_segment(self, data: bytes, address: tuple[str, int], now: float) -> bool:
        """Store a plain segment of a lazily verifying receiver without parsing it; False if
        ``data`` is not byte for byte the head such a segment has (the parser decides).

        The stem between ``fg`` and the blank line, without ``sn``, finds the receiver;
        the head is then rebuilt from its fields and must equal ``data``'s exactly, so
        this accepts only what the parser would read as the same header.
        """
        if len(data) > self.config.max_packet_size or not data.startswith(b"ri RAET\npl "):
            return False
        try:
            head_length = int(data[19:21], 16)
            flags = int(data[25:27], 16)
        except ValueError:
            return False
        if flags & _LAZY_FAST_EXCLUDED:
            return False
        tail = data[27 : head_length - 2]
        start = tail.find(b"\nsn ")
        if start < 0:
            number, stem = 0, tail
        else:
            end = tail.find(b"\n", start + 4)
            if end < 0:
                return False
            try:
                number = int(tail[start + 4 : end], 16)
            except ValueError:
                return False
            stem = tail[:start] + tail[end:]
        txn = self.lazy_heads.get(stem)
        if txn is None or txn.heads is None:
            return False
        coat_end = len(data) - 64
        head = data[:head_length]
        if coat_end < head_length or head != txn.heads.make(number, flags, coat_end - head_length):
            return False
        txn.receive_unverified_segment(
            number, head, data[head_length:coat_end], data[coat_end:], address, now
        )
        return True

    def _dispatch(self, packet: Packet, address: tuple[str, int], now: float) -> None:
        header = packet.header
        if header.flags & Flag.BF:
            raise BadPacket("broadcast packets are not supported", DropReason.BROADCAST.value)
        if header.transaction_kind == TransactionKind.JOIN:
            self._dispatch_join(packet, address, now)
            return
        if header.foot_kind != FootKind.NACL:
            raise BadPacket("unsigned packet", DropReason.UNSIGNED.value)
        if not (header.source_uid and header.destination_uid and header.session_id):
            raise BadPacket("zero estate or session id", DropReason.IDS.value)
        remote = self.remotes.get(header.destination_uid)
        if remote is None or remote.verifier is None:
            raise BadPacket("unknown remote", DropReason.UNKNOWN_REMOTE.value)
        if (
            header.packet_kind == PacketKind.MESSAGE
            and not int(header.flags) & _LAZY_EXCLUDED
            and header.transaction_kind == TransactionKind.MESSAGE
            and header.session_id == remote.rsid
        ):
            # A plain segment of a message we are receiving: its signature is checked only
            # if the message's box does not open.  Nothing here may answer it.
            txn = remote.transactions.get((False, header.session_id, header.transaction_id))
            if isinstance(txn, MessageReceiver) and txn.lazy:
                txn.receive_unverified(packet, address, now)
                return
        if not remote.verifier.verify(packet.signed_bytes(), packet.foot):
            raise BadPacket("signature does not verify", DropReason.SIGNATURE.value)
        # Authenticated from here on.
        remote.last_rx = now
        remote.alive_failures = 0
        self._set_alive(remote, True)
        ours = bool(header.flags & Flag.CF)  # a reply within a transaction we started
        if not ours and not self._check_session(remote, packet, address):
            return
        txn = remote.transactions.get((ours, header.session_id, header.transaction_id))
        if txn is not None:
            txn.receive(packet, now)
        elif ours:
            if header.packet_kind not in _NACK_KINDS:
                self._reply_stale(packet, address)
            else:
                self.stats["stale_nack"] += 1
        else:
            self._correspond(remote, packet, address, now)
        self._rearm(remote, now)

    def _check_session(self, remote: Remote, packet: Packet, address: tuple[str, int]) -> bool:
        """Apply the remote session id rules (protocol.md 4.3) to a remotely initiated packet."""
        sid = packet.header.session_id
        if not sid_valid(sid, remote.rsid):
            if packet.header.packet_kind not in _NACK_KINDS:
                self._reply_stale(packet, address)
            self.stats["stale_session"] += 1
            return False
        if sid != remote.rsid:
            remote.rsid = sid
            remote.replay.reset()
            for txn in list(remote.transactions.values()):
                if not txn.initiator and txn.sid != sid and txn.kind != TransactionKind.JOIN:
                    txn.finish()  # joins always carry si 0 and are not part of a session
        return True

    def _correspond(
        self, remote: Remote, packet: Packet, address: tuple[str, int], now: float
    ) -> None:
        header = packet.header
        tk, pk = header.transaction_kind, header.packet_kind
        if tk == TransactionKind.ALLOW and pk == PacketKind.HELLO:
            self._start_allow_correspondent(remote, packet, now)
        elif tk == TransactionKind.ALIVE and pk == PacketKind.REQUEST:
            self._answer_alive(remote, packet, address)
        elif tk == TransactionKind.MESSAGE and pk == PacketKind.MESSAGE:
            self._start_message_receiver(remote, packet, address, now)
        else:
            raise BadPacket("packet belongs to no transaction", DropReason.STALE.value)

    def _start_allow_correspondent(self, remote: Remote, packet: Packet, now: float) -> None:
        joining = remote.in_progress(TransactionKind.JOIN)
        if isinstance(joining, JoinCorrespondent) and joining.awaiting_ack:
            # The hello is signed with the key the join delivered, so the joiner completed
            # the join; its ack was lost or overtaken.  Finish the join instead of refusing.
            joining.complete(now)
        if not remote.joined:
            self._reply_stale(packet, remote.ha, PacketKind.UNJOINED)
            return
        if remote.in_progress(TransactionKind.JOIN) is not None:
            self._reply_stale(packet, remote.ha, PacketKind.REFUSE)
            return
        ours = any(
            t.kind == TransactionKind.ALLOW and t.initiator for t in remote.transactions.values()
        )
        if ours and self.name < remote.name:
            # Both sides started an allow at once: the smaller name refuses (as raet does).
            self._reply_stale(packet, remote.ha, PacketKind.REFUSE)
            return
        header = packet.header
        txn = AllowCorrespondent(
            self, remote, sid=header.session_id, tid=header.transaction_id, now=now
        )
        txn.start(
            packet, now
        )  # raises BadPacket, leaving everything as it was, if the hello is bad
        for other in list(remote.transactions.values()):
            if other.kind == TransactionKind.ALLOW:
                other.finish()  # a newer, valid hello supersedes any unfinished handshake
        remote.transactions[txn.key] = txn

    def _handshaking(self, remote: Remote) -> bool:
        return any(
            t.kind in (TransactionKind.JOIN, TransactionKind.ALLOW)
            for t in remote.transactions.values()
        )

    def _answer_alive(self, remote: Remote, packet: Packet, address: tuple[str, int]) -> None:
        if self._handshaking(remote) and not remote.allowed:
            # Our side of a handshake is still running; answering "unallowed" now would
            # start another one.  The alive's own retry will find the session up.
            self.stats["alive_during_handshake"] += 1
            return
        if not remote.joined:
            kind = PacketKind.UNJOINED
        elif not remote.allowed:
            kind = PacketKind.UNALLOWED
        else:
            kind = PacketKind.ACK
        self._reply_stale(packet, remote.ha, kind)

    def _start_message_receiver(
        self, remote: Remote, packet: Packet, address: tuple[str, int], now: float
    ) -> None:
        header = packet.header
        if remote.replay.seen(header.transaction_id):
            self.stats["replayed_message"] += 1
            self._reply_stale(packet, remote.ha, PacketKind.DONE, copy_wait=True)
            return
        if header.flags & Flag.AF:
            # A retransmission for a transaction we no longer have (raet answers nack).
            self._reply_stale(packet, remote.ha)
            return
        if not remote.allowed:
            if not self._handshaking(remote):
                self._reply_stale(packet, remote.ha, PacketKind.UNALLOWED)
            return
        receivers = sum(1 for t in remote.transactions.values() if isinstance(t, MessageReceiver))
        if receivers >= self.config.max_receivers:
            raise BadPacket(
                "too many concurrent messages from one remote", DropReason.OVERLOAD.value
            )
        txn = MessageReceiver(self, remote, header, now=now)
        remote.transactions[txn.key] = txn
        txn.receive(packet, now)

    def _reply_stale(
        self,
        packet: Packet,
        address: tuple[str, int],
        kind: PacketKind = PacketKind.NACK,
        *,
        copy_wait: bool = False,
    ) -> None:
        """Answer a packet outside any transaction with the ids mirrored (raet's Stalent)."""
        header = packet.header
        flags = Flag(0) if header.flags & Flag.CF else Flag.CF
        if copy_wait:
            flags |= header.flags & Flag.WF
        reply = Header(
            packet_kind=kind,
            transaction_kind=header.transaction_kind,
            source_uid=header.destination_uid,
            destination_uid=header.source_uid,
            session_id=header.session_id,
            transaction_id=header.transaction_id,
            flags=flags,
            body_kind=BodyKind.JSON,
            coat_kind=header.coat_kind,
            foot_kind=header.foot_kind,
        )
        self.transmit(reply, b"", address)
        self.stats[f"tx_stale_{kind.name.lower()}"] += 1

    # -- joins -------------------------------------------------------------------------------

    def _dispatch_join(self, packet: Packet, address: tuple[str, int], now: float) -> None:
        header = packet.header
        if header.session_id != 0:
            raise BadPacket("join packet with a session id", DropReason.IDS.value)
        if header.flags & Flag.CF:
            self._dispatch_join_reply(packet, address, now)
            return
        if header.source_uid == 0:
            raise BadPacket("join packet without a source id", DropReason.IDS.value)
        if header.destination_uid == 0:
            key = (address, header.source_uid, header.transaction_id)
            txn: Transaction | None = self.vacuous_joins.get(key)
            if txn is not None:
                txn.receive(packet, now)
            elif header.packet_kind == PacketKind.REQUEST:
                self._start_join_correspondent(packet, address, None, now)
            else:
                raise BadPacket("join packet for no transaction", DropReason.STALE.value)
            return
        remote = self.remotes.get(header.destination_uid)
        if remote is None:
            if header.packet_kind == PacketKind.REQUEST:
                # We lost the ids the joiner remembers: tell it to join afresh.
                self._reply_stale(packet, address, PacketKind.RENEW)
                return
            raise BadPacket("join packet for an unknown remote", DropReason.UNKNOWN_REMOTE.value)
        txn = remote.transactions.get((False, 0, header.transaction_id))
        if txn is not None:
            txn.receive(packet, now)
        elif header.packet_kind == PacketKind.REQUEST:
            self._start_join_correspondent(packet, address, remote, now)
        else:
            raise BadPacket("join packet for no transaction", DropReason.STALE.value)

    def _dispatch_join_reply(self, packet: Packet, address: tuple[str, int], now: float) -> None:
        header = packet.header
        remote = self.remotes.get(header.destination_uid)
        if remote is None:
            raise BadPacket("join reply for an unknown remote", DropReason.UNKNOWN_REMOTE.value)
        if address != remote.ha:
            raise BadPacket(
                "join reply from an address we did not join", DropReason.WRONG_ADDRESS.value
            )
        txn = remote.transactions.get((True, 0, header.transaction_id))
        if txn is not None:
            txn.receive(packet, now)
        elif header.packet_kind == PacketKind.RESPONSE and remote.joined:
            # Our ack was lost and the correspondent repeats its response: ack again, so it
            # does not wait for its time-out and answer our allow with "unjoined".
            self._reply_stale(packet, address, PacketKind.ACK)
        else:
            raise BadPacket("join reply for no transaction", DropReason.STALE.value)

    def _start_join_correspondent(
        self, packet: Packet, address: tuple[str, int], known: Remote | None, now: float
    ) -> None:
        header = packet.header
        join = parse_join_body_untrusted(packet, response=False)
        vacuous = known is None
        if vacuous and not self.main:
            raise BadPacket(
                "vacuous join sent to an estate that is not main", DropReason.NOT_MAIN.value
            )
        existing = known if known is not None else self.remotes_by_name.get(join.name)
        if existing is not None and (existing.role != join.role or existing.name != join.name):
            raise BadPacket("join claims a name held by another role", DropReason.REFUSED.value)
        status = self.keep.status_role(join.role, join.verhex, join.pubhex, self.config.auto)
        if status is Acceptance.REJECTED:
            self._reply_stale(packet, address, PacketKind.REJECT)
            self.emit(JoinRejected(join.name, join.role, here=True))
            return
        remote = existing
        if remote is None:
            remote = Remote(uid=self._new_uid(), name=join.name, ha=address)
            self._add(remote)
        for txn in list(remote.transactions.values()):
            if txn.kind == TransactionKind.JOIN and not txn.initiator:
                txn.finish()  # a newer request supersedes an older one
        remote.ha = address
        self.adopt_identity(remote, join, fuid=header.source_uid)
        vacuous_key = (address, header.source_uid, header.transaction_id) if vacuous else None
        txn = JoinCorrespondent(
            self,
            remote,
            tid=header.transaction_id,
            source_uid=header.destination_uid,
            destination_uid=header.source_uid,
            vacuous_key=vacuous_key,
            join=join,
            now=now,
        )
        if vacuous_key is not None:
            self.vacuous_joins[vacuous_key] = txn
        remote.transactions[txn.key] = txn
        txn.start(status, now)
