"""One side of a road benchmark case, run as its own process by ``bench_road.py``.

    python bench/road_worker.py ROLE KIND OPTIONS_JSON

KIND is ``raetsalt`` (our ``RoadStack``; ``OPTIONS["config"]`` is passed to ``RoadConfig``,
which is how a profile variant is selected), ``raet`` (raet 0.6.8 through
``tests/raet_shim.py``) or ``zmq`` (pyzmq with CURVE; ``OPTIONS["codec"]`` is ``msgpack``,
``json`` or ``raw``: raw sends the bodies' bytes, encoded before the clock starts, and
the receiver compares bytes instead of decoding).  ROLE is one of

* ``recv`` / ``send``: one-way messages.  ``recv`` is the server; ``send`` connects to
  ``OPTIONS["peer"]``, waits for the session, then sends ``count`` bodies keeping at most
  ``window`` undelivered (raetsalt: ``OPTIONS["batch"]`` queues them with
  ``send_many``, up to ``BATCH`` at a time, else one ``send`` each);
* ``echo`` / ``ping``: sequential 100 B request/response;
* ``hol-echo`` / ``hol-ping`` (raetsalt): ``ping`` while ``OPTIONS["bulk"]`` 1 MiB
  messages stay outstanding on the same road; the echo answers pings only;
* ``main`` / ``fleet``: ``fleet`` creates ``n`` estates (clients) in this one process,
  then connects them all to ``main``, which reports when all ``n`` are allowed.

Every process writes JSON lines to stdout: ``{"event": "ready", ...}`` once it listens
(servers), ``{"event": "result", ...}`` once its part is done.  Servers keep serving
(acks, retransmissions, presence) until stdin reaches EOF, then write
``{"event": "final", ...}`` with their peak RSS and exit; so does ``send`` for ZeroMQ,
whose sender cannot see delivery.  CPU figures are ``getrusage(RUSAGE_SELF)`` deltas
over the measured phase only (set-up and key generation excluded).

Bodies are ``{"i": "<8-digit sequence>", "d": <filler>}`` whose compact JSON encoding is
exactly ``size`` bytes; the filler is a non-repeating slice chosen by the sequence
number, so the receiver checks every message by number *and* content.
"""

from __future__ import annotations

import json
import os
import random
import resource
import selectors
import string
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TESTS = os.path.join(ROOT, "tests")

_ALPHABET = (string.ascii_letters + string.digits + "-_").encode("ascii")
_TABLE = bytes(_ALPHABET[i % 64] for i in range(256))
_EMPTY_BODY = len(json.dumps({"i": "00000000", "d": ""}, separators=(",", ":")))
BATCH = 256
"""Messages per ``send_many`` call of a batching sender."""


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def maxrss_kib() -> int:
    """Peak RSS of this process image in KiB.

    ``VmHWM``, not ``getrusage().ru_maxrss``: Linux carries ru_maxrss over an exec from
    the forking parent, so every worker would report at least the orchestrator's RSS.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Payload:
    """The bodies of one run and their check."""

    def __init__(self, size: int) -> None:
        if size < _EMPTY_BODY:
            raise ValueError(f"size must be at least {_EMPTY_BODY}")
        self.size = size
        self.dlen = size - _EMPTY_BODY
        self.fill = random.Random(size).randbytes(self.dlen + 64).translate(_TABLE).decode("ascii")

    def body(self, seq: int) -> dict[str, str]:
        start = seq % 64
        return {"i": f"{seq:08d}", "d": self.fill[start : start + self.dlen]}

    def check(self, body: Any) -> int:
        """The sequence number of a correct body, or -1."""
        try:
            seq = int(body["i"])
            start = seq % 64
            if len(body) == 2 and body["d"] == self.fill[start : start + self.dlen]:
                return seq
        except (KeyError, TypeError, ValueError):
            pass
        return -1


class Tally:
    """Receiver-side verification: count, content, duplicates, order."""

    def __init__(self, payload: Payload, count: int) -> None:
        self.payload = payload
        self.count = count
        self.seen = bytearray(count)
        self.good = 0
        self.bad = 0
        self.dup = 0
        self.out_of_order = 0
        self.next = 0
        self.t_first: float | None = None
        self.t_last = 0.0

    def add(self, body: Any) -> None:
        now = time.monotonic()
        if self.t_first is None:
            self.t_first = now
        self.t_last = now
        seq = self.payload.check(body)
        if not 0 <= seq < self.count:
            self.bad += 1
            return
        if self.seen[seq]:
            self.dup += 1
            return
        self.seen[seq] = 1
        self.good += 1
        if seq != self.next:
            self.out_of_order += 1
        self.next = seq + 1

    @property
    def complete(self) -> bool:
        return self.good >= self.count

    def result(self) -> dict[str, Any]:
        return {
            "received": self.good,
            "bad": self.bad,
            "dup": self.dup,
            "out_of_order": self.out_of_order,
            "verified": self.good == self.count and not self.bad and not self.dup,
            "t_first": self.t_first,
            "t_last": self.t_last,
        }


class StdinWatch:
    """EOF on stdin is the orchestrator's "stop" signal."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno()
        self.eof = False

    def read(self) -> None:
        if not os.read(self.fd, 4096):
            self.eof = True


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def rtt_result(rtts: list[float], bad: int, count: int, c0: float) -> dict[str, Any]:
    return {
        "count": len(rtts),
        "bad": bad,
        "verified": len(rtts) == count and not bad,
        "p50_us": percentile(rtts, 0.50) * 1e6 if rtts else None,
        "p99_us": percentile(rtts, 0.99) * 1e6 if rtts else None,
        "cpu": cpu() - c0,
    }


# ---------------------------------------------------------------------------- raetsalt


def rs_stack(opts: dict[str, Any], *, main: bool, name: str) -> Any:
    from raetsalt.drivers.udp import RoadStack
    from raetsalt.engine.road import RoadConfig
    from raetsalt.keep.records import AutoMode
    from raetsalt.keep.store import FileKeep

    keepdir = tempfile.mkdtemp(prefix=f"{name}-", dir=opts["tmp"])
    config = RoadConfig(auto=AutoMode.ALWAYS, **opts.get("config", {}))
    # durable=False: no fsync per keep write (the bench measures the protocol, not the disk).
    spin = {"busy_poll": opts["busy_poll"]} if "busy_poll" in opts else {}
    return RoadStack(
        FileKeep(keepdir, durable=False), ("127.0.0.1", 0), name=name, main=main,
        config=config, **spin,
    ).open()


def rs_serve(stack: Any, on_event: Callable[[Any], None], deadline: float) -> str:
    """Service ``stack`` until stdin EOF (or the deadline); every event to ``on_event``."""
    stdin = StdinWatch()
    sel = selectors.DefaultSelector()
    stack.register(sel, "road")
    sel.register(stdin.fd, selectors.EVENT_READ, "stdin")
    while not stdin.eof:
        now = time.monotonic()
        if now >= deadline:
            return "timeout"
        wait = stack.timeout(now)
        wait = deadline - now if wait is None else min(wait, deadline - now)
        # The stack's busy poll first (what ``RoadStack.service`` does in its own waits).
        if wait <= 0.0 or not stack.spin(wait):
            for key, _ in sel.select(wait):
                if key.data == "stdin":
                    stdin.read()
        for event in stack.service_ready():
            on_event(event)
    return "eof"


def rs_connect(opts: dict[str, Any], name: str) -> tuple[Any, int]:
    from raetsalt.engine.events import Allowed

    stack = rs_stack(opts, main=False, name=name)
    uid = stack.connect(tuple(opts["peer"]))
    stack.run_until(lambda evs: any(isinstance(e, Allowed) for e in evs), opts["timeout"])
    return stack, uid


def rs_recv(opts: dict[str, Any]) -> None:
    from raetsalt.engine.events import Allowed, MessageReceived

    stack = rs_stack(opts, main=True, name="main")
    tally = Tally(Payload(opts["size"]), opts["count"])
    state: dict[str, Any] = {"c0": cpu(), "reported": False}

    def on_event(event: Any) -> None:
        if isinstance(event, Allowed):
            state["c0"] = cpu()  # measure from the established session on
        elif isinstance(event, MessageReceived):
            tally.add(event.body)
            if tally.complete and not state["reported"]:
                state["reported"] = True
                emit("result", cpu=cpu() - state["c0"], **tally.result())

    emit("ready", ha=list(stack.address))
    how = rs_serve(stack, on_event, time.monotonic() + opts["timeout"])
    if not state["reported"]:
        emit("result", cpu=cpu() - state["c0"], error=f"stopped by {how}", **tally.result())
    emit("final", maxrss_kib=maxrss_kib(), stats=dict(stack.stats), road=dict(stack.road.stats))
    stack.close()


def rs_send(opts: dict[str, Any]) -> None:
    from raetsalt.engine.events import MessageDelivered, TransactionFailed

    stack, uid = rs_connect(opts, "sender")
    payload, count, window = Payload(opts["size"]), opts["count"], opts["window"]
    bodies = [payload.body(i) for i in range(count)]
    batch = BATCH if opts.get("batch") else 0
    c0, t0 = cpu(), time.monotonic()
    deadline = t0 + opts["timeout"]
    sent = delivered = failed = 0
    while delivered + failed < count and time.monotonic() < deadline:
        room = min(count - sent, window - (sent - delivered - failed))
        if batch:
            while room > 0:
                take = min(room, batch)
                stack.send_many(uid, bodies[sent : sent + take])
                sent += take
                room -= take
        else:
            for body in bodies[sent : sent + max(room, 0)]:
                stack.send(uid, body)
                sent += 1
        for event in stack.service(deadline - time.monotonic()):
            if isinstance(event, MessageDelivered):
                delivered += event.count
            elif isinstance(event, TransactionFailed) and event.kind == "message":
                failed += 1
    emit(
        "result",
        t0=t0,
        t_end=time.monotonic(),
        delivered=delivered,
        failed=failed,
        cpu=cpu() - c0,
        stats=dict(stack.stats),
        road=dict(stack.road.stats),
    )
    stack.close()


def rs_echo(opts: dict[str, Any]) -> None:
    from raetsalt.engine.events import MessageReceived

    stack = rs_stack(opts, main=True, name="main")
    first: list[float] = []  # CPU time at the first request

    def on_event(event: Any) -> None:
        if isinstance(event, MessageReceived):
            if not first:
                first.append(cpu())
            stack.send(event.remote, event.body)

    emit("ready", ha=list(stack.address))
    rs_serve(stack, on_event, time.monotonic() + opts["timeout"])
    emit("final", maxrss_kib=maxrss_kib(), cpu=cpu() - first[0] if first else None)
    stack.close()


def rs_ping(opts: dict[str, Any]) -> None:
    from raetsalt.engine.events import MessageReceived

    stack, uid = rs_connect(opts, "pinger")
    payload, count = Payload(opts["size"]), opts["count"]
    rtts: list[float] = []
    bad = 0
    c0 = cpu()
    deadline = time.monotonic() + opts["timeout"]
    for i in range(count):
        body = payload.body(i)
        t = time.perf_counter()
        stack.send(uid, body)
        reply = None
        while reply is None and time.monotonic() < deadline:
            for event in stack.service(deadline - time.monotonic()):
                if isinstance(event, MessageReceived):
                    reply = event.body
        if reply is None:
            break
        rtts.append(time.perf_counter() - t)
        bad += payload.check(reply) != i
    emit("result", **rtt_result(rtts, bad, count, c0))
    stack.close()


def rs_hol_echo(opts: dict[str, Any]) -> None:
    """Answer pings; count the bulk messages (they are not echoed)."""
    from raetsalt.engine.events import MessageReceived

    stack = rs_stack(opts, main=True, name="main")
    bulk = [0]

    def on_event(event: Any) -> None:
        if isinstance(event, MessageReceived):
            if "ping" in event.body:
                stack.send(event.remote, event.body)
            else:
                bulk[0] += 1

    emit("ready", ha=list(stack.address))
    rs_serve(stack, on_event, time.monotonic() + opts["timeout"])
    emit("final", maxrss_kib=maxrss_kib(), bulk=bulk[0])
    stack.close()


def rs_hol_ping(opts: dict[str, Any]) -> None:
    """Sequential 100 B pings, first on an idle road, then while ``bulk`` 1 MiB messages
    are kept outstanding on the same road (a new one as soon as one is delivered)."""
    from raetsalt.engine.events import MessageDelivered, MessageReceived, TransactionFailed

    stack, uid = rs_connect(opts, "pinger")
    payload, count, outstanding_max = Payload(opts["size"]), opts["count"], opts["bulk"]
    filler = Payload(1024 * 1024)
    deadline = time.monotonic() + opts["timeout"]
    state = {"outstanding": 0, "bulk_done": 0, "bulk_sent": 0}

    def phase(loaded: bool) -> list[float]:
        rtts = []
        for i in range(count):
            if loaded:
                while state["outstanding"] < outstanding_max:
                    stack.send(uid, filler.body(state["bulk_sent"]))
                    state["bulk_sent"] += 1
                    state["outstanding"] += 1
            body = {"ping": i, **payload.body(i)}
            t = time.perf_counter()
            pings.add(stack.send(uid, body))
            reply = None
            while reply is None and time.monotonic() < deadline:
                for event in stack.service(deadline - time.monotonic()):
                    if isinstance(event, MessageReceived) and event.body.get("ping") == i:
                        reply = event.body
                    elif isinstance(event, MessageDelivered) and event.mid not in pings:
                        state["outstanding"] -= event.count
                        state["bulk_done"] += event.count
                    elif isinstance(event, TransactionFailed):
                        state["outstanding"] -= 1
            if reply is None:
                break
            rtts.append(time.perf_counter() - t)
        return rtts

    pings: set[int] = set()
    idle = phase(False)
    done0, t0 = state["bulk_done"], time.monotonic()
    loaded = phase(True)
    elapsed = time.monotonic() - t0
    emit(
        "result",
        verified=len(idle) == count and len(loaded) == count,
        idle_p50_us=percentile(idle, 0.5) * 1e6 if idle else None,
        p50_us=percentile(loaded, 0.5) * 1e6 if loaded else None,
        p99_us=percentile(loaded, 0.99) * 1e6 if loaded else None,
        bulk_mb_per_s=(state["bulk_done"] - done0) * 1.048576 / elapsed if elapsed else None,
    )
    stack.close()


def rs_main(opts: dict[str, Any]) -> None:
    from raetsalt.engine.events import Allowed

    raise_fd_limit()
    stack = rs_stack(opts, main=True, name="main")
    n = opts["n"]
    allowed: set[str] = set()
    state: dict[str, Any] = {"c0": cpu(), "reported": False}

    def on_event(event: Any) -> None:
        if isinstance(event, Allowed):
            allowed.add(event.remote)
            if len(allowed) >= n and not state["reported"]:
                state["reported"] = True
                emit(
                    "result", t_all=time.monotonic(), allowed=len(allowed), cpu=cpu() - state["c0"]
                )

    emit("ready", ha=list(stack.address), maxrss_kib=maxrss_kib())
    how = rs_serve(stack, on_event, time.monotonic() + opts["timeout"])
    if not state["reported"]:
        emit("result", allowed=len(allowed), error=f"stopped by {how}")
    emit(
        "final",
        maxrss_kib=maxrss_kib(),
        remotes=len(stack.road.remotes),
        road=dict(stack.road.stats),
    )
    stack.close()


def rs_fleet(opts: dict[str, Any]) -> None:
    from raetsalt.engine.events import Allowed

    raise_fd_limit()
    n, peer = opts["n"], tuple(opts["peer"])
    stacks = [rs_stack(opts, main=False, name=f"minion{i}") for i in range(n)]
    sel = selectors.DefaultSelector()
    for index, stack in enumerate(stacks):
        stack.register(sel, index)
    stdin = StdinWatch()
    sel.register(stdin.fd, selectors.EVENT_READ, -1)
    emit("created", n=n)
    c0, t0 = cpu(), time.monotonic()
    inf = float("inf")
    deadlines = [inf] * n
    pending = set(range(n))

    def service(index: int) -> None:
        stack = stacks[index]
        for event in stack.service_ready():
            if isinstance(event, Allowed):
                pending.discard(index)
        deadlines[index] = stack.get_timer() or inf

    for index, stack in enumerate(stacks):
        stack.connect(peer)
        deadlines[index] = stack.get_timer() or inf
    deadline = t0 + opts["timeout"]
    reported = False
    while not stdin.eof and time.monotonic() < deadline:
        now = time.monotonic()
        wait = max(0.0, min(min(deadlines), deadline) - now)
        ready = {key.data for key, _ in sel.select(wait)}
        if -1 in ready:
            stdin.read()
            ready.discard(-1)
        now = time.monotonic()
        ready.update(i for i, d in enumerate(deadlines) if d <= now)
        for index in ready:
            service(index)
        if not pending and not reported:
            reported = True
            emit("result", t0=t0, t_all=time.monotonic(), allowed=n, cpu=cpu() - c0)
    if not reported:
        emit("result", t0=t0, allowed=n - len(pending), error="timeout or eof")
    for stack in stacks:
        stack.close()


# ---------------------------------------------------------------------------- raet 0.6.8


class RaetEnv:
    """raet 0.6.8 imported through the test shim, with one ioflo Store (the clock)."""

    def __init__(self) -> None:
        sys.path.insert(0, TESTS)
        import raet_shim

        self.raet = raet_shim.load()
        raet_shim.mute_console(0)
        from ioflo.base.storing import Store
        from raet.road import estating, stacking, transacting

        self.estating, self.stacking, self.transacting = estating, stacking, transacting
        self.store = Store(stamp=time.monotonic())

    def stack(self, opts: dict[str, Any], *, main: bool, name: str) -> Any:
        keepdir = tempfile.mkdtemp(prefix=f"{name}-", dir=opts["tmp"])
        return self.stacking.RoadStack(
            store=self.store, name=name, main=main, auto=2, ha=("127.0.0.1", 0), dirpath=keepdir
        )

    def tick(self) -> None:
        self.store.changeStamp(time.monotonic())

    def service(self, stack: Any) -> None:
        # raet lets exceptions out of its receive path; the send half must still run.
        self.tick()
        try:
            stack.serviceAllRx()
        except Exception as exc:  # noqa: BLE001
            print(f"raet rx error: {exc!r}", file=sys.stderr)
        try:
            stack.serviceAllTx()
        except Exception as exc:  # noqa: BLE001
            print(f"raet tx error: {exc!r}", file=sys.stderr)

    @staticmethod
    def busy(stack: Any) -> bool:
        return bool(stack.txes or stack.txMsgs or stack.rxes or stack.transactions)

    def wait(self, stack: Any, stdin: StdinWatch | None, idle: float = 0.002) -> None:
        """Block until the socket (or stdin) is readable, briefly when transactions run
        (their redo timers read the store's clock)."""
        readers = [stack.server.ss] + ([stdin.fd] if stdin is not None and not stdin.eof else [])
        timeout = 0.0 if (stack.txes or stack.txMsgs or stack.rxes) else idle
        ready, _, _ = sel_select(readers, timeout)
        if stdin is not None and stdin.fd in ready:
            stdin.read()

    def serve(self, stack: Any, on_pass: Callable[[], None], deadline: float) -> str:
        stdin = StdinWatch()
        while not stdin.eof:
            if time.monotonic() >= deadline:
                return "timeout"
            self.service(stack)
            on_pass()
            self.wait(stack, stdin)
        return "eof"

    def connect(self, opts: dict[str, Any], name: str) -> tuple[Any, Any]:
        stack = self.stack(opts, main=False, name=name)
        remote = self.estating.RemoteEstate(stack=stack, fuid=0, sid=0, ha=tuple(opts["peer"]))
        stack.addRemote(remote)
        stack.join(uid=remote.uid, cascade=True, timeout=0)
        deadline = time.monotonic() + opts["timeout"]
        while not remote.allowed:
            if time.monotonic() > deadline:
                raise TimeoutError("raet join/allow timed out")
            self.service(stack)
            self.nudge(stack, remote)
            self.wait(stack, None)
        # let the allow's last packets and the cascade's alive settle
        while self.busy(stack) and time.monotonic() < deadline:
            self.service(stack)
            self.wait(stack, None)
        return stack, remote

    def current_remote(self, stack: Any, peer: tuple[str, int]) -> Any:
        for remote in stack.remotes.values():
            return remote
        remote = self.estating.RemoteEstate(stack=stack, fuid=0, sid=0, ha=peer)
        stack.addRemote(remote)
        return remote

    @staticmethod
    def nudge(stack: Any, remote: Any) -> None:
        """Restart a join/allow that ended without success (raet gives up after its timeouts)."""
        if remote.transactions:
            return
        if not remote.joined:
            stack.join(uid=remote.uid, cascade=True, timeout=0)
        elif not remote.allowed:
            stack.allow(uid=remote.uid, cascade=True)


def sel_select(readers: list[Any], timeout: float) -> tuple[list[Any], list[Any], list[Any]]:
    import select

    try:
        return select.select(readers, [], [], timeout)
    except InterruptedError:
        return [], [], []


def raet_recv(opts: dict[str, Any]) -> None:
    env = RaetEnv()
    stack = env.stack(opts, main=True, name="main")
    tally = Tally(Payload(opts["size"]), opts["count"])
    state: dict[str, Any] = {"c0": None, "reported": False}

    def on_pass() -> None:
        if state["c0"] is None and any(r.allowed for r in stack.remotes.values()):
            state["c0"] = cpu()
        rx = stack.rxMsgs
        while rx:
            body, _name = rx.popleft()
            tally.add(body)
        if tally.complete and not state["reported"]:
            state["reported"] = True
            emit("result", cpu=cpu() - (state["c0"] or 0.0), **tally.result())

    emit("ready", ha=list(stack.ha))
    how = env.serve(stack, on_pass, time.monotonic() + opts["timeout"])
    if not state["reported"]:
        emit(
            "result", cpu=cpu() - (state["c0"] or 0.0), error=f"stopped by {how}", **tally.result()
        )
    emit("final", maxrss_kib=maxrss_kib(), stats=dict(stack.stats))
    stack.server.close()


def raet_send(opts: dict[str, Any]) -> None:
    env = RaetEnv()
    stack, remote = env.connect(opts, "sender")
    payload, count, window = Payload(opts["size"]), opts["count"], opts["window"]
    bodies = [payload.body(i) for i in range(count)]
    messenger = env.transacting.Messenger

    def outstanding() -> int:
        return len(stack.txMsgs) + sum(
            1 for t in remote.transactions.values() if isinstance(t, messenger)
        )

    c0, t0 = cpu(), time.monotonic()
    deadline = t0 + opts["timeout"]
    sent = 0
    while time.monotonic() < deadline:
        if sent < count:
            room = window - outstanding()
            while room > 0 and sent < count:
                stack.transmit(bodies[sent], uid=remote.uid)
                sent += 1
                room -= 1
        elif outstanding() == 0:
            break
        env.service(stack)
        env.wait(stack, None)
    emit(
        "result",
        t0=t0,
        t_end=time.monotonic(),
        delivered=sent - outstanding(),
        failed=0,
        cpu=cpu() - c0,
        stats=dict(stack.stats),
    )
    stack.server.close()


def raet_echo(opts: dict[str, Any]) -> None:
    env = RaetEnv()
    stack = env.stack(opts, main=True, name="main")
    first: list[float] = []  # CPU time at the first request

    def on_pass() -> None:
        rx = stack.rxMsgs
        if rx and not first:
            first.append(cpu())
        while rx:
            body, name = rx.popleft()
            stack.transmit(body, uid=stack.nameRemotes[name].uid)

    emit("ready", ha=list(stack.ha))
    env.serve(stack, on_pass, time.monotonic() + opts["timeout"])
    emit("final", maxrss_kib=maxrss_kib(), cpu=cpu() - first[0] if first else None)
    stack.server.close()


def raet_ping(opts: dict[str, Any]) -> None:
    env = RaetEnv()
    stack, remote = env.connect(opts, "pinger")
    payload, count = Payload(opts["size"]), opts["count"]
    rtts: list[float] = []
    bad = 0
    c0 = cpu()
    deadline = time.monotonic() + opts["timeout"]
    for i in range(count):
        body = payload.body(i)
        t = time.perf_counter()
        stack.transmit(body, uid=remote.uid)
        reply = None
        while reply is None and time.monotonic() < deadline:
            env.service(stack)
            if stack.rxMsgs:
                reply, _name = stack.rxMsgs.popleft()
            else:
                env.wait(stack, None)
        if reply is None:
            break
        rtts.append(time.perf_counter() - t)
        bad += payload.check(reply) != i
    emit("result", **rtt_result(rtts, bad, count, c0))
    stack.server.close()


def raet_main(opts: dict[str, Any]) -> None:
    raise_fd_limit()
    env = RaetEnv()
    stack = env.stack(opts, main=True, name="main")
    n = opts["n"]
    state: dict[str, Any] = {"c0": cpu(), "reported": False, "check": 0.0}

    def on_pass() -> None:
        if state["reported"]:
            return
        now = time.monotonic()
        if now < state["check"]:
            return
        state["check"] = now + 0.005  # counting 1000 remotes every pass would cost more than raet
        allowed = sum(1 for r in stack.remotes.values() if r.allowed)
        if allowed >= n:
            state["reported"] = True
            emit("result", t_all=now, allowed=allowed, cpu=cpu() - state["c0"])

    emit("ready", ha=list(stack.ha), maxrss_kib=maxrss_kib())
    how = env.serve(stack, on_pass, time.monotonic() + opts["timeout"])
    if not state["reported"]:
        emit(
            "result",
            allowed=sum(1 for r in stack.remotes.values() if r.allowed),
            error=f"stopped by {how}",
        )
    emit("final", maxrss_kib=maxrss_kib(), remotes=len(stack.remotes))
    stack.server.close()


def raet_fleet(opts: dict[str, Any]) -> None:
    raise_fd_limit()
    env = RaetEnv()
    n, peer = opts["n"], tuple(opts["peer"])
    stacks, remotes = [], []
    for i in range(n):
        stack = env.stack(opts, main=False, name=f"minion{i}")
        remote = env.estating.RemoteEstate(stack=stack, fuid=0, sid=0, ha=peer)
        stack.addRemote(remote)
        stacks.append(stack)
        remotes.append(remote)
    emit("created", n=n)
    stdin = StdinWatch()
    c0, t0 = cpu(), time.monotonic()
    for stack, remote in zip(stacks, remotes, strict=True):
        stack.join(uid=remote.uid, cascade=True, timeout=0)
    deadline = t0 + opts["timeout"]
    reported = False
    sel = selectors.DefaultSelector()  # select() stops at fd 1024
    for stack in stacks:
        sel.register(stack.server.ss, selectors.EVENT_READ, stack)
    sel.register(stdin.fd, selectors.EVENT_READ, None)
    while not stdin.eof and time.monotonic() < deadline:
        # Service the stacks with a readable socket or running transactions (their redo
        # timers); the idle rest has nothing to do.
        env.tick()
        todo = set()
        for key, _ in sel.select(0.002):
            if key.data is None:
                stdin.read()
            else:
                todo.add(key.data)
        todo.update(s for s in stacks if s.transactions or s.txMsgs or s.txes)
        for stack in todo:
            env.service(stack)
        if not reported:
            # raet may drop or replace the remote object (a failed or renewed join):
            # always look at the stack's current remote, and re-create it if gone.
            remotes = [env.current_remote(stack, peer) for stack in stacks]
            for stack, remote in zip(stacks, remotes, strict=True):
                env.nudge(stack, remote)
            if all(r.allowed for r in remotes):
                reported = True
                emit("result", t0=t0, t_all=time.monotonic(), allowed=n, cpu=cpu() - c0)
    if not reported:
        stuck = [
            (r.name, r.joined, r.allowed, [type(t).__name__ for t in r.transactions.values()])
            for r in remotes
            if not r.allowed
        ]
        emit("result", t0=t0, allowed=n - len(stuck), error="timeout or eof", stuck=stuck[:5])
    for stack in stacks:
        stack.server.close()


# ---------------------------------------------------------------------------- ZeroMQ CURVE


class ZmqEnv:
    def __init__(self) -> None:
        import zmq

        self.zmq = zmq
        self.ctx = zmq.Context()
        self.ctx.set(zmq.MAX_SOCKETS, 16384)

    def server(self, kind: int) -> tuple[Any, list[Any], str]:
        zmq = self.zmq
        public, secret = zmq.curve_keypair()
        sock = self.ctx.socket(kind)
        sock.curve_server = True
        sock.curve_publickey, sock.curve_secretkey = public, secret
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        return sock, ["127.0.0.1", port], public.decode("ascii")

    def client(self, kind: int, opts: dict[str, Any]) -> Any:
        zmq = self.zmq
        public, secret = zmq.curve_keypair()
        sock = self.ctx.socket(kind)
        sock.curve_serverkey = opts["key"].encode("ascii")
        sock.curve_publickey, sock.curve_secretkey = public, secret
        return sock

    def connect_and_handshake(self, sock: Any, opts: dict[str, Any]) -> None:
        """Connect and wait until the CURVE handshake succeeded (the 'allowed' point)."""
        from zmq.utils.monitor import recv_monitor_message

        zmq = self.zmq
        monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        host, port = opts["peer"]
        sock.connect(f"tcp://{host}:{port}")
        if not monitor.poll(opts["timeout"] * 1000):
            raise TimeoutError("CURVE handshake timed out")
        recv_monitor_message(monitor)
        sock.disable_monitor()
        monitor.close()

    def wait_eof(self, deadline: float) -> None:
        stdin = StdinWatch()
        while not stdin.eof and time.monotonic() < deadline:
            ready, _, _ = sel_select([stdin.fd], max(0.0, deadline - time.monotonic()))
            if ready:
                stdin.read()


class Codec:
    """How a ZeroMQ worker turns bodies into frames and back (``OPTIONS["codec"]``).

    ``msgpack`` is what the native profile uses (the like-for-like row); ``json`` is the
    first version's baseline; ``raw`` sends each body's JSON bytes, encoded before the
    clock starts, and the receiver only compares bytes (libzmq CURVE without a codec).
    """

    def __init__(self, name: str, payload: Payload) -> None:
        import msgpack

        self.name, self.payload = name, payload
        self.encode: Callable[[Any], bytes] = (
            msgpack.packb if name == "msgpack" else _dumps  # type: ignore[assignment]
        )
        self.decode: Callable[[bytes], Any] = (
            msgpack.unpackb if name == "msgpack" else json.loads  # type: ignore[assignment]
        )

    def frames(self, count: int) -> list[Any]:
        """What the sender hands to ``send``, one per message."""
        bodies = [self.payload.body(i) for i in range(count)]
        return [_dumps(b) for b in bodies] if self.name == "raw" else bodies

    def add(self, tally: Tally, data: bytes) -> None:
        if self.name != "raw":
            tally.add(self.decode(data))
            return
        try:
            seq = int(data[6:14])
        except ValueError:
            seq = -1
        expected = _dumps(self.payload.body(seq)) if 0 <= seq < tally.count else b""
        tally.add(self.payload.body(seq) if data == expected else None)


def _dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def zmq_recv(opts: dict[str, Any]) -> None:
    env = ZmqEnv()
    sock, ha, key = env.server(env.zmq.PULL)
    payload = Payload(opts["size"])
    tally = Tally(payload, opts["count"])
    codec = Codec(opts.get("codec", "msgpack"), payload)
    emit("ready", ha=ha, key=key)
    c0 = cpu()
    deadline = time.monotonic() + opts["timeout"]
    # The same application work as the road stacks: decode, check the mapping.
    while not tally.complete and time.monotonic() < deadline:
        if sock.poll(100):
            codec.add(tally, sock.recv(copy=False).bytes)
    emit("result", cpu=cpu() - c0, **tally.result())
    env.wait_eof(deadline)
    emit("final", maxrss_kib=maxrss_kib())
    sock.close(linger=0)


def zmq_send(opts: dict[str, Any]) -> None:
    env = ZmqEnv()
    sock = env.client(env.zmq.PUSH, opts)
    env.connect_and_handshake(sock, opts)
    payload, count = Payload(opts["size"]), opts["count"]
    codec = Codec(opts.get("codec", "msgpack"), payload)
    frames = codec.frames(count)
    copy = opts["size"] < 65536
    c0, t0 = cpu(), time.monotonic()
    if codec.name == "raw":
        for frame in frames:
            sock.send(frame, copy=copy)
    else:
        encode = codec.encode
        for body in frames:
            sock.send(encode(body), copy=copy)
    t_end = time.monotonic()
    # PUSH cannot see delivery: the receiver reports it; the I/O thread's CPU is counted
    # once the orchestrator says the receiver has everything (stdin EOF).
    env.wait_eof(t0 + opts["timeout"])
    emit("result", t0=t0, t_end=t_end, delivered=count, failed=0, cpu=cpu() - c0)
    sock.close(linger=0)


def zmq_echo(opts: dict[str, Any]) -> None:
    env = ZmqEnv()
    sock, ha, key = env.server(env.zmq.REP)
    emit("ready", ha=ha, key=key)
    stdin = StdinWatch()
    poller = env.zmq.Poller()
    poller.register(sock, env.zmq.POLLIN)
    poller.register(stdin.fd, env.zmq.POLLIN)
    deadline = time.monotonic() + opts["timeout"]
    codec = Codec(opts.get("codec", "msgpack"), Payload(100))
    first: list[float] = []  # CPU time at the first request
    while not stdin.eof and time.monotonic() < deadline:
        for what, _ in poller.poll(100):
            if what is sock:
                data = sock.recv()
                if not first:
                    first.append(cpu())
                sock.send(data if codec.name == "raw" else codec.encode(codec.decode(data)))
            else:
                stdin.read()
    emit("final", maxrss_kib=maxrss_kib(), cpu=cpu() - first[0] if first else None)
    sock.close(linger=0)


def zmq_ping(opts: dict[str, Any]) -> None:
    env = ZmqEnv()
    sock = env.client(env.zmq.REQ, opts)
    env.connect_and_handshake(sock, opts)
    payload, count = Payload(opts["size"]), opts["count"]
    codec = Codec(opts.get("codec", "msgpack"), payload)
    rtts: list[float] = []
    bad = 0
    c0 = cpu()
    for i in range(count):
        body = payload.body(i)
        raw = _dumps(body) if codec.name == "raw" else b""
        t = time.perf_counter()
        sock.send(raw or codec.encode(body))
        if not sock.poll(opts["timeout"] * 1000):
            break
        data = sock.recv()
        reply = (body if data == raw else None) if raw else codec.decode(data)
        rtts.append(time.perf_counter() - t)
        bad += payload.check(reply) != i
    emit("result", **rtt_result(rtts, bad, count, c0))
    sock.close(linger=0)


def zmq_main(opts: dict[str, Any]) -> None:
    raise_fd_limit()
    env = ZmqEnv()
    sock, ha, key = env.server(env.zmq.ROUTER)
    emit("ready", ha=ha, key=key, maxrss_kib=maxrss_kib())
    n = opts["n"]
    seen: set[bytes] = set()
    c0 = cpu()
    deadline = time.monotonic() + opts["timeout"]
    while len(seen) < n and time.monotonic() < deadline:
        if sock.poll(100):
            ident, hello = sock.recv_multipart()
            if hello.startswith(b"hello "):
                seen.add(ident)
    if len(seen) >= n:
        emit("result", t_all=time.monotonic(), allowed=len(seen), cpu=cpu() - c0)
    else:
        emit("result", allowed=len(seen), error="timeout")
    env.wait_eof(deadline)
    emit("final", maxrss_kib=maxrss_kib(), remotes=len(seen))
    sock.close(linger=0)


def zmq_fleet(opts: dict[str, Any]) -> None:
    raise_fd_limit()
    env = ZmqEnv()
    n = opts["n"]
    socks = [env.client(env.zmq.DEALER, opts) for _ in range(n)]
    emit("created", n=n)
    c0, t0 = cpu(), time.monotonic()
    host, port = opts["peer"]
    for index, sock in enumerate(socks):
        sock.connect(f"tcp://{host}:{port}")
        sock.send(b"hello %d" % index)
    emit("result", t0=t0, allowed=n, cpu=cpu() - c0)
    env.wait_eof(t0 + opts["timeout"])
    for sock in socks:
        sock.close(linger=0)


ROLES: dict[str, dict[str, Callable[[dict[str, Any]], None]]] = {
    "raetsalt": {
        "recv": rs_recv,
        "send": rs_send,
        "echo": rs_echo,
        "ping": rs_ping,
        "hol-echo": rs_hol_echo,
        "hol-ping": rs_hol_ping,
        "main": rs_main,
        "fleet": rs_fleet,
    },
    "raet": {
        "recv": raet_recv,
        "send": raet_send,
        "echo": raet_echo,
        "ping": raet_ping,
        "main": raet_main,
        "fleet": raet_fleet,
    },
    "zmq": {
        "recv": zmq_recv,
        "send": zmq_send,
        "echo": zmq_echo,
        "ping": zmq_ping,
        "main": zmq_main,
        "fleet": zmq_fleet,
    },
}


def main(argv: list[str]) -> int:
    role, kind, options = argv[1], argv[2], json.loads(argv[3])
    profile = options.get("profile_out")
    if profile:
        import cProfile

        cProfile.runctx("ROLES[kind][role](options)", globals(), locals(), profile)
    else:
        ROLES[kind][role](options)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
