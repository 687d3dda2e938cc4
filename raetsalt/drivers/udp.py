"""Non-blocking UDP pump for a sans-IO ``Road``: the road's only contact with sockets.

``RoadStack`` owns one UDP socket (IPv4 or IPv6, chosen by the bound address) and one
``Road``.  Each wake-up (``service_ready``) it

1. drains the socket until it is empty (at most ``max_drain`` reads and
   ``MAX_DRAIN_BYTES``, so a flood cannot starve timers and sends), handing every
   datagram to ``Road.receive_datagram`` (GRO trains to ``Road.receive_train``): with
   ``raetsalt._udpio`` one recvmmsg per read, the last one short (the socket is empty),
   else one datagram per read and a ``poll`` to ask whether more is waiting;
2. fires the road's due timers;
3. sends everything ``Road.datagrams_to_send`` returns.  On EAGAIN the rest stays queued
   in order and the socket is watched for writability; nothing ever blocks;
4. hands the road's persistence events to its keep writer (a background thread for a
   ``FileKeep``: ``raetsalt.drivers.keepwriter``), and returns the other events.

Between wake-ups ``service(timeout)`` waits on a selector for readability (and
writability while datagrams are queued) at most until ``Road.get_timer()``: no busy
loop, no fixed sleeps.  What the application queued since the last wake-up is sent
before that wait, not after a read.  To embed a stack in another selector loop, ``register`` it with
that selector, call ``service_ready()`` when its file descriptor is ready and also when
``timeout()`` expires (and ``spin()`` before that selector's wait, below).

Busy polling: when what was just sent awaits its answer from a nearby peer (a request,
or a reply the peer will acknowledge with its next request: ``Road.answer_within``, a
smoothed round trip of at most ``SPIN_RTT_FACTOR`` times the budget), the wait starts by
polling the socket without sleeping for up to ``busy_poll`` seconds (50 us).  Waking a
sleeping process costs more than that on a virtual machine (an interrupt to an idle
virtual CPU), so request/response traffic on one host or a fast LAN answers sooner;
bulk transfers (more than a few datagrams in flight), far peers and an idle road never
spin.  ``busy_poll=0`` turns it off.  ``stats``: ``spin_hits``, ``spin_misses``.

The keep is read once, when the stack opens; operator decisions reach a running stack
as commands (``change_key``), never by re-reading files.

Socket choices and why:

* no ``SO_REUSEADDR``: two processes must not silently share a port (raet set it);
* ``SO_RCVBUF``/``SO_SNDBUF`` ask for 4 MiB, a master for more (Linux caps it at
  ``[rw]mem_max`` unless the process may force it, and doubles it); the receive buffer
  absorbs scheduling gaps (a loop that is busy for a few milliseconds) and bursts of answers;
* an IPv6 socket is ``IPV6_V6ONLY``, so peer addresses are never IPv4-mapped and
  always compare equal to the addresses the road stores;
* OS errors of a single ``recvfrom``/``sendto`` (ICMP-reported ECONNREFUSED,
  EHOSTUNREACH, ENOBUFS ...) are counted in ``stats`` and the datagram is dropped; the
  road's retransmissions recover.  They never escape ``service``.
* the system calls themselves are ``raetsalt.drivers.batching``'s: UDP GSO/GRO and
  sendmmsg/recvmmsg where Linux has them (``batching`` turns them off one by one);
* an estate that only dials out (``accept``: a minion) takes datagrams only from the
  addresses it dialed (``Road.restrict_sources``: others are dropped and counted before
  parsing), and with one such address (``"connected"``) the socket is connected to it,
  so the kernel itself refuses every other source as it would at a closed port.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import select
import selectors
import socket
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, Literal

from raetsalt.crypto.jobs import CryptoJob
from raetsalt.drivers.batching import Datagram, DatagramIO
from raetsalt.drivers.clock import Clock, monotonic
from raetsalt.drivers.cryptopool import MIN_BATCH, CryptoPool
from raetsalt.drivers.keepwriter import KeepWriter, writer_for
from raetsalt.engine.config import RoadConfig
from raetsalt.engine.events import Event, KeepEvent, MessageReceived
from raetsalt.engine.road import Road
from raetsalt.errors import LocalError
from raetsalt.keep.policy import Action, KeyPolicy
from raetsalt.keep.records import Acceptance, AutoMode, Keep, KeepWrite, KeyRef, KeyState
from raetsalt.keep.store import FileKeep
from raetsalt.log import Throttle, clip

log = logging.getLogger(__name__)

sched_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: None)

SOCKET_BUFFER = 4 * 1024 * 1024
"""Bytes asked for SO_RCVBUF and SO_SNDBUF; the kernel may grant less (or double it)."""
_BUFFER_OPTIONS = (
    (socket.SO_RCVBUF, getattr(socket, "SO_RCVBUFFORCE", 33)),
    (socket.SO_SNDBUF, getattr(socket, "SO_SNDBUFFORCE", 32)),
) if sys.platform.startswith("linux") else (
    (socket.SO_RCVBUF, socket.SO_RCVBUF), (socket.SO_SNDBUF, socket.SO_SNDBUF))
"""(option, its variant that ignores the system's cap for a privileged process)."""
RECEIVE_BUFFER = 65536
"""Largest datagram read whole; anything bigger is truncated and then refused by the parser."""
MAX_DRAIN = 4096
"""Datagrams read per wake-up before timers and sends get their turn."""
MAX_DRAIN_BYTES = 256 * 1024
"""Bytes read per wake-up before timers, sends and events get their turn: acks and
replies go out (and messages reach the application) within a quarter megabyte of input,
not after a whole socket buffer of bulk data."""
BUSY_POLL = 50e-6
"""Seconds a wait may poll the socket without sleeping while an answer is due (above)."""
SPIN_RTT_FACTOR = 4
"""Spin only for peers whose smoothed round trip is at most this many budgets: a farther
answer would come after the spin and the spin would only cost CPU."""
CRYPTO_BATCH = 64
"""Datagrams read before their handshake crypto goes to the crypto threads (with them)."""

Address = tuple[str, int]
Accept = Literal["anyone", "dialed", "connected"]
"""Whose datagrams a stack takes (``RoadStack``)."""


class StackTimeout(TimeoutError):
    """``run_until`` ran out of time; ``events`` holds every event seen meanwhile."""

    def __init__(self, message: str, events: list[Event]) -> None:
        super().__init__(message)
        self.events = events


def parse_ha(text: str, *, default_host: str = "127.0.0.1") -> Address:
    """Parse ``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` or ``PORT`` into ``(host, port)``.

    Raises ``ValueError`` with a readable message on anything else.
    """
    text = text.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"bad address {text!r}: expected [IPV6]:PORT")
    elif ":" in text:
        host, _, port = text.rpartition(":")
        if ":" in host:
            raise ValueError(f"bad address {text!r}: write IPv6 hosts as [ADDR]:PORT")
    else:
        host, port = "", text
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"bad address {text!r}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"bad address {text!r}: port {number} out of range")
    return (host or default_host, number)


def format_ha(ha: Address) -> str:
    """Inverse of ``parse_ha`` (IPv6 hosts in brackets)."""
    host, port = ha[0], ha[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve(ha: Address, family: int = socket.AF_UNSPEC) -> tuple[int, Address]:
    """Resolve ``ha`` to ``(family, (numeric_host, port))``.

    The road compares stored addresses with datagram sources, so they must be numeric and
    spelled as the kernel reports them.  Raises ``LocalError`` if the name does not resolve
    (in ``family``, when given).
    """
    host, port = ha
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise LocalError(f"cannot resolve {format_ha(ha)}: {exc}") from exc
    for fam, _type, _proto, _canon, sockaddr in infos:
        if fam in (socket.AF_INET, socket.AF_INET6):
            return fam, (str(sockaddr[0]), int(sockaddr[1]))
    raise LocalError(f"cannot resolve {format_ha(ha)}: no IPv4/IPv6 address")


def route_source(ha: Address, family: int) -> str:
    """The local address the system sends from to reach ``ha`` (numeric, resolved), by
    connecting a throw-away UDP socket: nothing is sent.  Raises ``LocalError`` when
    there is no route."""
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(ha)
        except OSError as exc:
            raise LocalError(f"no route to {format_ha(ha)}: {exc.strerror or exc}") from exc
        return str(probe.getsockname()[0])


class RoadStack:
    """A ``Road`` bound to a UDP socket.

    ``keep`` is a keep directory (opened as ``FileKeep``) or any ``Keep``.  ``ha`` is the
    address to bind (port 0 picks a free port; see ``address``).  ``name`` is needed only
    when the keep holds no estate yet.  ``auto`` overrides ``config.auto`` when given;
    ``policy`` replaces the key policy altogether (the master's ``open_mode`` and
    autosign/autoreject files).
    ``sock`` may be an already bound UDP socket (e.g. from socket activation); the stack
    takes ownership, makes it non-blocking and does not change its options.
    ``accept``: ``"anyone"`` (a listener: a main, or a minion told to listen);
    ``"dialed"`` takes datagrams only from the addresses ``connect`` was given;
    ``"connected"`` too, and connects the socket to the last of them (one peer).

    Use as a context manager, or call ``open()`` and ``close()``.
    """

    def __init__(
        self,
        keep: str | os.PathLike[str] | Keep,
        ha: Address = ("127.0.0.1", 0),
        *,
        name: str | None = None,
        main: bool = False,
        auto: AutoMode | None = None,
        config: RoadConfig | None = None,
        clock: Clock = monotonic,
        rng: Any = None,
        sock: socket.socket | None = None,
        buffer_size: int = SOCKET_BUFFER,
        max_drain: int = MAX_DRAIN,
        batching: Mapping[str, bool] | None = None,
        policy: KeyPolicy | None = None,
        accept: Accept = "anyone",
        crypto_threads: int = 0,
        busy_poll: float = BUSY_POLL,
    ) -> None:
        self._keep_arg = keep
        self.accept: Accept = accept
        self.dialed: dict[int, Address] = {}
        """uid -> the address ``connect`` dialed (one per remote: bounded)."""
        self.bind_ha = ha
        self.name = name
        self.main = main
        config = replace(config or RoadConfig(), native_trains=True)  # DatagramIO sends them
        self.config = config if auto is None else replace(config, auto=AutoMode(auto))
        # The default clock's own builtin: one Python call fewer per clock reading, and
        # the driver reads it a few times per wake-up.
        self.clock: Clock = time.monotonic if clock is monotonic else clock
        self._rng = rng
        self._sock: socket.socket | None = sock
        self.buffer_size = buffer_size
        self.max_drain = max_drain
        self.stats: Counter[str] = Counter()
        """Driver counters: ``rx``/``tx`` datagrams, ``tx_blocked`` (EAGAIN on send),
        ``rx_error_<errno>``/``tx_error_<errno>``, ``engine_error``."""
        self.rcvbuf = 0
        self.sndbuf = 0
        self.family = socket.AF_INET
        self.address: Address = ("", 0)
        self._road: Road | None = None
        self._selector: selectors.BaseSelector | None = None
        # A bare poll object for our own waits and "anything more to read?" checks: a
        # fraction of the selector's cost, and cheaper than a receive that fails with
        # EAGAIN (a raised exception).  None where the platform has no poll.
        self._poll: Any = None
        self._registered: dict[selectors.BaseSelector, Any] = {}
        self._txq: deque[tuple[Datagram, Address]] = deque()
        self._want_write = False
        self._events: list[Event] = []
        self._rxbuf = bytearray(RECEIVE_BUFFER)
        self._batching = dict(batching or {})
        self._io: DatagramIO
        self._failures = Throttle(60.0)
        self.policy = policy
        self.busy_poll = busy_poll
        """Seconds a wait polls without sleeping while an answer is due (module docstring)."""
        self._spin_until = 0.0
        """Clock time until which the next wait may spin (0: it may not)."""
        self._spin_rtt = SPIN_RTT_FACTOR * busy_poll
        """The farthest peer (smoothed round trip) worth a spin."""
        self.crypto_threads = crypto_threads
        """Threads checking handshake signatures and agreeing box keys for a batch of
        datagrams before the road takes them (``engine/precrypt.py``); 0: the road does."""
        self._crypto: CryptoPool | None = None
        self.keep: Keep | None = None
        self.writer: KeepWriter[KeepWrite] | None = None
        self.problems: list[str] = []
        """Keep documents that could not be read when the stack opened (one line each)."""

    # -- life cycle -----------------------------------------------------------------------

    def open(self) -> RoadStack:
        """Bind the socket and load (or create) the estate; returns ``self``.

        Raises ``LocalError`` when the address cannot be bound (in use, not local) and
        ``KeepError``/``LocalError`` from the keep and road.
        """
        if self._road is not None:
            return self
        keep: Keep = (
            FileKeep(self._keep_arg)
            if isinstance(self._keep_arg, (str, os.PathLike))
            else self._keep_arg
        )
        sock = self._sock if self._sock is not None else self._bind()
        self._sock = sock
        try:
            sock.setblocking(False)
            self.family = sock.family
            self.address = (str(sock.getsockname()[0]), int(sock.getsockname()[1]))
            self.rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            self.sndbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            self._io = DatagramIO(sock, self.stats, **self._batching)
            state = keep.load_state()
            self.problems = state.problems
            road = Road(
                state=state,
                ha=self.address,
                name=self.name or "",
                main=self.main,
                config=self.config,
                policy=self.policy,
                rng=self._rng,
            )
            if self.accept != "anyone":
                road.restrict_sources(frozenset())  # nobody until it dials
            # A new estate's keys are saved before anything uses them.
            first: list[KeepWrite] = []
            while (event := road.next_event()) is not None:
                if isinstance(event, KeepEvent):
                    first.append(event.write())
                else:
                    self._events.append(event)
            keep.commit(first)
            self.keep, self.writer, self._road = keep, writer_for(keep), road
            if self.crypto_threads:
                self._crypto = CryptoPool(self.crypto_threads)
            self._selector = selectors.DefaultSelector()
            self._selector.register(sock, selectors.EVENT_READ)
            self._registered[self._selector] = None
            if hasattr(select, "poll"):
                self._poll = select.poll()
                self._poll.register(sock.fileno(), select.POLLIN)
        except BaseException:
            self._sock = None
            sock.close()
            raise
        return self

    def _bind(self) -> socket.socket:
        family, addr = resolve(self.bind_ha)
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            for option, forced in _BUFFER_OPTIONS:
                try:
                    # Past net.core.[rw]mem_max where we may (CAP_NET_ADMIN): a master
                    # that many minions answer at once needs more than the usual cap.
                    sock.setsockopt(socket.SOL_SOCKET, forced, self.buffer_size)
                except OSError:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, option, self.buffer_size)
                    except OSError:  # some kernels refuse instead of capping: the default
                        pass
            sock.bind(addr)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise LocalError(f"cannot bind {format_ha(addr)}: address already in use") from exc
            raise LocalError(f"cannot bind {format_ha(addr)}: {exc.strerror or exc}") from exc
        return sock

    def close(self) -> None:
        """Close the socket and forget selector registrations.  Idempotent.

        Datagrams still queued for sending are dropped; changes for the keep are written
        first (``KeepWriter.close``).
        """
        for selector in list(self._registered):
            if selector is not self._selector:
                self.unregister(selector)
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        self._poll = None
        self._registered.clear()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._road is not None:
            self._collect(self._road)
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self._crypto is not None:
            self._crypto.close()
            self._crypto = None
        self._road = None

    def __enter__(self) -> RoadStack:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def road(self) -> Road:
        """The engine (raises ``LocalError`` before ``open``)."""
        if self._road is None:
            raise LocalError("the stack is not open")
        return self._road

    @property
    def sock(self) -> socket.socket:
        if self._sock is None or self._road is None:
            raise LocalError("the stack is not open")
        return self._sock

    def fileno(self) -> int:
        return self.sock.fileno()

    # -- commands (each sends what it produced at once) ------------------------------------

    def connect(self, ha: Address, *, name: str | None = None, like: int | None = None
                ) -> int:
        """Keep a session with the estate at ``ha`` (join, allow, re-establish); returns
        its uid.  A host name is resolved once, here, in the socket's family.  ``name``
        and ``like``: see ``Road.connect``."""
        _family, addr = resolve(ha, self.family)
        road = self.road
        if self.accept == "connected":
            try:
                self.sock.connect(addr)  # replaces the previous peer, if any
            except OSError as exc:
                raise LocalError(f"cannot reach {format_ha(addr)}: {exc.strerror or exc}"
                                 ) from exc
        uid = road.connect(addr, self.clock(), name=name, like=like)
        if self.accept != "anyone":
            if self.accept == "connected":
                self.dialed.clear()
            self.dialed[uid] = addr
            road.restrict_sources(frozenset(self.dialed.values()))
        self.flush()
        return uid

    def release(self, uid: int) -> None:
        """Stop keeping the session with ``uid`` (see ``Road.release``)."""
        self.road.release(uid, self.clock())
        self.flush()

    def join(self, uid: int) -> None:
        self.road.join(uid, self.clock())
        self.flush()

    def allow(self, uid: int) -> None:
        self.road.allow(uid, self.clock())
        self.flush()

    def alive(self, uid: int) -> None:
        self.road.alive(uid, self.clock())
        self.flush()

    def send(self, to: str | int, body: Mapping[str, Any]) -> int:
        """Queue a message (see ``Road.send_message``); returns its mid.  The outcome comes
        as ``MessageDelivered`` or ``TransactionFailed(kind="message")``.

        The message goes out at the next ``service``/``service_ready`` (``timeout()`` is 0
        until then), so messages queued between two wake-ups share datagrams; events are
        collected there too, once per pass.
        """
        return self.road.send_message(to, body, self.clock())

    def send_many(self, to: str | int, bodies: list[Mapping[str, Any]]) -> range:
        """Queue many messages at once (see ``Road.send_messages``); returns their mids."""
        return self.road.send_messages(to, bodies, self.clock())

    def change_key(self, action: str, ref: KeyRef) -> int | None:
        """An operator's decision on a key (``Road.change_key``), effective at once.
        Returns the keep writer's sequence number that makes it durable
        (``writer.committed >= it``), or None when ``ref`` is not stored as given."""
        road = self.road
        if not road.change_key(action, ref, self.clock()):
            return None
        self.flush()
        assert self.writer is not None
        return self.writer.submitted

    def keep_decisions(self) -> int:
        """Apply the acceptance recorded in the keep's role files to the running road
        (for a stack without a command channel, e.g. ``raetsalt-road listen`` on SIGHUP):
        a role accepted, rejected or deleted there since the road read it.  Returns how
        many changed."""
        assert self.keep is not None
        stored = {record.role: record for record in self.keep.load_state().roles}
        verdicts = {Acceptance.ACCEPTED: Action.ACCEPT, Acceptance.REJECTED: Action.REJECT}
        changed = 0
        for role, mine in list(self.road.keys.roles.items()):
            theirs = stored.get(role)
            if theirs is None:
                action: str | None = Action.DELETE
            elif (theirs.verhex, theirs.pubhex) != (mine.verhex, mine.pubhex):
                action = None  # not an operator's decision on the key we hold
            elif theirs.acceptance is mine.acceptance:
                action = None
            else:
                action = verdicts.get(theirs.acceptance)
            if action is not None:
                ref = KeyRef(role, KeyState.of(mine.acceptance), mine.verhex, mine.pubhex)
                changed += self.change_key(action, ref) is not None
        return changed

    def flush(self) -> None:
        """Send what the road queued now, without reading (connection commands, whose
        latency matters, and the daemon's outbound step); the events it raises come with
        the next ``service_ready``."""
        road = self.road
        self._flush(self.clock(), road)
        self._collect(road)

    # -- servicing ------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """Clock time by which ``service_ready`` must run again even if nothing arrives
        (``None``: only when the socket is ready)."""
        if self._events:
            return self.clock()
        return self.road.get_timer()

    def timeout(self, now: float | None = None) -> float | None:
        """Seconds until ``get_timer`` (never negative), for a selector's ``select``;
        0 while queued output waits for ``service_ready`` to send it."""
        road = self.road
        if self._events or road.has_output():
            return 0.0
        deadline = road.get_timer()
        if deadline is None:
            return None
        wait = deadline - (self.clock() if now is None else now)
        return wait if wait > 0.0 else 0.0

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        """Watch this stack's socket in ``selector`` (with ``data``).  The stack adds and
        removes write interest by itself while sends are blocked; call ``service_ready``
        whenever the selector reports it, whichever event."""
        selector.register(self.sock, self._interest(), data)
        self._registered[selector] = data

    def unregister(self, selector: selectors.BaseSelector) -> None:
        """Stop watching this stack's socket in ``selector`` (no error if it was not)."""
        self._registered.pop(selector, None)
        if self._sock is not None:
            try:
                selector.unregister(self._sock)
            except (KeyError, ValueError):
                pass

    def service(self, timeout: float | None = 0.0) -> list[Event]:
        """One wake-up: wait until the socket is ready, a timer is due or ``timeout``
        seconds passed (``None``: no limit but the road's timers), then read, run timers,
        send, and return the events.  An empty list means nothing happened."""
        selector = self._selector
        if selector is None:
            raise LocalError("the stack is not open")
        road = self.road
        if not self._events and road.has_output():
            # What the application queued leaves first; then this wake-up waits like any
            # other instead of reading a socket nothing may have reached yet (in
            # request/response traffic: one system call fewer per round trip).
            self._flush(self.clock(), road)
            self._collect(road)
        deadline = None if timeout is None else self.clock() + max(0.0, timeout)
        wait = self._wait(deadline)
        if wait is None or wait > 0.0:
            # timeout() is 0 while the road has output, so nothing waits to be sent here
            # but datagrams the socket refused (write interest wakes us for those).
            poll = self._poll
            if self._spin_until and poll is not None:
                if self.spin(wait):
                    return self._service(read=True, readable=True)
                wait = self._wait(deadline)  # what is left of it after the spin
                if wait is not None and wait <= 0.0:
                    return self._service(read=True)
            if poll is not None:
                ready = poll.poll(None if wait is None else math.ceil(wait * 1000.0))
            else:
                ready = selector.select(wait)
            if not ready:
                return self._service(read=False)  # a timer or the caller's time-out
            return self._service(read=True, readable=True)
        return self._service(read=True)

    def _wait(self, deadline: float | None) -> float | None:
        """Seconds to wait: until the road's next timer, and at most until ``deadline``
        (clock time; None: no limit)."""
        wait = self.timeout()
        if deadline is not None:
            left = deadline - self.clock()
            left = left if left > 0.0 else 0.0
            wait = left if wait is None or left < wait else wait
        return wait

    def service_ready(self) -> list[Event]:
        """Do whatever is possible without blocking and return the events."""
        return self._service(read=True)

    def spin(self, limit: float | None = None) -> bool:
        """Before a wait: when an answer is due from a nearby peer (module docstring),
        poll the socket without sleeping until it is readable, the ``busy_poll`` budget
        since the send is spent, a timer is due or ``limit`` seconds passed.  True when
        it became readable (then call ``service_ready``).  A loop with a selector of its
        own calls this before that selector's wait; ``service`` does it by itself."""
        until = self._spin_until
        if not until:
            return False
        self._spin_until = 0.0
        poll = self._poll
        road = self._road
        if poll is None or road is None:
            return False
        timer = road.get_timer()
        if timer is not None and timer < until:
            until = timer
        clock = self.clock
        now = clock()
        if limit is not None and now + limit < until:
            until = now + limit
        if now >= until:
            return False
        while True:
            if poll.poll(0):
                self.stats["spin_hits"] += 1
                return True
            if clock() >= until:
                self.stats["spin_misses"] += 1
                return False
            # The peer may be waiting for this very CPU (both processes on one): let it
            # run.  With nothing else runnable here this returns at once.
            sched_yield()

    def _service(self, *, read: bool, readable: bool = False) -> list[Event]:
        road = self._road
        if road is None:
            raise LocalError("the stack is not open")
        now = self.clock()
        if road.has_output():
            # Replies the application queued since the last pass leave before we read:
            # in request/response traffic this is the whole latency path.
            self._flush(now, road)
        if read:
            self._read(now, road, readable)
        deadline = road.get_timer()
        if deadline is not None and deadline <= now:
            # A timer handler may arm another timer that is already due (a retry "now"):
            # run a few rounds, the rest waits for the next wake-up (zero timeout).
            for _ in range(4):
                road.handle_timer(now)
                deadline = road.get_timer()
                if deadline is None or deadline > now:
                    break
        if self._txq or road.has_output():
            self._flush(now, road)
        self._collect(road)
        events = self._events
        if not events:
            return []
        self._events = []
        return events

    def run_until(self, predicate: Callable[[list[Event]], bool], timeout: float) -> list[Event]:
        """Service until ``predicate(events so far)`` is true; return those events.

        The predicate is also checked before the first wake-up (with an empty list), so a
        condition on ``road`` state may already hold.  Raises ``StackTimeout`` (carrying
        the events) after ``timeout`` seconds.
        """
        events: list[Event] = []
        deadline = self.clock() + timeout
        if predicate(events):
            return events
        while True:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise StackTimeout(f"condition not met within {timeout} s", events)
            events.extend(self.service(remaining))
            if predicate(events):
                return events

    def messages(
        self,
        timeout: float | None = None,
        *,
        on_event: Callable[[Event], None] | None = None,
    ) -> Iterator[MessageReceived]:
        """Yield received messages as they arrive, for ``timeout`` seconds (``None``:
        forever).  Every other event goes to ``on_event`` if given."""
        deadline = None if timeout is None else self.clock() + timeout
        while True:
            remaining = None if deadline is None else deadline - self.clock()
            if remaining is not None and remaining <= 0:
                return
            for event in self.service(remaining):
                if isinstance(event, MessageReceived):
                    yield event
                elif on_event is not None:
                    on_event(event)

    @property
    def dropped(self) -> int:
        """Datagrams the road dropped (all ``drop_*`` counters of ``road.stats``)."""
        return sum(v for k, v in self.road.stats.items() if k.startswith("drop_"))

    # -- internals ------------------------------------------------------------------------

    def _collect(self, road: Road) -> None:
        next_event = road.next_event
        append = self._events.append
        writes = []
        event = next_event()
        while event is not None:
            if isinstance(event, KeepEvent):
                writes.append(event.write())
            else:
                append(event)
            event = next_event()
        if writes and self.writer is not None:
            self.writer.submit(writes)

    def _read(self, now: float, road: Road, readable: bool) -> None:
        """Drain the socket; ``readable``: a wait just reported it ready."""
        poll = self._poll
        io = self._io
        if poll is not None and not readable and not io.many and not poll.poll(0):
            return
        receive, receive_train = road.receive_datagram, road.receive_train

        def failed(exc: Exception, source: Address) -> None:
            # A bug, not bad input (the road drops bad input itself): say so, but once
            # per interval, and the traceback only at debug level.
            self.stats["engine_error"] += 1
            times = self._failures.note("engine", now)
            if times:
                log.error("road failed on %d datagram(s), the last from %s: %s: %s",
                          times, format_ha(source), type(exc).__name__, clip(exc))
                log.debug("the failure", exc_info=True)

        def handle(data: bytes, source: Address) -> None:
            try:
                receive(data, source, now)
            except Exception as exc:  # noqa: BLE001 - one datagram must never stop the stack
                failed(exc, source)

        def train(data: memoryview, segment: int, source: Address) -> bool:
            try:
                return receive_train(data, segment, source, now)
            except Exception as exc:  # noqa: BLE001 - one train must never stop the stack
                failed(exc, source)
                return True

        if self._crypto is not None:
            self._drain_batched(road, handle, train)
            return
        budget = MAX_DRAIN_BYTES
        # A backlog left after a full drain makes the road answer new handshakes "busy"
        # until a drain empties the socket (raetsalt.engine.busy).
        admission = road.admission
        if io.many:
            # recvmmsg: a read that got fewer than it asked for found the socket empty,
            # and an empty read raises nothing, so no poll between reads.
            for _ in range(self.max_drain):
                budget -= io.receive(self._rxbuf, handle, budget, train)
                if io.drained:
                    admission.loaded = False
                    return
                if budget <= 0:
                    break
            admission.loaded = True
            return
        for _ in range(self.max_drain):
            got = io.receive(self._rxbuf, handle, budget, train)
            budget -= got
            if poll is not None and not poll.poll(0):
                admission.loaded = False
                return  # drained (poll is level-triggered), no EAGAIN needed
            if budget <= 0:
                admission.loaded = True
                return
            if not got and poll is None:
                admission.loaded = False
                return
        admission.loaded = True

    def _drain_batched(self, road: Road, handle: Callable[[bytes, Address], None],
                       train: Callable[[memoryview, int, Address], bool]) -> None:
        """``_read``'s drain with crypto threads: datagrams are taken in batches of up to
        ``CRYPTO_BATCH`` (a GRO socket reads one per system call), each batch's handshake
        crypto done first (``_receive_batch``); a native train still goes to the road at
        once, after the datagrams read before it."""
        poll = self._poll
        batch: list[tuple[bytes, Address]] = []

        def collect(data: bytes, source: Address) -> None:
            batch.append((data, source))

        def in_order(data: memoryview, segment: int, source: Address) -> bool:
            if batch:
                self._receive_batch(batch, road, handle)
            return train(data, segment, source)

        budget = MAX_DRAIN_BYTES
        admission = road.admission
        loaded = True
        try:
            for _ in range(self.max_drain):
                got = self._io.receive(self._rxbuf, collect, budget, in_order)
                budget -= got
                if len(batch) >= CRYPTO_BATCH:
                    self._receive_batch(batch, road, handle)
                if (poll is not None and not poll.poll(0)) or (not got and poll is None):
                    loaded = False
                    return
                if budget <= 0:
                    return
        finally:
            if batch:
                self._receive_batch(batch, road, handle)
            admission.loaded = loaded

    def _receive_batch(self, batch: list[tuple[bytes, Address]], road: Road,
                       handle: Callable[[bytes, Address], None]) -> None:
        """The datagrams of ``batch`` to the road in order (the list is emptied), their
        handshake crypto done first on the crypto threads and this one together."""
        assert self._crypto is not None
        jobs: list[CryptoJob] = []
        try:
            for data, source in batch:
                jobs.extend(road.crypto_jobs(data, source))
        except Exception as exc:  # noqa: BLE001 - a bug: the road does the crypto itself
            self.stats["engine_error"] += 1
            log.debug("crypto jobs: %s", exc, exc_info=True)
            jobs = []
        if len(jobs) >= MIN_BATCH:
            road.take_crypto(jobs, self._crypto.perform(jobs))
            self.stats["crypto_batches"] += 1
        else:
            jobs = []
        for data, source in batch:
            handle(data, source)
        batch.clear()
        if jobs:
            road.take_crypto([], [])

    def _flush(self, now: float, road: Road) -> None:
        txq = self._txq
        out = road.datagrams_to_send(now)
        within = road.answer_within
        if not txq:
            # Nothing held back: send straight from the road's list.
            if out:
                self._send_list(out)
        else:
            txq.extend(out)
            pending = list(txq)
            txq.clear()
            self._send_list(pending)
            if not self._txq:
                self._set_want_write(False)
        if within is not None and within <= self._spin_rtt:
            # An answer is due soon: the next wait may spin, counted from the sends' end.
            self._spin_until = self.clock() + self.busy_poll

    def _send_list(self, out: list[tuple[Datagram, Address]]) -> None:
        """Send ``out`` (``DatagramIO``: GSO, sendmmsg or one by one); what the full
        socket refused waits in ``_txq`` for writability, in order."""
        index = self._io.send(out)
        if index < len(out):
            self._txq.extend(out[index:])
            self._set_want_write(True)

    def _interest(self) -> int:
        return selectors.EVENT_READ | (selectors.EVENT_WRITE if self._want_write else 0)

    def _set_want_write(self, want: bool) -> None:
        if want == self._want_write:
            return
        self._want_write = want
        for selector, data in self._registered.items():
            selector.modify(self.sock, self._interest(), data)
        if self._poll is not None:
            self._poll.modify(self.sock.fileno(), select.POLLIN | (select.POLLOUT if want else 0))

    @property
    def queued(self) -> int:
        """Datagrams waiting for the socket to become writable."""
        return len(self._txq)
