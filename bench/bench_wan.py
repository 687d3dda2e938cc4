"""WAN benchmark: the native profile through a bottleneck relay on loopback
(the targets are in docs/native-profile.md, "Congestion control and pacing").

    .venv/bin/python bench/bench_wan.py [--quick] [--reps 3] [--cases transfer,lossy,...]
                                        [--rate-mbit 20] [--rtt-ms 50] [--queue 64]

A main and its minions run in this process (one selector loop); every datagram between
them crosses ``udp_relay.py`` with a bottleneck each way: ``--rate-mbit`` megabits per
second, half of ``--rtt-ms`` one-way delay, a drop-tail queue of ``--queue`` datagrams and
the case's random loss.  Native datagrams are 1,400 bytes (a real network's), not the 64
KiB loopback ones.  The cases and their targets:

  transfer  the main sends 16 MiB (16 x 1 MiB) to a minion: goodput >= 80 % of the rate,
            queue drops <= 2 % of the datagrams the relay received for the minion
  lossy     the same with 1 % random loss each way: goodput >= 50 % of the rate
  fairness  two 32 MiB transfers to two minions, the second started 1 s after the first:
            Jain's index of their rates while both run (from 2 s after the second start,
            its ramp-up, to the first completion) >= 0.9
  ping      100 B pings (answered by the main) from a second minion while the main sends
            16 MiB to the first: p50 <= 2 x the base round trip

Goodput counts message bodies from the send to the last acknowledgement (the join is
before).  Figures are medians over ``--reps`` runs, each with a fresh relay and estates.
These are not tests; ``make test`` never runs them (the same behaviour is asserted in
virtual time by tests/engine/native/test_congestion.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench_road import Proc

from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import Allowed, Event, MessageDelivered, MessageReceived
from raetsalt.engine.road import RoadConfig
from raetsalt.keep.records import AutoMode
from raetsalt.keep.store import FileKeep

HERE = os.path.dirname(os.path.abspath(__file__))
RELAY = os.path.join(HERE, "udp_relay.py")
MiB = 1024 * 1024
DATAGRAM = 1400
RUN_TIMEOUT = 120.0
TARGETS = {"transfer": 0.80, "drops": 0.02, "lossy": 0.50, "fairness": 0.9, "ping": 2.0}
CASES = ["transfer", "lossy", "fairness", "ping"]


def body(n: int, size: int = MiB - 64) -> dict[str, Any]:
    return {"n": n, "d": bytes([n % 251]) * size}


@dataclass
class Path:
    """The bottleneck's settings."""

    rate: float  # bytes per second
    rtt: float
    queue: int
    loss: float = 0.0

    def relay_args(self, target: tuple[str, int], seed: int) -> list[str]:
        return [
            sys.executable,
            RELAY,
            f"{target[0]}:{target[1]}",
            str(self.loss),
            str(seed),
            f"--rate={self.rate}",
            f"--delay={self.rtt / 2}",
            f"--queue={self.queue}",
        ]


@dataclass
class Net:
    """A main, its minions and the relay between them; ``run`` services them all."""

    main: RoadStack
    minions: list[RoadStack]
    relay: Proc
    sel: selectors.BaseSelector
    events: dict[int, list[tuple[float, Event]]] = field(default_factory=dict)
    on_event: Callable[[int, Event], None] | None = None

    @property
    def stacks(self) -> list[RoadStack]:
        return [self.main, *self.minions]

    def run(self, done: Callable[[], bool], timeout: float = RUN_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        stacks = self.stacks
        while not done():
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError("bench_wan: the case did not finish in time")
            waits = [w for s in stacks if (w := s.timeout(now)) is not None]
            wait = min([*waits, deadline - now])
            ready = {key.data for key, _ in self.sel.select(wait)}
            now = time.monotonic()
            for index, stack in enumerate(stacks):
                due = stack.get_timer()
                if index in ready or stack.road.has_output() or (due is not None and due <= now):
                    for event in stack.service_ready():
                        self.events.setdefault(index, []).append((now, event))
                        if self.on_event is not None:
                            self.on_event(index, event)

    def of(self, index: int, kind: type[Event]) -> list[tuple[float, Any]]:
        return [(at, e) for at, e in self.events.get(index, []) if isinstance(e, kind)]

    def delivered(self, to: str) -> int:
        return sum(e.count for _, e in self.of(0, MessageDelivered) if e.remote == to)


@contextlib.contextmanager
def network(path: Path, minions: int, seed: int) -> Iterator[Net]:
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = tempfile.mkdtemp(prefix="bench-wan-", dir=shm)
    # Every case queues its messages at once, and the fairness case's 2 x 32 MiB take
    # about 27 s at 20 Mbit/s: with the default 30 s message time-out a loaded machine
    # expired the last ones and the case never finished.  The bench measures sharing.
    config = RoadConfig(
        auto=AutoMode.ALWAYS, native_loopback_datagram_size=DATAGRAM, message_timeout=RUN_TIMEOUT
    )
    stacks: list[RoadStack] = []
    relay = None

    def stack(name: str, *, main: bool = False) -> RoadStack:
        keep = FileKeep(os.path.join(tmp, name), durable=False)
        opened = RoadStack(keep, name=name, main=main, config=config).open()
        stacks.append(opened)
        return opened

    try:
        main = stack("main", main=True)
        relay = Proc(path.relay_args(main.address, seed), "relay")
        front = tuple(relay.expect("ready", 10)["ha"])
        sel = selectors.DefaultSelector()
        net = Net(main, [stack(f"minion{n}") for n in range(minions)], relay, sel)
        for index, each in enumerate(net.stacks):
            each.register(sel, index)
        for minion in net.minions:
            minion.connect(front, name="main")  # type: ignore[arg-type]
        net.run(lambda: len(net.of(0, Allowed)) >= minions, timeout=30)
        yield net
    finally:
        if relay is not None:
            relay.stop()
        for each in stacks:
            each.close()
        shutil.rmtree(tmp, ignore_errors=True)


def relay_final(net: Net) -> dict[str, Any]:
    net.relay.eof()
    return net.relay.expect("final", 5)


def run_transfer(path: Path, mib: int, seed: int) -> dict[str, Any]:
    with network(path, 1, seed) as net:
        start = time.monotonic()
        net.main.send_many("minion0", [body(n) for n in range(mib)])
        net.run(lambda: net.delivered("minion0") >= mib)
        seconds = time.monotonic() - start
        got = [e.body for _, e in net.of(1, MessageReceived)]
        assert [b["n"] for b in got] == list(range(mib)), "messages lost, duplicated or reordered"
        assert all(b == body(b["n"]) for b in got), "a message arrived damaged"
        down = relay_final(net)["down"]
        stats = net.main.road.stats
    return {
        "goodput": mib * MiB / seconds / path.rate,
        "mb_per_s": mib * MiB / seconds / 1e6,
        "drops": down["dropped"] / max(1, down["forwarded"] + down["dropped"]),
        "dropped": down["dropped"],
        "lost": down["lost"],
        "peak_queue": down["peak_queue"],
        "sender": {k: v for k, v in stats.items() if k.startswith("native_")},
    }


def run_fairness(path: Path, mib: int, seed: int) -> dict[str, Any]:
    with network(path, 2, seed) as net:
        start = time.monotonic()
        net.main.send_many("minion0", [body(n) for n in range(mib)])
        net.run(lambda: time.monotonic() >= start + 1.0)
        net.main.send_many("minion1", [body(n) for n in range(mib)])
        net.run(lambda: net.delivered("minion0") >= mib or net.delivered("minion1") >= mib)
        # Rates over the time both ran: from 2 s after the second start (its ramp-up) to
        # the first completion; bytes counted by whole messages received.
        begin, end = start + 3.0, time.monotonic()
        rates = []
        for index in (1, 2):
            times = [at for at, _ in net.of(index, MessageReceived) if begin <= at <= end]
            rates.append(len(times) / max(end - begin, 1e-9))
        relay_final(net)
    jain = sum(rates) ** 2 / (2 * sum(r * r for r in rates)) if any(rates) else 0.0
    return {"jain": jain, "mib_per_s": rates, "window_s": end - begin}


def run_ping(path: Path, mib: int, seed: int) -> dict[str, Any]:
    with network(path, 2, seed) as net:
        main, pinger = net.main, net.minions[1]
        sent: dict[int, float] = {}
        rtts: list[float] = []

        def on_event(index: int, event: Event) -> None:
            if not isinstance(event, MessageReceived):
                return
            if index == 0 and "ping" in event.body:
                main.send(event.remote, {"pong": event.body["ping"]})
            elif index == 2:
                rtts.append(time.monotonic() - sent[event.body["pong"]])

        net.on_event = on_event

        def ping(loaded: bool) -> None:
            """One ping, answered (or, loaded, the transfer over)."""
            n = len(sent)
            sent[n] = time.monotonic()
            pinger.send("main", {"ping": n, "pad": "x" * 80})
            answered = len(rtts) + 1
            net.run(
                lambda: len(rtts) == answered or (loaded and net.delivered("minion0") >= mib),
                timeout=10,
            )

        for _ in range(10):  # the base round trip, on the idle path
            ping(False)
        idle = statistics.median(rtts)
        rtts.clear()
        main.send_many("minion0", [body(n) for n in range(mib)])
        while net.delivered("minion0") < mib:
            ping(True)
        relay_final(net)
    loaded = sorted(rtts)
    return {
        "idle_ms": idle * 1e3,
        "p50_ms": statistics.median(loaded) * 1e3,
        "p99_ms": loaded[int(0.99 * (len(loaded) - 1))] * 1e3,
        "pings": len(loaded),
        "ratio": statistics.median(loaded) / path.rtt,
    }


def median_of(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(run[key] for run in runs)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 MiB transfers, one run each")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rate-mbit", type=float, default=20.0)
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--queue", type=int, default=64)
    args = parser.parse_args(argv[1:])
    reps, mib = (1, 4) if args.quick else (args.reps, 16)
    rate = args.rate_mbit * 1e6 / 8
    clean = Path(rate, args.rtt_ms / 1e3, args.queue)
    lossy = Path(rate, args.rtt_ms / 1e3, args.queue, loss=0.01)
    cases = [c for c in args.cases.split(",") if c]
    load0, wall0 = os.getloadavg()[0], time.monotonic()
    rows: list[tuple[str, str, str, bool]] = []
    results: dict[str, Any] = {}
    for case in cases:
        if case in ("transfer", "lossy"):
            path = clean if case == "transfer" else lossy
            runs = [run_transfer(path, mib, seed) for seed in range(reps)]
            goodput = median_of(runs, "goodput")
            rows.append(
                (
                    f"{case}: goodput, % of {args.rate_mbit:g} Mbit/s",
                    f">= {TARGETS[case]:.0%}",
                    f"{goodput:.1%} ({median_of(runs, 'mb_per_s'):.2f} MB/s)",
                    goodput >= TARGETS[case],
                )
            )
            if case == "transfer":
                drops = median_of(runs, "drops")
                rows.append(
                    (
                        "transfer: queue drops, % of datagrams",
                        f"<= {TARGETS['drops']:.0%}",
                        f"{drops:.2%} (peak queue {median_of(runs, 'peak_queue'):.0f})",
                        drops <= TARGETS["drops"],
                    )
                )
        elif case == "fairness":
            runs = [run_fairness(clean, 2 * max(mib, 8), seed) for seed in range(reps)]
            jain = median_of(runs, "jain")
            rows.append(("fairness: Jain's index, 2 flows", ">= 0.9", f"{jain:.3f}", jain >= 0.9))
        elif case == "ping":
            runs = [run_ping(clean, mib, seed) for seed in range(reps)]
            p50, ratio = median_of(runs, "p50_ms"), median_of(runs, "ratio")
            rows.append(
                (
                    "ping under load: p50 (x base RTT)",
                    f"<= {TARGETS['ping']:g}x",
                    f"{p50:.1f} ms ({ratio:.2f}x; idle {median_of(runs, 'idle_ms'):.1f} ms,"
                    f" p99 {median_of(runs, 'p99_ms'):.1f} ms)",
                    ratio <= TARGETS["ping"],
                )
            )
        else:
            parser.error(f"unknown case {case!r}")
        results[case] = runs
    width = max(len(r[0]) for r in rows)
    print(
        f"\nbottleneck {args.rate_mbit:g} Mbit/s, RTT {args.rtt_ms:g} ms, queue {args.queue},"
        f" {DATAGRAM} B datagrams; medians of {reps}"
    )
    print(f"{'case':<{width}}  {'target':<8}  result")
    for name, target, result, met in rows:
        print(f"{name:<{width}}  {target:<8}  {result}  {'met' if met else 'MISSED'}")
    wall = time.monotonic() - wall0
    print(f"\nwall {wall:.1f} s, load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    print(json.dumps({"bench": "wan", "quick": args.quick, "results": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
