"""The selector skedder and the daemon flows, in-process.

Scheduler tests run a throw-away flo on simulated time (``real=False``: nothing waits)
or measure real wake-ups on a socketpair.  Flow tests build ``flows/master.flo`` and
``flows/minion.flo`` on two simulated-time skedders stepped in turn, with real loopback
sockets; between rounds the test waits on the skedders' selectors (a datagram ends the
wait), never on a fixed sleep.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import raetsalt  # noqa: F401  (collections.abc before ioflo)
from raetsalt.cli.key import main as key_main
from raetsalt.config import load_node_config
from raetsalt.flo import flow_path
from raetsalt.flo.skedder import SelectSkedder, Waiter, build
from raetsalt.keep.records import Acceptance
from raetsalt.keep.store import FileKeep
from raetsalt.paths import keep_dir

# --------------------------------------------------------------------------- skedder

TICKS_FLO = """
house ticks
framer ticks be active first counting
    frame counting
        go done if elapsed >= 1.0
    frame done
        enter
            bid stop all
"""


def _write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_simulated_time_steps_exactly(tmp_path: Path) -> None:
    sk = build(_write(tmp_path, "t.flo", TICKS_FLO), period=0.125, real=False, behaviors=[])
    waits: list[float] = []
    sk.waiter.wait = lambda limit: bool(waits.append(limit))  # type: ignore[method-assign]
    sk.run()
    # 0.125-s steps: the transition fires on the step whose stamp reaches 1.0.
    assert sk.stamp == pytest.approx(1.0 + 0.125)
    assert sk.iterations == 10
    assert waits == []  # simulated: nothing waited


def test_run_steps_and_run_until_drive_one_iteration_at_a_time(tmp_path: Path) -> None:
    sk = build(_write(tmp_path, "t.flo", TICKS_FLO), period=0.125, real=False, behaviors=[])
    assert sk.run_steps(3)
    assert sk.stamp == pytest.approx(0.375)
    framer = sk.houses[0].framers[0]
    assert framer.active.name == "counting"
    taken = sk.run_until(lambda: framer.active.name == "done")
    # Steps at stamps 0.375 ... 1.0 (the transition), each followed by advance().
    assert framer.active.name == "done" and sk.stamp == pytest.approx(1.125)
    assert taken == 6
    sk.close()


class _PairWatch:
    """A Wakeable over one end of a socketpair, draining what it reads."""

    def __init__(self, sock: socket.socket, wait: float | None = None) -> None:
        self.sock = sock
        self.wait = wait

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        selector.register(self.sock, selectors.EVENT_READ, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        selector.unregister(self.sock)

    def timeout(self) -> float | None:
        return self.wait


def test_wait_ends_when_a_watched_socket_becomes_ready() -> None:
    waiter = Waiter()
    a, b = socket.socketpair()
    try:
        waiter.watch(_PairWatch(a))
        for count in range(1, 6):
            sender = threading.Timer(0.002, lambda: b.send(b"x") and None)
            sender.start()
            # A one-minute tick: only the datagram can end this wait (True: something
            # became ready; the tick would have returned False).
            assert waiter.wait(60.0)
            assert a.recv(16) == b"x" and waiter.wakeups == count
            sender.join()
    finally:
        waiter.close()
        a.close()
        b.close()


def test_wait_is_bounded_by_the_tick_and_by_watched_timers() -> None:
    waiter = Waiter()
    a, b = socket.socketpair()
    try:
        limits: list[float | None] = []
        select = waiter.selector.select

        def recording(timeout: float | None = None) -> Any:
            limits.append(timeout)
            return select(timeout)

        waiter.selector.select = recording  # type: ignore[method-assign]
        started = time.monotonic()
        assert not waiter.wait(0.05)  # idle: one tick
        assert time.monotonic() - started >= 0.04 and limits == [0.05]
        waiter.watch(_PairWatch(a, wait=0.01))
        assert not waiter.wait(60.0)  # the watched timer is due first
        assert limits[-1] == 0.01
        # wake() from another thread (or a signal handler) ends a long wait: True, where
        # the one-minute tick would have returned False
        threading.Timer(0.01, waiter.wake).start()
        waiter.unwatch(waiter.watched[0])
        assert waiter.wait(60.0)
        assert limits[-1] == 60.0
    finally:
        waiter.close()
        a.close()
        b.close()


def test_real_time_stamp_follows_the_clock(tmp_path: Path) -> None:
    sk = build(_write(tmp_path, "t.flo", TICKS_FLO), period=0.05, real=True, behaviors=[])
    started = time.monotonic()
    sk.run()  # "elapsed >= 1.0" in real seconds, ~20 idle ticks
    assert time.monotonic() - started >= 1.0
    assert sk.stamp >= 1.0
    assert sk.iterations < 60  # waited on the selector, did not spin


def test_every_iteration_moves_time_and_the_wall_clock_shares_once_per_tick(
    tmp_path: Path,
) -> None:
    sk = build(_write(tmp_path, "t.flo", TICKS_FLO), period=10.0, real=True, behaviors=[])
    store = sk.houses[0].store
    sk.start()
    realtimes = set()
    for _ in range(20):  # back to back: far less than one 10 s tick
        sk.step()
        sk.advance()
        assert store.fetch(".time").value == store.stamp == sk.stamp
        realtimes.add(store.fetch(".realtime").value)
    assert len(realtimes) <= 2  # the refresh at the first advance, if any, and no other
    sk.close()


# --------------------------------------------------------------------------- daemon flows


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rsf", dir="/tmp"))  # socket paths stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _opts(root: Path, node: str, **settings: Any) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"root_dir: {root}", "interface: 127.0.0.1", "raet_alive_period: 0.5"]
    lines += [f"{key}: {value}" for key, value in settings.items()]
    (root / node).write_text("\n".join(lines) + "\n")
    return load_node_config(root, node)


class Flow:
    """One daemon flow on a simulated-time SelectSkedder."""

    def __init__(self, node: str, opts: dict[str, Any]) -> None:
        self.sk: SelectSkedder = build(
            flow_path(node), period=0.125, real=False, preloads=[("raetsalt.opts", {"value": opts})]
        )
        self.store = self.sk.houses[0].store
        self.running = True
        self.visited: list[str] = []
        self.sk.start()

    def step(self) -> None:
        self.running = self.sk.step()
        self.sk.advance()
        if self.frame and (not self.visited or self.visited[-1] != self.frame):
            self.visited.append(self.frame)

    def share(self, path: str) -> Any:
        return self.store.fetch(path)

    @property
    def status(self) -> dict[str, Any]:
        share = self.share(".raetsalt.status")
        return {key: share[key] for key in share.keys()}

    @property
    def frame(self) -> str:
        active = self.sk.houses[0].framers[0].active
        return "" if active is None else str(active.name)

    @property
    def exit_code(self) -> int:
        return int(self.share(".raetsalt.exit").value)

    def signal_stop(self) -> None:
        self.share(".raetsalt.signal").update(stop=True, signum=15)


def pump(flows: list[Flow], done: Callable[[], bool], timeout: float = 5.0) -> None:
    """Step every flow in turn until ``done()``; between rounds wait (at most a few ms)
    on the flows' selectors, so a datagram ends the wait."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not done within {timeout} s: {[(f.frame, dict(f.status)) for f in flows]}"
            )
        for flow in flows:
            if flow.running:
                flow.step()
        for flow in flows:
            if flow.running:
                flow.sk.waiter.wait(0.002)


def serving_master(root: Path, **settings: Any) -> tuple[Flow, dict[str, Any]]:
    """A master flow on a free port (raet_port 0), stepped until it serves; and its
    options, with the port it bound as ``raet_port``."""
    opts = _opts(root, "master", raet_port=0, id="flomaster", **settings)
    master = Flow("master", opts)
    pump([master], lambda: master.frame == "serving")
    opts["raet_port"] = master.share(".raetsalt.node").value.stack.address[1]
    return master, opts


def minion_flow(root: Path, minion_id: str, master_opts: dict[str, Any]) -> Flow:
    """A minion flow of id ``minion_id`` whose master is the one of ``master_opts``."""
    master = f"127.0.0.1:{master_opts['raet_port']}"
    return Flow("minion", _opts(root, "minion", raet_port=0, id=minion_id, master=master))


def test_master_and_minion_flows_connect_and_stop_cleanly(short_dir: Path) -> None:
    master, mopts = serving_master(short_dir / "ma", auto_accept="true")
    minion = minion_flow(short_dir / "mi", "flominion", mopts)
    flows = [master, minion]
    try:
        pump(flows, lambda: minion.frame == "connected")
        assert minion.status["connected"] and minion.status["state"] == "connected"
        assert master.frame == "serving" and master.status["ready"]
        node = minion.share(".raetsalt.node").value
        road_sock = node.stack.sock
        # The node, and the job service (its job pipes).
        assert minion.sk.waiter.watched == (node, minion.share(".raetsalt.jobs").value)
        # SIGTERM as the daemon's handler reports it: both flows close their nodes and end.
        minion.signal_stop()
        master.signal_stop()
        pump(flows, lambda: not master.running and not minion.running)
        assert minion.share(".raetsalt.node").value is None
        assert road_sock.fileno() == -1  # the exit action closed the socket
        assert not os.path.exists(node.manor_path)
        assert (minion.exit_code, master.exit_code) == (0, 0)
        assert minion.visited[-1] == "stopping" and master.visited[-1] == "stopping"
        assert minion.visited[:3] == ["open", "connect", "connecting"]
    finally:
        for flow in flows:
            flow.sk.close()


def test_pending_minion_waits_then_connects_when_accepted_by_the_key_tool(
    short_dir: Path,
) -> None:
    master, mopts = serving_master(short_dir / "ma")
    minion = minion_flow(short_dir / "mi", "waiter1", mopts)
    flows = [master, minion]
    try:
        pump(flows, lambda: minion.frame == "pending")
        assert minion.status["pending"] and not minion.status["connected"]
        assert master.share(".raetsalt.node").value.stack.writer.flush()
        keep = FileKeep(keep_dir(mopts))
        assert [(r.role, r.acceptance) for r in keep.list_roles()] == [
            ("waiter1", Acceptance.PENDING)
        ]
        # raetsalt-key -a, as a command to the running master (another thread here: the
        # tool waits for the master's answer while the flows run).
        result: list[int] = []
        tool = threading.Thread(
            target=lambda: result.append(key_main(["-c", str(short_dir / "ma"), "-a",
                                                   "waiter1", "-y"]))
        )
        tool.start()
        pump(flows, lambda: minion.frame == "connected" and not tool.is_alive(), timeout=5.0)
        tool.join()
        assert result == [0]
        assert [(r.role, r.acceptance) for r in keep.list_roles()] == [
            ("waiter1", Acceptance.ACCEPTED)
        ]
    finally:
        for flow in flows:
            flow.sk.close()


def test_minion_with_a_denied_key_at_first_contact_keeps_trying(short_dir: Path) -> None:
    """The twin never met this master: its reject is unsigned and proves nothing, so
    the flow does not end on it (a signed one does: test_key_commands)."""
    master, mopts = serving_master(short_dir / "ma", auto_accept="true")
    first = minion_flow(short_dir / "m1", "twin", mopts)
    flows = [master, first]
    try:
        pump(flows, lambda: first.frame == "connected")
        # Same id, new keys (its own pki_dir): Salt's "denied".
        second = minion_flow(short_dir / "m2", "twin", mopts)
        flows.append(second)

        def rejected_unsigned() -> bool:
            node = second.share(".raetsalt.node").value
            return node is not None and node.stack.road.stats["join_reject_unauthenticated"] > 0

        pump(flows, rejected_unsigned)
        assert second.running and "rejected" not in second.visited
        assert master.share(".raetsalt.node").value.stack.writer.flush()
        assert list(FileKeep(keep_dir(mopts)).list_denied()) == ["twin"]
        assert first.frame == "connected"  # the accepted one is untouched
    finally:
        for flow in flows:
            flow.sk.close()


def test_a_port_in_use_fails_the_flow_with_exit_1(short_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        master = Flow("master", _opts(short_dir / "ma", "master", raet_port=port))
        try:
            pump([master], lambda: not master.running)
            assert master.exit_code == 1 and master.visited == ["open", "failed"]
            assert "address already in use" in master.status["failure"]
        finally:
            master.sk.close()
