"""Many real minions in one process, for benchmarks: each has its own config, keep, road
port, manor yard and job service, exactly as ``raetsalt-minion`` builds them
(``open_node``, ``MinionLink``, ``MinionAdapter``) and serves them with the steps of
``flows/minion.flo`` (``raetsalt.flo.passes``); one selector loop services them all.

    .venv/bin/python bench/many_minions.py --root DIR --master 127.0.0.1:PORT --count 200 \\
        [--inline-jobs] [--nice 10] [--status FILE]

The loop is O(log N) per wake-up: a heap of (deadline, minion) with lazy invalidation
(a minion's entry counts only while it is still that minion's deadline), so a thousand
idle minions cost nothing between their timers.  ``--inline-jobs`` answers jobs in this
process (no fork per job: a simulated ``test.ping`` costs microseconds, not a process),
and ``--nice`` lowers this process's CPU priority, so that the simulated minions do not
take the master's CPU on a shared machine.  Keep writes are synchronous (one per minion
at its first join; put ``--root`` on tmpfs).

Every second ``--status`` is rewritten (atomically) with a JSON line: how many minions
are connected, how many times one lost its master (connected -> not), and how many
started a session after the wall-clock time in ``<root>/epoch`` (if that file exists:
the benchmark writes it before restarting the master).

Prints ``ready`` once every node is open and connecting; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import raetsalt.drivers.udp as udp_driver
from raetsalt.config import minion_config
from raetsalt.daemon.minion_adapter import MinionAdapter
from raetsalt.daemon.service import MinionLink, ensure_dirs, open_node
from raetsalt.drivers.keepwriter import KeepWriter
from raetsalt.engine.events import Allowed
from raetsalt.execution.grains import core_grains
from raetsalt.execution.loader import Loader
from raetsalt.flo import flow_path
from raetsalt.flo.passes import FlowPass
from raetsalt.keep.records import Keep, KeepWrite
from raetsalt.node import NodeEvent


def _synchronous_writer(keep: Keep) -> KeepWriter[KeepWrite]:
    return KeepWriter(keep, threaded=False)


# No keep-writer thread (and socket pair) per simulated minion: thousands of them would
# cost threads and file descriptors a real minion, alone on its machine, never notices.
udp_driver.writer_for = _synchronous_writer


class InlineExecutor:
    """``ForkExecutor``'s interface, running each job at once in this process."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self._done: list[tuple[str, dict[str, Any] | None]] = []

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        pass

    def unregister(self, selector: selectors.BaseSelector) -> None:
        pass

    def timeout(self) -> float | None:
        return 0.0 if self._done else None

    def spawn(self, jid: str, job: Any) -> int:
        try:
            result: dict[str, Any] | None = self.run(job)
        except Exception:  # noqa: BLE001 - a failed job, as a dead child would be
            result = None
        self._done.append((jid, result))
        return os.getpid()

    def poll(self) -> list[tuple[str, dict[str, Any] | None]]:
        done, self._done = self._done, []
        return done

    def kill(self, jid: str, sig: int = signal.SIGTERM) -> bool:
        return False

    def running(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        self._done.clear()


MINION_FLOW = flow_path("minion").read_text()


class SessionLink(MinionLink):
    """A minion link that notes when each session with the master began."""

    session_at = 0.0

    def handle(self, events: Iterable[NodeEvent]) -> None:
        events = list(events)
        if any(type(e) is Allowed for e in events):
            self.session_at = time.time()
        super().handle(events)


class Minion:
    def __init__(self, opts: dict[str, Any], loader: Loader, grains: dict[str, Any], *,
                 inline: bool) -> None:
        self.node = open_node(opts, "minion")
        self.link = SessionLink(self.node, opts)
        link = self.link
        self.jobs = MinionAdapter(self.node, opts, lambda: link.connected,
                                  loader=loader, grains=grains)
        if inline:
            self.jobs.executor.close()
            self.jobs.executor = InlineExecutor(self.jobs._run_in_child)  # type: ignore[assignment]
        self.flow = FlowPass(MINION_FLOW, self.node, self.jobs, watch=self.link)
        self.deadline = 0.0
        self.lost = 0

    @property
    def session_at(self) -> float:
        """Wall-clock time the current session with the master began."""
        return self.link.session_at

    def service(self, now: float) -> float:
        """Service the minion (one pass of the flow's steps); returns its next deadline
        (monotonic)."""
        was = self.link.connected
        self.flow.run()
        if was and not self.link.connected:
            self.lost += 1
        waits = [w for w in (self.node.timeout(), self.jobs.timeout()) if w is not None]
        return now + (min(waits) if waits else 60.0)


class Beacons:
    """Simulated beacons: each minion fires ``salt/beacon/<id>/bench/`` every ``every``
    seconds (``beats`` times, starting once ``go`` exists; minions staggered over the
    interval), through its manor's ``fire_master`` as Salt's beacon machinery does in the
    scheduler process.  The event's data carries the wall-clock time it was fired."""

    def __init__(self, minions: list[Minion], every: float, beats: int,
                 go: str | None) -> None:
        self.minions = minions
        self.every = every
        self.beats = beats if every > 0 else 0
        self.go = Path(go) if go else None
        self.started: float | None = None
        self.heap: list[tuple[float, int, int]] = []

    def wait(self, now: float) -> float:
        if not self.beats:
            return 60.0
        if self.started is None:
            return 0.1  # polling the start file
        return max(0.0, self.heap[0][0] - now) if self.heap else 60.0

    def fire(self, now: float) -> list[Minion]:
        if not self.beats:
            return []
        if self.started is None:
            if self.go is not None and not self.go.exists():
                return []
            self.started = now
            count = len(self.minions)
            self.heap = [(now + self.every * i / count, i, 0) for i in range(count)]
            heapq.heapify(self.heap)
        fired: list[Minion] = []
        while self.heap and self.heap[0][0] <= now:
            due, index, beat = heapq.heappop(self.heap)
            minion = self.minions[index]
            minion_id = minion.node.node_id
            event = {"tag": f"salt/beacon/{minion_id}/bench/",
                     "data": {"id": minion_id, "beat": beat, "sent": time.time()}}
            minion.node.manor.fire_event("fire_master", {
                "events": [event], "pretag": None, "tag": None, "data": None})
            fired.append(minion)
            if beat + 1 < self.beats:
                heapq.heappush(self.heap, (due + self.every, index, beat + 1))
        return fired


HOLDERS: list[bool] = []
"""Non-empty: the status names the master each minion holds (``--holders``)."""


def _write_status(path: Path, root: Path, minions: list[Minion]) -> None:
    try:
        epoch = float((root / "epoch").read_text())
    except (OSError, ValueError):
        epoch = 0.0
    status = {
        "at": time.time(),
        "count": len(minions),
        "connected": sum(1 for m in minions if m.link.connected),
        "lost": sum(m.lost for m in minions),
        "moves": sum(m.link.switch.choice.moves for m in minions if m.link.switch),
        "since_epoch": sum(
            1 for m in minions if m.link.connected and m.session_at > epoch
        ),
    }
    if HOLDERS:
        status["holders"] = {
            m.node.node_id: (m.link.switch.choice.held if m.link.connected else None)
            for m in minions if m.link.switch}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(status))
    tmp.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--master", required=True,
                        help="host:port of the master's road (several: comma-separated)")
    parser.add_argument("--extra", default="",
                        help="more minion config lines, ';'-separated (cluster_id: x)")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--prefix", default="mm")
    parser.add_argument("--inline-jobs", action="store_true",
                        help="run jobs in this process (no fork per job)")
    parser.add_argument("--nice", type=int, default=0, help="lower CPU priority by this much")
    parser.add_argument("--status", help="file to rewrite with a JSON status every second")
    parser.add_argument("--holders", action="store_true",
                        help="the status file names the master each minion holds")
    parser.add_argument("--go", help="build the minions, then connect once this file exists")
    parser.add_argument("--beacon-every", type=float, default=0.0,
                        help="each minion fires a beacon event every this many seconds")
    parser.add_argument("--beacon-beats", type=int, default=0,
                        help="beacon beats per minion (then they stop)")
    parser.add_argument("--beacon-go", help="start the beacons once this file exists")
    parser.add_argument("--alive-period", type=float, default=3.0,
                        help="the minions' raet_alive_period")
    args = parser.parse_args()
    # Thousands of minions each saying "lost the master" would drown the benchmark's
    # output (and cost CPU): the status file counts those.
    logging.basicConfig(level=logging.ERROR)
    if args.nice:
        os.nice(args.nice)
    if args.holders:
        HOLDERS.append(True)
    root = Path(args.root)
    loader = Loader()
    base = core_grains("x")  # detected once; every minion reports the same host facts
    minions: list[Minion] = []
    selector = selectors.DefaultSelector()
    for index in range(args.count):
        minion_id = f"{args.prefix}{index:05d}"
        confdir = root / minion_id
        confdir.mkdir(parents=True, exist_ok=True)
        (confdir / "minion").write_text(
            f"id: {minion_id}\nroot_dir: {confdir}\ninterface: 127.0.0.1\nraet_port: 0\n"
            f"master: [{', '.join(repr(m) for m in args.master.split(','))}]\n"
            f"random_reauth_delay: 10.0\n{args.extra.replace(';', chr(10))}\n"
            f"raet_alive_period: {args.alive_period}\n"
            f"sock_dir: {root / 'sock'}\nexecution_mode: native\n"  # no Salt zygote each
        )
        opts = minion_config(confdir / "minion")
        ensure_dirs(opts)
        minion = Minion(opts, loader, {**base, "id": minion_id}, inline=args.inline_jobs)
        minion.node.register(selector, minion)
        minion.jobs.register(selector, minion)
        minions.append(minion)
    status_path = Path(args.status) if args.status else None
    if args.go:
        # Every minion is built: say so, and connect them all when told (a cold start of
        # the master's side, not of this process).
        go = Path(args.go)
        if status_path is not None:
            _write_status(status_path, root, minions)
        while not go.exists():
            time.sleep(0.05)  # polling the benchmark's start signal
    for minion in minions:
        minion.link.connect()
    stop = False
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    selector.register(wake_r, selectors.EVENT_READ, None)

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True
        try:
            wake_w.send(b"\0")
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print("ready", flush=True)
    heap: list[tuple[float, int, Minion]] = []
    now = time.monotonic()
    for index, minion in enumerate(minions):
        minion.deadline = minion.service(now)
        heapq.heappush(heap, (minion.deadline, index, minion))
    order = {id(m): i for i, m in enumerate(minions)}
    next_status = 0.0
    beacons = Beacons(minions, args.beacon_every, args.beacon_beats, args.beacon_go)
    while not stop:
        now = time.monotonic()
        wait = max(0.0, heap[0][0] - now) if heap else 1.0
        wait = min(wait, beacons.wait(now))
        if status_path is not None:
            wait = min(wait, max(0.0, next_status - now))
        ready = selector.select(wait)
        now = time.monotonic()
        due: dict[int, Minion] = {}
        for key, _events in ready:
            if key.data is not None:
                due[id(key.data)] = key.data
        while heap and heap[0][0] <= now:
            deadline, _, minion = heapq.heappop(heap)
            if deadline == minion.deadline:  # else: a stale entry
                due[id(minion)] = minion
        for minion in beacons.fire(now):
            due[id(minion)] = minion
        for minion in due.values():
            minion.deadline = minion.service(now)
            heapq.heappush(heap, (minion.deadline, order[id(minion)], minion))
        if status_path is not None and now >= next_status:
            next_status = now + 1.0
            _write_status(status_path, root, minions)
    for minion in minions:
        minion.jobs.close()
        minion.node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
