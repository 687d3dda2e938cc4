"""Acceptance: raetsalt's RoadStack and raetsalt-road against a REAL raet 0.6.8 peer.

The raet side runs in a subprocess (tests/raetpeer.py via raetpeer_client).  Our stack
runs in a helper thread of this process that owns it completely (commands are handed to
that thread), so waiting on the raet peer here never stalls our side of the protocol.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from raetpeer_client import RaetPeer, raet_available

from raetsalt.drivers.udp import RoadStack, format_ha
from raetsalt.engine.events import (
    Allowed,
    Event,
    Joined,
    JoinPending,
    MessageDelivered,
    MessageReceived,
)
from raetsalt.keep.policy import Action
from raetsalt.keep.records import Acceptance, AutoMode, KeyRef, KeyState
from raetsalt.keep.store import FileKeep

pytestmark = pytest.mark.interop

Start = Callable[..., RaetPeer]
ROAD = [sys.executable, "-m", "raetsalt.cli.road"]


def sized_body(size: int, tag: str) -> dict[str, str]:
    """A JSON object whose compact encoding is exactly ``size`` bytes, non-repeating."""
    overhead = len(json.dumps({"tag": tag, "fill": ""}, separators=(",", ":")))
    fill = "".join(chr(0x41 + (i * 7 + i // 26) % 26) for i in range(size - overhead))
    body = {"tag": tag, "fill": fill}
    assert len(json.dumps(body, separators=(",", ":"))) == size
    return body


class Ours:
    """Our RoadStack serviced by its own thread; the test talks to it through ``call``."""

    def __init__(self, stack: RoadStack) -> None:
        self.stack = stack
        self._calls: queue.Queue[tuple[Callable[[RoadStack], Any], queue.Queue[Any]]] = (
            queue.Queue()
        )
        self._events: queue.Queue[Event] = queue.Queue()
        self._backlog: list[Event] = []
        self.seen: list[Event] = []
        self._running = True
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ours", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while self._running:
                # Short wake-ups so handed-in commands run promptly.
                for event in self.stack.service(0.005):
                    self._events.put(event)
                while not self._calls.empty():
                    fn, reply = self._calls.get()
                    try:
                        reply.put((True, fn(self.stack)))
                    except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                        reply.put((False, exc))
        except BaseException as exc:  # noqa: BLE001
            self._error = exc

    def call(self, fn: Callable[[RoadStack], Any]) -> Any:
        reply: queue.Queue[Any] = queue.Queue()
        self._calls.put((fn, reply))
        ok, value = reply.get(timeout=10)
        if not ok:
            raise value
        return value

    def wait(self, kind: type, timeout: float = 10.0, **match: Any) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self._backlog):
                if isinstance(event, kind) and all(
                    getattr(event, k) == v for k, v in match.items()
                ):
                    del self._backlog[i]
                    return event
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._error is not None:
                raise AssertionError(
                    f"no {kind.__name__} {match} within {timeout} s "
                    f"(error={self._error!r}); backlog={self._backlog[-10:]}"
                )
            try:
                event = self._events.get(timeout=remaining)
            except queue.Empty:
                continue
            self.seen.append(event)
            self._backlog.append(event)

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=5)
        self.stack.close()
        assert self._error is None, self._error
        assert self.stack.stats["engine_error"] == 0


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[Callable[..., Ours]]:
    made: list[Ours] = []

    def start(name: str = "salt", **kwargs: Any) -> Ours:
        stack = RoadStack(tmp_path / f"ours-{name}", ("127.0.0.1", 0), name=name, **kwargs)
        stack.open()
        made.append(Ours(stack))
        return made[-1]

    yield start
    for one in made:
        one.close()


def exchange_both_ways(side: Ours, peer: RaetPeer, our_name: str, peer_name: str) -> None:
    small, large = sized_body(100, "small"), sized_body(64 * 1024, "large")
    # raet -> ours
    peer.send(our_name, small)
    peer.send(our_name, large)
    got = [side.wait(MessageReceived, remote=peer_name).body for _ in range(2)]
    assert sorted(got, key=lambda b: len(b["fill"])) == [small, large]
    peer.wait_idle()
    # ours -> raet (one message in flight at a time: in order)
    mids = [side.call(lambda s, b=b: s.send(peer_name, b)) for b in (small, large)]
    for mid in mids:
        side.wait(MessageDelivered, mid=mid)
    received = [m["body"] for m in peer.wait_messages(2, remote=our_name)]
    assert received == [small, large]
    assert peer.stats()["stats"].get("message_segment_rx", 0) > 60  # it was segmented
    assert not peer.errors()


def test_raet_joins_ours_and_both_sides_allow(raet_peer: Start, ours) -> None:
    side = ours("salt", main=True, auto=AutoMode.ONCE)
    minion = raet_peer("minion", auto="once")
    minion.join(side.stack.address)
    minion.wait_for("joined", remote="salt")
    side.wait(Joined, remote="minion", initiator=False)
    # raet initiates the allow
    minion.allow("salt")
    minion.wait_for("allowed", remote="salt")
    side.wait(Allowed, remote="minion")
    exchange_both_ways(side, minion, "salt", "minion")
    # now we initiate an allow: a fresh session, and messages still pass
    side.call(lambda s: s.allow(s.road.remote("minion").uid))
    side.wait(Allowed, remote="minion")
    mid = side.call(lambda s: s.send("minion", {"after": "reallow"}))
    side.wait(MessageDelivered, mid=mid)
    assert minion.wait_messages(1, remote="salt")[0]["body"] == {"after": "reallow"}
    # keys recorded in our keep are the raet peer's
    assert side.stack.writer is not None and side.stack.writer.flush()
    role = FileKeep(side.stack.keep.dirpath).load_role("minion")  # type: ignore[union-attr]
    assert role is not None and role.acceptance is Acceptance.ACCEPTED
    assert (role.verhex, role.pubhex) == (minion.verhex, minion.pubhex)


def test_ours_joins_raet_and_both_sides_allow(raet_peer: Start, ours) -> None:
    main = raet_peer("master", main=True, auto="once")
    side = ours("salt", auto=AutoMode.ONCE)
    uid = side.call(lambda s: s.connect(main.ha))
    side.wait(Joined, remote="master", initiator=True)
    main.wait_for("joined", remote="salt")
    side.wait(Allowed, remote="master")  # we initiated the allow (connect does)
    main.wait_for("allowed", remote="salt")
    exchange_both_ways(side, main, "salt", "master")
    # raet initiates an allow with us
    main.allow("salt")
    main.wait_for("allowed", remote="salt")
    side.wait(Allowed, remote="master")
    mid = side.call(lambda s: s.send(uid, {"after": "raet-allow"}))
    side.wait(MessageDelivered, mid=mid)
    assert main.wait_messages(1, remote="salt")[0]["body"] == {"after": "raet-allow"}
    main.send("salt", {"back": 1})
    assert side.wait(MessageReceived, remote="master").body == {"back": 1}


def test_raet_key_pending_in_our_keep_until_accepted(raet_peer: Start, ours) -> None:
    side = ours("salt", main=True, auto=AutoMode.NEVER)
    keep = FileKeep(side.stack.keep.dirpath)  # type: ignore[union-attr]
    minion = raet_peer("minion", auto="once")
    minion.join(side.stack.address)
    pending = side.wait(JoinPending, remote="minion", here=True)
    assert pending.role == "minion"
    minion.wait_for("join_pended", ha=list(side.stack.address))
    side.call(lambda s: s.writer.flush())
    role = keep.load_role("minion")
    assert role is not None and role.acceptance is Acceptance.PENDING
    assert (role.verhex, role.pubhex) == (minion.verhex, minion.pubhex)
    assert not any(isinstance(e, Joined) for e in side.seen)

    # The operator's decision, as a command to the running stack; no restart of either side.
    ref = KeyRef("minion", KeyState.PENDING, role.verhex, role.pubhex)
    assert side.call(lambda s: s.change_key(Action.ACCEPT, ref)) is not None
    minion.wait_for("joined", remote="salt", timeout=8)
    side.wait(Joined, remote="minion")
    minion.allow("salt")
    side.wait(Allowed, remote="minion")
    minion.send("salt", {"accepted": True})
    assert side.wait(MessageReceived, remote="minion").body == {"accepted": True}


def test_road_cli_send_and_ping_against_raet(raet_peer: Start, tmp_path: Path) -> None:
    main = raet_peer("master", main=True, auto="once", echo=True)
    to = format_ha(main.ha)
    keep = tmp_path / "cli"
    body = sized_body(3000, "cli")
    done = subprocess.run(
        [*ROAD, "send", "--to", to, "--keep", str(keep), "--name", "cli", "--wait",
         json.dumps(body)],
        capture_output=True, text=True, timeout=20,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"from": "master", "body": body}
    assert main.wait_messages(1, remote="cli")[0]["body"] == body
    # a fresh temporary identity each run: a new estate for raet
    pinged = subprocess.run([*ROAD, "ping", "--to", to, "--count", "2", "--interval", "0.05"],
                            capture_output=True, text=True, timeout=20)
    assert pinged.returncode == 0, pinged.stderr
    assert len(re.findall(r"alive from master .* time=[0-9.]+ ms", pinged.stdout)) == 2
    assert not main.errors()


def test_road_cli_pending_on_raet(raet_peer: Start) -> None:
    main = raet_peer("master", main=True, auto="never", manage_every=0)
    done = subprocess.run(
        [*ROAD, "send", "--to", format_ha(main.ha), "--timeout", "5", '{"a": 1}'],
        capture_output=True, text=True, timeout=20,
    )
    assert done.returncode == 2, done.stderr
    assert f"key pending on {format_ha(main.ha)}: accept it there" in done.stderr


def test_raet_sends_to_road_cli_listener(raet_peer: Start, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*ROAD, "listen", "--ha", "127.0.0.1:0", "--keep", str(tmp_path / "listener"),
         "--name", "listener", "--auto-accept", "--echo"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        found = re.search(r"listening on 127\.0\.0\.1:(\d+)", proc.stderr.readline())
        assert found
        minion = raet_peer("minion", auto="once")
        minion.join(("127.0.0.1", int(found.group(1))))
        minion.wait_for("joined", remote="listener")
        minion.allow("listener")
        minion.wait_for("allowed", remote="listener")
        body = sized_body(64 * 1024, "to-cli")
        minion.send("listener", body)
        assert json.loads(proc.stdout.readline()) == {"from": "minion", "body": body}
        echoed = minion.wait_messages(1, remote="listener")[0]["body"]
        assert echoed == body
        assert not minion.errors()
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0


def test_restarted_raet_minion_rejoins_promptly(ours, tmp_path: Path) -> None:
    """raet restarts transaction ids at 1, so a restarted minion's join request repeats
    the (uid, tid) of its previous, completed join."""
    if not raet_available():
        pytest.skip("raet 0.6.8 / libnacl / ioflo not installed")
    side = ours("salt", main=True, auto=AutoMode.ONCE)
    first = RaetPeer("minion", tmp_path / "minion-keep", auto="once")
    with first:
        first.join(side.stack.address)
        first.wait_for("joined", remote="salt")
        side.wait(Joined, remote="minion")
    with RaetPeer("minion", tmp_path / "minion-keep", auto="once") as second:  # same keep
        second.command("join", remote="salt")
        second.wait_for("joined", remote="salt", timeout=3)


def test_raet_peer_gets_the_raet_profile_although_we_offer_native(raet_peer: Start, ours) -> None:
    side = ours("salt", main=True, auto=AutoMode.ONCE)
    assert side.stack.road.config.native  # we offer the native profile ...
    minion = raet_peer("minion", auto="once")
    minion.join(side.stack.address)
    minion.wait_for("joined", remote="salt")
    minion.allow("salt")
    minion.wait_for("allowed", remote="salt")
    # ... but a raet peer never answers the offer, so it gets exact raet packets.
    assert side.wait(Allowed, remote="minion").profile == "raet"
    mid = side.call(lambda s: s.send("minion", {"format": "raet"}))
    side.wait(MessageDelivered, mid=mid)
    assert minion.wait_messages(1, remote="salt")[0]["body"] == {"format": "raet"}
    assert not minion.errors()


def test_one_mebibyte_both_ways_with_raet(raet_peer: Start, ours) -> None:
    """Our pipelined sender (wf every 16th segment, a window in flight) against raet's
    receiver, and raet's one-burst sender against our lazily verifying receiver."""
    side = ours("salt", main=True, auto=AutoMode.ONCE)
    minion = raet_peer("minion", auto="once")
    minion.join(side.stack.address)
    minion.wait_for("joined", remote="salt")
    minion.allow("salt")
    minion.wait_for("allowed", remote="salt")
    side.wait(Allowed, remote="minion")
    theirs, mine = sized_body(1 << 20, "from-raet"), sized_body(1 << 20, "from-us")
    minion.send("salt", theirs)
    assert side.wait(MessageReceived, remote="minion", timeout=60).body == theirs
    minion.wait_idle(timeout=60)
    mid = side.call(lambda s: s.send("minion", mine))
    side.wait(MessageDelivered, mid=mid, timeout=60)
    assert [m["body"] for m in minion.wait_messages(1, remote="salt", timeout=60)] == [mine]
    assert minion.stats()["stats"].get("message_segment_rx", 0) >= 1200
    assert not minion.errors()
    road = side.call(lambda s: dict(s.road.stats))
    assert road.get("drop_signature", 0) == 0


def test_a_connected_minion_joins_raet_and_rejoins_after_a_restart(
    raet_peer: Start, tmp_path: Path
) -> None:
    """Our minion as a daemon runs it by default (its socket connected to the master,
    nothing else taken) against a raet 0.6.8 master; restarted on its port (raet_port
    stays put) it is known again: raet's immutable road refuses a known estate whose
    address changed."""
    main = raet_peer("master", main=True, auto="once")
    keep = tmp_path / "minion-keep"
    first = Ours(RoadStack(keep, ("127.0.0.1", 0), name="minion", accept="connected",
                           auto=AutoMode.ONCE).open())
    port = first.stack.address[1]
    try:
        first.call(lambda s: s.connect(main.ha))
        first.wait(Allowed, remote="master")
        main.wait_for("allowed", remote="minion")
        assert first.call(lambda s: s.sock.getpeername()) == tuple(main.ha)
        exchange_both_ways(first, main, "minion", "master")
    finally:
        first.close()
    again = Ours(RoadStack(keep, ("127.0.0.1", port), name="minion", accept="connected",
                           auto=AutoMode.ONCE).open())
    try:
        uid = again.call(lambda s: s.connect(main.ha))
        again.wait(Allowed, remote="master")
        mid = again.call(lambda s: s.send(uid, {"after": "restart"}))
        again.wait(MessageDelivered, mid=mid)
        assert main.wait_messages(1, remote="minion")[-1]["body"] == {"after": "restart"}
        assert not main.errors()
    finally:
        again.close()
