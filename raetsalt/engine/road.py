"""``Road``: the sans-IO RAET engine of one estate.

Driving it (the UDP driver in ``raetsalt.drivers.udp`` does exactly this)::

    road = Road(state=keep.load_state(), name=..., ...)   # records in memory from now on
    road.receive_datagram(data, address, now)     # for every datagram read
    for data, address in road.datagrams_to_send(now): sock.sendto(data, address)
    when = road.get_timer()                       # sleep at most until then
    road.handle_timer(now)                        # when it is due
    while (event := road.next_event()) is not None: ...   # KeepEvents: write them

Receive pipeline (docs/raet-wire.md §7; stricter than raet's):

0. an estate restricted to the addresses it dialed (``restrict_sources``: a minion), or
   to the addresses it admits (``admit``: the masters' own road and its
   ``cluster_peers``), drops anything from elsewhere, unparsed;
1. parse the datagram (only ``BadPacket`` can come out; it is dropped and counted);
2. join packets (plaintext by design) go to the join handlers; a correspondent is found
   by (source address, ids), so one address cannot steer another's join;
3. every other packet must be signed, name a known remote by ``de`` and verify with that
   remote's key; unsigned or forged packets are dropped without a reply (the one
   exception, on a cluster master: an adoption hello, ``de = 0``, which names the
   accepted key it is signed with: ``raetsalt.engine.adopt``);
4. for remotely initiated packets the session id must not be older than the remote's
   current one; a newer one starts a new remote session;
5. the packet goes to its transaction, or starts a correspondent (a table keyed by
   transaction kind and packet kind), or gets a stale nack.

Nothing here replies to a packet that failed to authenticate, except what the join
protocol itself needs (``pend``, ``reject``, ``renew``, ``response``), and whatever goes
to an address no session validated is limited to ``config.amplification`` times what it
sent (``raetsalt.engine.guard``).  An unauthenticated packet never changes an
established session: a join from a new address for a known estate runs its own
transaction and leaves the estate's address, ids and session alone; the estate moves
only when an allow (or a native path validation) from the new address completes.

Storage stays outside: the road holds its records in memory (``KeyBook`` for keys) and
reports each change as a ``KeepEvent``.  Operator decisions arrive as commands
(``change_key``) and take effect at once.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from raetsalt.crypto import SessionBox
from raetsalt.crypto.jobs import Answer, CryptoJob
from raetsalt.drops import DropReason
from raetsalt.engine.adopt import (
    AdoptKey,
    adoption_remote,
    is_adoption_hello,
    is_adoption_refusal,
)
from raetsalt.engine.allow import AllowCorrespondent, AllowInitiator
from raetsalt.engine.busy import Admission, screen_untrusted
from raetsalt.engine.config import RoadConfig
from raetsalt.engine.events import (
    Allowed,
    Departed,
    Event,
    LocalChanged,
    PacketDropped,
    PresenceChanged,
    RemoteChanged,
    RemoteRemoved,
    SessionEnded,
    TransactionFailed,
)
from raetsalt.engine.guard import Guard
from raetsalt.engine.identity import JoinBody, LocalEstate, open_estate
from raetsalt.engine.join import JoinCorrespondent, JoinInitiator
from raetsalt.engine.joindesk import JoinDesk
from raetsalt.engine.keybook import KeyBook
from raetsalt.engine.message import (
    LAZY_EXCLUDED,
    MessageReceiver,
    MessageSender,
    take_lazy_segment,
)
from raetsalt.engine.native.alive import announced_period, probe_at, start_alive
from raetsalt.engine.native.channel import Channel, Datagram
from raetsalt.engine.native.frames import MAGIC, is_native, parse_prefix_untrusted
from raetsalt.engine.precrypt import Precomputed
from raetsalt.engine.prework import jobs_for
from raetsalt.engine.reassembly import ReassemblyBudget
from raetsalt.engine.recall import Recall
from raetsalt.engine.remote import (
    Address,
    Exchange,
    Link,
    Outgoing,
    Remote,
    SessionChannel,
    next_id,
    sid_valid,
)
from raetsalt.engine.timers import Timed, TimerQueue, backoff
from raetsalt.engine.transaction import mirrored_header
from raetsalt.errors import BadPacket, LocalError
from raetsalt.keep.policy import KeyDecision, KeyPolicy
from raetsalt.keep.records import KeepState, KeyRef, LocalRecord, RemoteRecord, name_problem
from raetsalt.wire.body import decode_body_untrusted, encode_body, encode_message
from raetsalt.wire.enums import BodyKind, CoatKind, Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import Packet, pack_packet, parse_packet_untrusted

__all__ = ["Road", "RoadConfig"]

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

Correspond = Callable[[Remote, Packet, Address, float], None]


class _Housekeeping:
    """Per-remote timer owner (presence, reconnect, queued-message expiry)."""

    __slots__ = ("remote", "road", "deadline")

    def __init__(self, road: Road, remote: Remote) -> None:
        self.road = road
        self.remote = remote
        self.deadline: float | None = None

    def on_timer(self, now: float) -> None:
        self.road.service_remote(self.remote, now)


_REFUSED_DETAIL = {DropReason.FOREIGN_SOURCE: "not an address this estate dialed",
                   DropReason.NOT_PEER: "not a configured peer"}


class Road:
    """The engine of one estate on the road.  See the module docstring for the calls.

    ``state`` is what the keep held at start (``Keep.load_state``); a new estate (no
    local record) is created with ``name`` and the other arguments; either is reported
    as ``LocalChanged`` (each start raises its epoch: ``identity.open_estate``).
    ``policy`` decides key acceptance (default: ``config.auto``).
    """

    def __init__(
        self,
        *,
        state: KeepState | None = None,
        ha: Address = ("127.0.0.1", 7530),
        name: str = "",
        role: str = "",
        main: bool = False,
        kind: int = 0,
        config: RoadConfig | None = None,
        policy: KeyPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        state = state if state is not None else KeepState()
        self.config = config = config if config is not None else RoadConfig()
        self.ha: Address = ha  # where the driver bound us
        self.rng = rng if rng is not None else random.Random()
        self.secret_rng = rng if rng is not None else random.SystemRandom()
        self.stats: Counter[str] = Counter()
        self.sources: frozenset[Address] | None = None
        """The only addresses datagrams are taken from (``restrict_sources``); None: any."""
        self.timers = TimerQueue()
        self.remotes: dict[int, Remote] = {}
        self.remotes_by_name: dict[str, Remote] = {}
        self.lazy_heads: dict[bytes, MessageReceiver] = {}
        self.reassembly = ReassemblyBudget.for_config(config)
        self._outbox: list[tuple[Datagram, Address]] = []
        self._events: deque[Event] = deque()
        self._housekeeping: dict[int, _Housekeeping] = {}
        self._long_boxes: dict[bytes, SessionBox] = {}
        self.precomputed = Precomputed(self.stats)
        self._dirty: dict[SessionChannel, None] = {}
        self.answer_within: float | None = None
        """After ``datagrams_to_send``: the shortest smoothed round trip among the native
        sessions it flushed that await the answer to a little request/response traffic
        (``Channel.answer_expected``); None when none does.  A driver may poll its socket
        for that long instead of sleeping at once."""
        self._persisted: dict[str, RemoteRecord] = {}
        self._next_mid = 0
        self.keys = KeyBook(
            policy if policy is not None else KeyPolicy(config.auto),
            roles=state.roles,
            denied=state.denied,
            broken=state.broken,
            max_pending=config.max_pending,
            emit=self.emit,
        )
        self.guard = Guard(
            factor=config.amplification, burst=config.new_ids_burst, rate=config.new_ids_per_second
        )
        self.joins = JoinDesk(self)
        self.admission = Admission.for_config(config)
        self._correspondents: Mapping[tuple[int, int], Correspond] = {
            (TransactionKind.ALLOW, PacketKind.HELLO): self._start_allow_correspondent,
            (TransactionKind.ALIVE, PacketKind.REQUEST): self._answer_alive,
            (TransactionKind.MESSAGE, PacketKind.MESSAGE): self._start_message_receiver,
        }
        self._restore(state, ha=ha, name=name, role=role, main=main, kind=kind)
        self.recall = Recall.after_restart(self)  # a restarted main calls its remotes back
        self.admit: Callable[[Address], bool] | None = None
        """Only datagrams from addresses this admits are read (None: all); the others
        are dropped and counted (``not_peer``) before any work: the masters' own road
        admits its ``cluster_peers``."""
        self.adopt_key: AdoptKey | None = None
        """A cluster master's lookup of the keys its cluster accepted: set, an adoption
        hello may start a session without a join (``raetsalt.engine.adopt``)."""

    # -- set-up ---------------------------------------------------------------------------

    def _restore(
        self, state: KeepState, *, ha: Address, name: str, role: str, main: bool, kind: int
    ) -> None:
        record, self._local = open_estate(
            state.local, name=name, role=role, main=main, kind=kind, ha=ha,
            epoch=max((saved.epoch for saved in state.remotes), default=0),
        )
        self._local_record = record
        self.emit(LocalChanged(record))  # a new estate, or this start's epoch
        self.puid = record.puid
        for saved in state.remotes:
            keys = self.keys.roles.get(saved.role)
            if keys is None:
                continue  # keys deleted by an operator (or unreadable): it must join afresh
            self._add(Remote.restore(saved, keys, record.epoch))
            self._persisted[saved.name] = saved

    @property
    def local(self) -> LocalEstate:
        return self._local

    @property
    def name(self) -> str:
        return self._local.name

    def _add(self, remote: Remote) -> None:
        self.remotes[remote.uid] = remote
        self.remotes_by_name[remote.name] = remote
        self._housekeeping[remote.uid] = _Housekeeping(self, remote)

    def _new_uid(self) -> int:
        uid = self.puid
        while True:
            uid = next_id(uid)
            if uid != 1 and uid not in self.remotes and self.guard.departed(uid, 0.0) is None:
                self.puid = uid
                return uid

    # -- the sans-IO surface --------------------------------------------------------------

    def receive_datagram(self, data: bytes, address: Address, now: float) -> None:
        """Process one datagram; never raises for anything the datagram contains."""
        self.stats["rx"] += 1
        refused = self._refused_source(address)
        if refused is not None:
            self.drop(refused, address, _REFUSED_DETAIL[refused])
            return
        if address not in self.guard.trusted:
            self.guard.received(address, len(data))
        try:
            if self.lazy_heads and take_lazy_segment(
                data, address, now, self.lazy_heads, self.config.max_packet_size
            ):
                return
            if is_native(data):
                self._receive_native(data, address, now)
                return
            packet = parse_packet_untrusted(data, max_size=self.config.max_packet_size)
            if not screen_untrusted(self, packet, address, now):  # "busy": before key work
                self._dispatch(packet, address, now)
        except BadPacket as exc:
            self._drop_bad(exc, address)

    def crypto_jobs(self, data: bytes, address: Address) -> list[CryptoJob]:
        """The signature checks and key agreements ``receive_datagram(data, address)``
        would do now, for a driver to compute off the loop (``raetsalt.engine.precrypt``)."""
        return jobs_for(data, address, remotes=self.remotes, local=self._local,
                        long_boxes=self._long_boxes, admission=self.admission,
                        max_size=self.config.max_packet_size)

    def take_crypto(self, jobs: list[CryptoJob], answers: list[Answer]) -> None:
        """Answers of ``crypto_jobs`` (``answers[i]`` is ``jobs[i]``'s) for the datagrams
        received next; they replace the last ones given (``[], []``: none)."""
        self.precomputed.take(jobs, answers)

    def receive_train(self, data: memoryview, segment: int, address: Address, now: float) -> bool:
        """A GRO train (datagrams of ``segment`` bytes, the last may be shorter) taken as
        ``receive_datagram`` takes each; False, nothing done, unless a native channel's."""
        remote = self.remotes.get(int.from_bytes(data[2:6], "big")) if data[:2] == MAGIC else None
        if remote is None or remote.channel is None or address not in self.guard.trusted:
            return False
        if self._refused_source(address) is not None:
            return False  # each datagram is dropped (and counted) by ``receive_datagram``
        heard = remote.channel.receive_train(data, segment, address, now, self.receive_datagram)
        if heard and remote.alive is not True:
            self._set_alive(remote, True)
        return True

    def datagrams_to_send(self, now: float) -> list[tuple[Datagram, Address]]:
        # Native channels send here, once per batch: everything queued since the last
        # call shares datagrams, and one ack answers a whole batch of received packets.
        soon: float | None = None
        while self._dirty:
            channel = next(iter(self._dirty))
            del self._dirty[channel]
            remote = getattr(channel, "remote", None)
            if remote is not None and remote.channel is channel:
                channel.flush(now, self._outbox)
                within = channel.answer_expected()
                if within is not None and (soon is None or within < soon):
                    soon = within
        self.answer_within = soon
        out, self._outbox = self._outbox, []
        return out

    def get_timer(self) -> float | None:
        """Absolute time of the next deadline, or None."""
        return self.timers.get_timer()

    def has_output(self) -> bool:
        """Datagrams are waiting for ``datagrams_to_send`` (so a driver must not sleep)."""
        return bool(self._outbox or self._dirty)

    def handle_timer(self, now: float) -> None:
        for owner in self.timers.pop_due(now):
            try:
                owner.on_timer(now)
            except BadPacket as exc:  # a retransmission found the state unusable
                self._drop_bad(exc, ("", 0))

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else None

    # -- commands -------------------------------------------------------------------------

    def _refused_source(self, address: Address) -> DropReason | None:
        """Why datagrams from ``address`` are not read at all (pipeline step 0), or None."""
        if self.sources is not None and address not in self.sources:
            return DropReason.FOREIGN_SOURCE
        if self.admit is not None and not self.admit(address):
            return DropReason.NOT_PEER
        return None

    def restrict_sources(self, sources: frozenset[Address] | None) -> None:
        """Take datagrams only from ``sources`` (None: from anyone).  An estate that
        only dials out (a minion) names the addresses it dialed: anything else is
        dropped before parsing, counted as ``drop_foreign_source`` and reported (it
        is answered with nothing, and costs no key work)."""
        self.sources = sources

    def connect(
        self, ha: Address, now: float, *, name: str | None = None, like: int | None = None
    ) -> int:
        """Keep a session with the estate at ``ha`` (usually a main): join, allow, and
        re-establish it by itself after failures or restarts.  Returns the remote's uid.

        ``name`` is the name we expect the remote to have; it makes the remote addressable
        by that name at once (messages queue until the session is up).  If the join
        reveals another name, the remote is renamed to it (and if that name is an estate
        we knew at another address, with the same keys, this one takes it over).

        ``like``: a remote we are joined with that holds the same identity as the estate
        at ``ha`` (another master of its cluster).  If we never joined the estate at
        ``ha``, the session starts with an adoption allow, no join (``engine.adopt``);
        should that not complete, it joins.
        """
        remote = self.remotes_by_name.get(name) if name else None
        if remote is None:
            remote = next((r for r in self.remotes.values() if r.ha == ha), None)
        if remote is None:
            uid = self._new_uid()
            remote = Remote(uid=uid, name=name or f"{ha[0]}:{ha[1]}", ha=ha)
            self._add(remote)
        self._move(remote, ha, trusted=True)
        remote.auto_connect = True
        # Always re-join on (re)connect: the other side may have restarted.
        self._lose_session(remote)
        remote.link = Link.UNJOINED
        model = self.remotes.get(like) if like is not None else None
        if (model is not None and model is not remote and model.joined and remote.fuid == 0
                and model.verifier is not None and self.config.native):
            remote.role, remote.main, remote.kind = model.role, model.main, model.kind
            remote.set_keys(model.verify_key, model.long_public)
            remote.signs_joins, remote.adopt, remote.link = True, True, Link.JOINED
            if name_problem(remote.name) is not None:  # (the address: not a keep name)
                self.rename(remote, "at-{}-{}".format(ha[0].replace(":", "-"), ha[1]))
            if remote.sid == 0:
                self._bump_sid(remote)
        remote.retry_at = now
        self.service_remote(remote, now)
        return remote.uid

    def release(self, uid: int, now: float) -> None:
        """``connect``'s opposite: stop keeping a session with this remote (no more joins,
        allows or alive probes from here) and end the one there is, so the other side's
        probes fail and it stops counting on us.  Messages queued for it stay until they
        expire; a later ``connect`` takes it up again."""
        remote = self.remotes.get(uid)
        if remote is None:
            return
        remote.auto_connect = False
        self._lose_session(remote)
        self._rearm(remote, now)

    def join(self, uid: int, now: float) -> None:
        remote = self.remotes[uid]
        if remote.in_progress(TransactionKind.JOIN) is not None:
            return
        remote.link = Link.UNJOINED
        txn = JoinInitiator(self, remote, now=now)
        remote.transactions[txn.key] = txn
        txn.start(now)

    def allow(self, uid: int, now: float) -> None:
        remote = self.remotes[uid]
        if not remote.joined or (remote.fuid == 0 and not remote.adopt):
            # No id of ours there (renewed, or joined by it): an allow would carry de 0
            # (which only an adoption hello may: ``engine.adopt``).
            self.join(uid, now)
            return
        if remote.in_progress(TransactionKind.ALLOW) is not None:
            return
        txn = AllowInitiator(self, remote, now=now)
        remote.transactions[txn.key] = txn
        txn.start(now)

    def alive(self, uid: int, now: float) -> None:
        remote = self.remotes[uid]
        if not remote.allowed:
            self.allow(uid, now)
        elif remote.in_progress(TransactionKind.ALIVE) is None:
            start_alive(self, remote, now)

    def send_message(self, to: str | int, body: Mapping[str, Any], now: float) -> int:
        """Queue ``body`` (a mapping) for ``to`` (name or uid); returns the message id.

        Messages to one remote are delivered in order.  A message that cannot be delivered
        within ``config.message_timeout`` (also while the remote is not yet allowed) ends
        with ``TransactionFailed(kind="message")``; a delivered one with
        ``MessageDelivered``.
        """
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
            size = self.config.max_message_size
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

    def change_key(self, action: str, ref: KeyRef, now: float) -> bool:
        """An operator's decision (``raetsalt.keep.policy.Action``) on the key ``ref``,
        effective at once: a pending join waiting for it is answered, and deleting or
        rejecting a key ends the sessions of that role (the remote is then told
        ``unjoined`` when it speaks, and joins again).  False if ``ref`` is not stored
        as given (nothing changed)."""
        change = self.keys.change(action, ref)
        if change is None:
            return False
        acceptance = None if change.record is None else change.record.acceptance
        for txn in self.joins.of_role(ref.role):
            if acceptance is None:
                txn.finish()
            else:
                txn.decided(acceptance, now)
        for remote in [r for r in self.remotes.values() if r.role == ref.role]:
            if change.drop_sessions:
                self._depart(remote, now)
                continue
            joining = remote.in_progress(TransactionKind.JOIN)
            if isinstance(joining, JoinInitiator) and acceptance is not None:
                joining.decided(acceptance, now)
        return True

    # -- services for transactions (the RoadPort) ----------------------------------------

    def transmit(self, header: Header, coat: bytes, address: Address) -> None:
        sign = self._local.signer.sign if header.foot_kind == FootKind.NACL else None
        data = pack_packet(header, coat, sign, max_size=self.config.max_packet_size)
        if address not in self.guard.trusted and not self.guard.spend(address, len(data)):
            self.stats["tx_unvalidated_limit"] += 1
            return
        self._outbox.append((data, address))
        self.stats["tx"] += 1

    def transmit_datagram(self, data: bytes, address: Address) -> None:
        """Queue a datagram a transaction packed (and signed) itself."""
        if address not in self.guard.trusted and not self.guard.spend(address, len(data)):
            self.stats["tx_unvalidated_limit"] += 1
            return
        self._outbox.append((data, address))
        self.stats["tx"] += 1

    def emit(self, event: Event) -> None:
        self._events.append(event)

    def arm(self, owner: Timed, when: float | None) -> None:
        self.timers.arm(owner, when)

    def want_flush(self, channel: SessionChannel) -> None:
        self._dirty[channel] = None

    def announced_period(self) -> float:
        return announced_period(self.config, len(self.remotes))

    def long_box(self, remote: Remote) -> SessionBox:
        box = self._long_boxes.get(remote.long_public)
        if box is None:
            box = self._long_boxes[remote.long_public] = self.precomputed.box(
                self._local.long_keys.secret, remote.long_public
            )
        return box

    def open_coat(self, remote: Remote, coat: bytes, coat_kind: CoatKind) -> bytes:
        if coat_kind == CoatKind.NADA:
            return coat
        if remote.session is None:
            raise BadPacket("encrypted packet from a remote without a session", DropReason.DECRYPT)
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

    def drop(self, reason: DropReason, address: Address, detail: str) -> None:
        """Count and report a datagram dropped after its transaction took it."""
        self.stats[f"drop_{reason.value}"] += 1
        self.emit(PacketDropped(reason, address, detail))

    def name_holder(self, name: str) -> Remote | None:
        return self.remotes_by_name.get(name)

    def decide_key(self, role: str, verhex: str, pubhex: str) -> KeyDecision:
        decision = self.keys.decide(role, verhex, pubhex)
        if decision is None:  # a main's key pending on a minion beyond the limit
            raise BadPacket("too many keys pending", DropReason.PENDING_LIMIT)
        return decision

    def rename(self, remote: Remote, name: str) -> None:
        if name != remote.name:
            self.remotes_by_name.pop(remote.name, None)
            if self._persisted.pop(remote.name, None) is not None:
                self.emit(RemoteRemoved(remote.name))  # its record lives under the old name
            remote.name = name
            self.remotes_by_name[remote.name] = remote

    def adopt_identity(self, remote: Remote, join: JoinBody, *, fuid: int) -> None:
        self.rename(remote, join.name)
        remote.role, remote.main, remote.kind, remote.fuid = join.role, join.main, join.kind, fuid
        remote.set_keys(bytes.fromhex(join.verhex), bytes.fromhex(join.pubhex))

    def forget_join(self, txn: Exchange) -> None:
        assert isinstance(txn, JoinCorrespondent)
        self.joins.forget(txn)

    def register_lazy(self, stem: bytes, txn: Exchange) -> None:
        assert isinstance(txn, MessageReceiver)
        self.lazy_heads[stem] = txn

    def forget_lazy(self, stem: bytes, txn: Exchange) -> None:
        if self.lazy_heads.get(stem) is txn:
            del self.lazy_heads[stem]

    def remote_changed(self, remote: Remote) -> None:
        if not remote.joined and remote.fuid == 0:
            return  # nothing worth keeping about a remote that never joined
        if not remote.trusted and remote.name not in self._persisted:
            # A join (which a blind spoofer can ack) proves no address: a new remote is
            # stored once an allow from its address completed (``engine.recall``).
            self.stats["remote_unvalidated_unsaved"] += 1
            return
        record = remote.record()
        if self._persisted.get(remote.name) != record:
            self._persisted[remote.name] = record
            self.emit(RemoteChanged(record))
        if self._local_record.puid != self.puid:
            self._local_record = LocalRecord(**{**vars(self._local_record), "puid": self.puid})
            self.emit(LocalChanged(self._local_record))

    # -- connection life cycle (called by transactions) ------------------------------------

    def on_joined(self, remote: Remote, now: float, *, initiator: bool, vacuous: bool) -> None:
        remote.retry_delay = 0.0
        remote.acceptance_wait = 0.0
        if remote.sid == 0:
            self._bump_sid(remote)
        if not initiator:
            # A correspondent learns nothing trustworthy from a join: the estate keeps its
            # address, ids and session; an allow from the new address moves it.
            if remote.link is Link.UNJOINED:
                remote.link = Link.JOINED
            self.remote_changed(remote)
            return
        if vacuous:
            remote.rsid = 0  # the other side numbers its sessions afresh for us
        remote.link = Link.JOINED
        self.remote_changed(remote)
        # We joined because we (re)started or lost the remote: our session is stale, and
        # we allow next.  The correspondent keeps its session until that allow replaces
        # it, so a late duplicate join request costs nothing.
        self._lose_session(remote)
        if remote.auto_connect:
            self.allow(remote.uid, now)

    def on_allowed(
        self,
        remote: Remote,
        session: SessionBox,
        now: float,
        *,
        native: bool,
        initiator: bool,
        ha: Address,
        fuid: int,
        rsid: int,
        adopted: bool = False,
    ) -> None:
        if remote.channel is not None:
            remote.outbox.extendleft(reversed(remote.channel.unfinished()))
            remote.channel = None
        # The handshake authenticated the remote at ``ha`` (path validation).
        self._move(remote, ha, trusted=True)
        remote.fuid, remote.rsid = fuid, rsid
        if native:
            loopback = ha[0].startswith("127.") or ha[0] == "::1"
            config = self.config
            size = config.native_loopback_datagram_size if loopback else config.native_datagram_size
            remote.channel = Channel(
                self,
                remote,
                session,
                initiator=initiator,
                datagram_size=size,
                window=config.native_window,
                now=now,
            )
        remote.session = session
        remote.adopt = remote.adopted = False
        if self.config.native:
            remote.signs_joins = native  # it showed (or not) that it is ours, authenticated
        remote.link = Link.ALLOWED
        remote.replay = type(remote.replay)()  # a new session key: a fresh window
        remote.retry_delay = 0.0
        remote.last_rx = now
        self._bump_sid(remote)
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
        self.remote_changed(remote)
        self._set_alive(remote, True)
        if adopted:
            self.stats["adopted"] += 1
        self.emit(Allowed(remote.name, remote.profile, adopted))
        self._pump(remote, now)
        self._rearm(remote, now)

    def on_unjoined(self, remote: Remote, now: float) -> None:
        self._lose_session(remote)
        remote.link = Link.UNJOINED
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
            remote.link = Link.UNJOINED
            self.on_connect_failed(remote, now)
        else:
            self._rearm(remote, now)

    def on_connect_failed(self, remote: Remote, now: float) -> None:
        if not remote.auto_connect:
            return
        remote.retry_delay = backoff(
            remote.retry_delay, self.config.retry_min, self.config.retry_max
        )
        # Jitter spreads reconnects so a thousand minions do not hit a restarted main at once.
        remote.retry_at = now + remote.retry_delay * self.rng.uniform(0.5, 1.0)
        self._rearm(remote, now)

    def on_adoption_failed(self, remote: Remote) -> None:
        self.stats["adopt_failed"] += 1
        if (remote.adopted and not remote.allowed and self.remotes.get(remote.uid) is remote
                and remote.in_progress(TransactionKind.ALLOW) is None):
            self._remove(remote)  # made by hellos alone, none completed: nothing proved it

    def on_message_finished(self, remote: Remote, now: float) -> None:
        remote.sender = None
        self._pump(remote, now)

    def on_renew(self, remote: Remote, now: float) -> None:
        remote.fuid = 0
        self.join(remote.uid, now)

    def end_session(self, remote: Remote, reason: str, detail: str, now: float) -> None:
        self.stats[f"native_ended_{reason}"] += 1
        self.emit(SessionEnded(remote.name, reason, detail))
        self._lose_session(remote)
        if reason == "key_expired":
            self.allow(remote.uid, now)  # (both ends may: crossing allows resolve by name)
        else:
            self.on_connect_failed(remote, now)  # the usual back-off, then a new allow
        self._rearm(remote, now)

    def on_path_validated(self, remote: Remote, ha: Address) -> None:
        self._move(remote, ha, trusted=True)
        self.remote_changed(remote)

    def on_estate_moved(self, placeholder: Remote, known: Remote) -> None:
        # Our session ids must continue from the known estate's (the other side checks
        # them), and so must the messages queued for it.
        placeholder.sid, placeholder.sid_reserved = known.sid, known.sid_reserved
        placeholder.sid_epoch = known.sid_epoch
        placeholder.rsid = known.rsid
        placeholder.outbox.extendleft(reversed(known.outbox))
        known.outbox.clear()
        placeholder.auto_connect = placeholder.auto_connect or known.auto_connect
        self._remove(known)

    def _lose_session(self, remote: Remote) -> None:
        """The session keys are gone: end its message transactions; ours go out again."""
        if remote.link is Link.ALLOWED:
            remote.link = Link.JOINED
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

    def _bump_sid(self, remote: Remote) -> None:
        if remote.next_sid_reserved(self._local_record.epoch):
            self.remote_changed(remote)

    def _move(self, remote: Remote, ha: Address, *, trusted: bool) -> None:
        """Point ``remote`` at ``ha`` (``trusted``: a validated address)."""
        if remote.ha == ha and remote.trusted == trusted:
            return
        if remote.trusted:
            self.guard.untrust(remote.ha)
        remote.ha, remote.trusted = ha, trusted
        if trusted:
            self.guard.trust(ha)

    def _remove(self, remote: Remote) -> None:
        """Forget ``remote`` completely (its keep record too)."""
        for txn in list(remote.transactions.values()):
            txn.finish()
        for join in self.joins.of_remote(remote):
            join.finish()
        self._lose_session(remote)
        self._set_alive(remote, False)
        self.timers.arm(self._housekeeping.pop(remote.uid), None)
        self._move(remote, remote.ha, trusted=False)
        del self.remotes[remote.uid]
        if self.remotes_by_name.get(remote.name) is remote:
            del self.remotes_by_name[remote.name]
        if self._persisted.pop(remote.name, None) is not None:
            self.emit(RemoteRemoved(remote.name))

    def _depart(self, remote: Remote, now: float) -> None:
        """An operator took the remote's key away: forget it, but tell it (``unjoined``)
        when it speaks, for a while, so that it joins again at once."""
        if remote.verifier is not None:
            self.guard.depart(remote.uid, remote.verifier, now + self.config.departed_memory)
        self._remove(remote)
        self.emit(Departed(remote.name, remote.role))

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
        if remote.auto_connect and not remote.allowed and not connecting:
            times.append(max(remote.retry_at, now))
        if remote.allowed and TransactionKind.ALIVE not in kinds:
            times.append(probe_at(self.config, len(self.remotes), remote))
        if remote.outbox:
            times.append(remote.outbox[0].expires)
        keeper = self._housekeeping.get(remote.uid)
        if keeper is None:
            return
        when = min(times) if times else None
        if keeper.deadline is None or when is None or when < keeper.deadline:
            self.timers.arm(keeper, when)

    def service_remote(self, remote: Remote, now: float) -> None:
        """Housekeeping of one remote: reconnect, presence, expired queued messages."""
        if remote.uid not in self.remotes:
            return
        if remote.auto_connect and not self._handshaking(remote) and now >= remote.retry_at:
            if not remote.joined:
                self.join(remote.uid, now)
            elif not remote.allowed:
                self.allow(remote.uid, now)
        if (
            remote.allowed
            and now >= probe_at(self.config, len(self.remotes), remote)
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

    def _drop_bad(self, exc: BadPacket, address: Address) -> None:
        trigger = exc.trigger
        self.drop(trigger if isinstance(trigger, DropReason) else DropReason.MALFORMED,
                  address, str(exc))

    def _receive_native(self, data: bytes, address: Address, now: float) -> None:
        uid, counter = parse_prefix_untrusted(data)
        remote = self.remotes.get(uid)
        channel = remote.channel if remote is not None else None
        if channel is None or remote is None:
            raise BadPacket("native datagram for no native session", DropReason.UNKNOWN_REMOTE)
        channel.receive_untrusted(data, counter, now, address)  # (notes the remote was heard)
        if remote.alive is not True:
            self._set_alive(remote, True)

    def _dispatch(self, packet: Packet, address: Address, now: float) -> None:
        header = packet.header
        if header.flags & Flag.BF:
            raise BadPacket("broadcast packets are not supported", DropReason.BROADCAST)
        if header.transaction_kind == TransactionKind.JOIN:
            self._dispatch_join(packet, address, now)
            return
        if header.foot_kind != FootKind.NACL:
            raise BadPacket("unsigned packet", DropReason.UNSIGNED)
        if self.adopt_key is not None and is_adoption_hello(packet):
            self._start_adoption(self.adopt_key, packet, address, now)
            return
        if not (
            (header.source_uid or is_adoption_refusal(header))
            and header.destination_uid
            and header.session_id
        ):
            raise BadPacket("zero estate or session id", DropReason.IDS)
        remote = self.remotes.get(header.destination_uid)
        if remote is None or remote.verifier is None:
            if self._answer_departed(packet, address, now):
                return
            raise BadPacket("unknown remote", DropReason.UNKNOWN_REMOTE)
        if (
            header.packet_kind == PacketKind.MESSAGE
            and not int(header.flags) & LAZY_EXCLUDED
            and header.transaction_kind == TransactionKind.MESSAGE
            and header.session_id == remote.rsid
        ):
            # A plain segment of a message we are receiving: its signature is checked only
            # if the message's box does not open.  Nothing here may answer it.
            txn = remote.transactions.get((False, header.session_id, header.transaction_id))
            if isinstance(txn, MessageReceiver) and txn.lazy:
                txn.receive_unverified(packet, address, now)
                return
        if not self.precomputed.verify(remote.verifier, packet.signed_bytes(), packet.foot):
            raise BadPacket("signature does not verify", DropReason.SIGNATURE)
        # Authenticated from here on (though perhaps replayed, and from anywhere).
        remote.last_rx = now
        remote.alive_failures = 0
        self._set_alive(remote, True)
        ours = bool(header.flags & Flag.CF)  # a reply within a transaction we started
        if not ours and not self._check_session(remote, packet, address):
            return
        found = remote.transactions.get((ours, header.session_id, header.transaction_id))
        if found is not None:
            found.receive(packet, now)
        elif ours:
            if header.packet_kind not in _NACK_KINDS:
                self.reply_stale(packet, address)
            else:
                self.stats["stale_nack"] += 1
        else:
            start = self._correspondents.get((header.transaction_kind, header.packet_kind))
            if start is None:
                raise BadPacket("packet belongs to no transaction", DropReason.STALE)
            start(remote, packet, address, now)
        self._rearm(remote, now)

    def _answer_departed(self, packet: Packet, address: Address, now: float) -> bool:
        """A remote whose key an operator took away still speaks: if the packet is really
        its own, answer ``unjoined`` so that it joins again.  True if answered."""
        header = packet.header
        verifier = self.guard.departed(header.destination_uid, now)
        if verifier is None or not self.precomputed.verify(
            verifier, packet.signed_bytes(), packet.foot
        ):
            return False
        if header.flags & Flag.CF or header.packet_kind in _NACK_KINDS:
            return True
        self.reply_stale(packet, address, PacketKind.UNJOINED)
        return True

    def _check_session(self, remote: Remote, packet: Packet, address: Address) -> bool:
        """Apply the remote session id rules (docs/raet-wire.md §6) to a remotely initiated
        packet."""
        header = packet.header
        sid = header.session_id
        if not sid_valid(sid, remote.rsid):
            if (
                header.transaction_kind == TransactionKind.ALLOW
                and header.packet_kind == PacketKind.HELLO
                and not remote.allowed
            ):
                # No session to protect, and the remote numbers its sessions from scratch
                # (it lost its records): the handshake proves it fresh, and its completion
                # adopts this sid.
                return True
            if header.packet_kind not in _NACK_KINDS:
                self.reply_stale(packet, address)
            self.stats["stale_session"] += 1
            return False
        if sid != remote.rsid:
            remote.rsid = sid
            for txn in list(remote.transactions.values()):
                if not txn.initiator and txn.sid != sid and txn.kind != TransactionKind.JOIN:
                    txn.finish()  # joins always carry si 0 and are not part of a session
        return True

    def _start_allow_correspondent(
        self, remote: Remote, packet: Packet, address: Address, now: float
    ) -> None:
        joining = self.joins.from_address(remote, address)
        for join in joining:
            if join.awaiting_ack:
                # The hello is signed with the key the join delivered, so the joiner
                # completed the join; its ack was lost or overtaken.
                join.complete(now)
        if not remote.joined:
            self.reply_stale(packet, address, PacketKind.UNJOINED)
            return
        if any(not j.finished for j in joining) or remote.in_progress(TransactionKind.JOIN):
            self.reply_stale(packet, address, PacketKind.REFUSE)
            return
        ours = any(
            t.kind == TransactionKind.ALLOW and t.initiator for t in remote.transactions.values()
        )
        if ours and self.name < remote.name:
            # Both sides started an allow at once: the smaller name refuses (as raet does).
            self.reply_stale(packet, address, PacketKind.REFUSE)
            return
        header = packet.header
        txn = AllowCorrespondent(
            self,
            remote,
            sid=header.session_id,
            tid=header.transaction_id,
            fuid=header.source_uid,
            reply_to=address,
            now=now,
        )
        txn.start(packet, now)  # raises BadPacket, leaving everything as it was, if bad
        for other in list(remote.transactions.values()):
            if (
                isinstance(other, AllowCorrespondent) and other.address == address
            ) or isinstance(other, AllowInitiator):
                other.finish()  # a newer, valid hello supersedes an unfinished handshake
        remote.transactions[txn.key] = txn

    def _start_adoption(
        self, adopt_key: AdoptKey, packet: Packet, address: Address, now: float
    ) -> None:
        remote = adoption_remote(self, adopt_key, packet, address)
        if remote is None:
            return
        header = packet.header
        txn = AllowCorrespondent(self, remote, sid=header.session_id,
                                 tid=header.transaction_id, fuid=header.source_uid,
                                 reply_to=address, now=now, adopted=True)
        try:
            txn.start(packet, now)
        except BadPacket:
            self.on_adoption_failed(remote)
            raise
        for other in list(remote.transactions.values()):
            if (isinstance(other, AllowCorrespondent) and other.address == address) or \
                    isinstance(other, AllowInitiator):
                other.finish()  # a newer, valid hello supersedes an unfinished handshake
        remote.transactions[txn.key] = txn
        self._rearm(remote, now)

    def _handshaking(self, remote: Remote) -> bool:
        return any(
            t.kind in (TransactionKind.JOIN, TransactionKind.ALLOW)
            for t in remote.transactions.values()
        )

    def _answer_alive(self, remote: Remote, packet: Packet, address: Address, now: float) -> None:
        if self._handshaking(remote) and not remote.allowed:
            # Our side of a handshake is still running; answering "unallowed" now would
            # start another one.  The alive's own retry will find the session up.
            self.stats["alive_during_handshake"] += 1
            return
        if not remote.joined:
            kind = PacketKind.UNJOINED
        elif not remote.allowed:
            if address == remote.ha and self.recall and self.recall.hurry(remote.uid, now):
                self.stats["recall_hurried"] += 1
                return  # its call, next, is the answer (engine/recall.py)
            kind = PacketKind.UNALLOWED
        else:
            kind = PacketKind.ACK
        self.reply_stale(packet, remote.ha, kind)

    def _start_message_receiver(
        self, remote: Remote, packet: Packet, address: Address, now: float
    ) -> None:
        header = packet.header
        if remote.replay.seen(header.transaction_id):
            self.stats["replayed_message"] += 1
            self.reply_stale(packet, remote.ha, PacketKind.DONE, copy_wait=True)
            return
        if header.flags & Flag.AF:
            # A retransmission for a transaction we no longer have (raet answers nack).
            self.reply_stale(packet, remote.ha)
            return
        if not remote.allowed:
            if not self._handshaking(remote):
                self.reply_stale(packet, remote.ha, PacketKind.UNALLOWED)
            return
        receivers = sum(1 for t in remote.transactions.values() if isinstance(t, MessageReceiver))
        if receivers >= self.config.max_receivers:
            raise BadPacket("too many concurrent messages from one remote", DropReason.OVERLOAD)
        txn = MessageReceiver(self, remote, header, now=now)
        remote.transactions[txn.key] = txn
        txn.receive(packet, now)

    def reply_stale(
        self,
        packet: Packet,
        address: Address,
        kind: PacketKind = PacketKind.NACK,
        *,
        copy_wait: bool = False,
    ) -> None:
        """Answer a packet outside any transaction with the ids mirrored (raet's Stalent)."""
        self.transmit(mirrored_header(packet, kind, copy_wait=copy_wait), b"", address)
        self.stats[f"tx_stale_{kind.name.lower()}"] += 1

    # -- joins -------------------------------------------------------------------------------

    def new_remote(self, name: str, ha: Address) -> Remote:
        """A remote first seen in a join from ``ha`` (not a validated address yet)."""
        remote = Remote(uid=self._new_uid(), name=name, ha=ha)
        self._add(remote)
        return remote

    def _dispatch_join(self, packet: Packet, address: Address, now: float) -> None:
        if packet.header.session_id != 0:
            raise BadPacket("join packet with a session id", DropReason.IDS)
        if packet.header.flags & Flag.CF:
            self.joins.receive_reply(packet, address, now)
        else:
            self.joins.receive(packet, address, now)
