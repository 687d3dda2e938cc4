"""``event_return``: the spool, a returner that fails for a while then works (nothing
lost, nothing reordered), a restart in the middle, and the same on real daemons with the
SQLite database locked by another process for a while."""

from __future__ import annotations

import sqlite3
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from daemons.helpers import make_world
from hypothesis import given, settings
from hypothesis import strategies as st

from raetsalt.config import load_node_config
from raetsalt.daemon.eventreturn import EventReturn, Spool, event_returners
from raetsalt.event import SaltEvent


def _opts(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"cachedir": str(tmp_path), "id": "m", "event_return_queue": 7, **extra}


def test_spool_reads_from_its_committed_position_across_segments(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("raetsalt.daemon.eventreturn.SEGMENT_BYTES", 200)
    spool = Spool(str(tmp_path / "s"), 1 << 20)
    for n in range(20):
        spool.append([(f"t/{n}", {"n": n})])
    events, position = spool.read(8)
    assert [e["data"]["n"] for e in events] == list(range(8))
    spool.commit(position)
    spool.close()
    again = Spool(str(tmp_path / "s"), 1 << 20)  # a restart
    events, position = again.read(100)
    assert [e["data"]["n"] for e in events] == list(range(8, 20))
    again.commit(position)
    assert again.read(100)[0] == [] and again.size() == 0
    # a torn frame at the end (a crash mid-write) is not read, and what is written after
    # a restart is read whole
    again.append([("before", {"n": -1})])
    with open(again._path(again.write_segment), "ab") as handle:
        handle.write(b"\x00\x00\x01\x00abc")
    assert [e["tag"] for e in again.read(100)[0]] == ["before"]
    again.close()
    third = Spool(str(tmp_path / "s"), 1 << 20)
    third.append([("after", {"n": 1})])
    assert [e["tag"] for e in third.read(100)[0]] == ["before", "after"]


class Flaky:
    """A returner that refuses while ``down`` is set; tells when it has ``want`` events."""

    def __init__(self, want: int) -> None:
        self.down = threading.Event()
        self.got: list[dict[str, Any]] = []
        self.calls = 0
        self.failed = threading.Event()
        self.complete = threading.Event()
        self.want = want

    def __call__(self, events: list[dict[str, Any]]) -> None:
        self.calls += 1
        if self.down.is_set():
            self.failed.set()
            raise ConnectionError("database is down")
        self.got.extend(events)
        if len(self.got) >= self.want:
            self.complete.set()


def test_a_failing_returner_then_a_working_one_loses_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    flaky = Flaky(want=300)
    flaky.down.set()
    er = EventReturn(_opts(tmp_path), {"flaky": flaky})
    er.add([(f"x/{n}", {"n": n}) for n in range(100)])
    assert flaky.failed.wait(10)
    er.add([(f"x/{n}", {"n": n}) for n in range(100, 200)])
    er.close()  # a master restart while the database is down
    er = EventReturn(_opts(tmp_path), {"flaky": flaky})
    er.add([(f"x/{n}", {"n": n}) for n in range(200, 300)])
    flaky.down.clear()
    assert flaky.complete.wait(30)
    er.close()
    assert [e["data"]["n"] for e in flaky.got] == list(range(300))
    assert max(len(b) for b in [flaky.got]) and er.stats["returned"] == 300
    assert sum("returner flaky failed" in r.getMessage() for r in caplog.records) <= 2


def test_whitelist_blacklist_and_the_sqlite3_returner(tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    opts = _opts(tmp_path, event_return="sqlite3", sock_dir=str(tmp_path),
                 **{"sqlite3.database": str(db)},
                 event_return_whitelist=["keep/*"], event_return_blacklist=["keep/not*"])
    er = EventReturn(opts, event_returners(opts))
    er.add([("keep/a", {"v": 1}), ("drop/b", {}), ("keep/nothing", {}), ("keep/c", {"v": 2})])
    er.close()
    er = EventReturn(opts, event_returners(opts))  # what was spooled is sent on restart
    deadline = time.monotonic() + 30
    rows: list[Any] = []
    while len(rows) < 2 and time.monotonic() < deadline:
        if db.exists():
            with sqlite3.connect(db) as conn:
                rows = conn.execute("SELECT tag, data, master_id FROM salt_events").fetchall()
        time.sleep(0.02)  # polling the database for the rows
    er.close()
    assert rows == [("keep/a", '{"v": 1}', "m"), ("keep/c", '{"v": 2}', "m")]
    with pytest.raises(LookupError, match="no returner"):
        event_returners({**opts, "event_return": ["no_such_returner"]})


PHASE = 5000
"""Events fired before and after the restart: more than the sockets between the bus and
the automation process hold."""


@pytest.mark.integration
def test_a_database_outage_and_a_master_restart_lose_no_event() -> None:
    with make_world() as world:
        db = world.root / "events.db"
        conf = world.master_dir(f"event_return: sqlite3\nsqlite3.database: {db}\n"
                                "sqlite3.timeout: 0.05\nevent_return_whitelist: ['er/*']\n")
        sock_dir = load_node_config(conf, "master")["sock_dir"]
        # The database is unavailable: another process holds an exclusive lock on it.
        locker = sqlite3.connect(db, isolation_level=None)
        locker.execute("BEGIN EXCLUSIVE")
        master = world.start("master", conf)
        master.expect("event_return listening on the master's bus", timeout=30)
        bus = SaltEvent("master", sock_dir)
        for n in range(PHASE):
            assert bus.fire_event({"n": n}, f"er/{n}")
        master.expect("event_return: returner sqlite3 failed", timeout=30)
        # restarted during the outage, at once: what the bus still holds for the
        # automation process and what is in its socket reach the spool
        assert master.terminate() == 0
        master = world.start("master", conf)
        master.expect("event_return listening on the master's bus", timeout=30)
        bus = SaltEvent("master", sock_dir)
        for n in range(PHASE, 2 * PHASE):
            assert bus.fire_event({"n": n}, f"er/{n}")
        bus.destroy()
        locker.execute("ROLLBACK")  # the database is back
        locker.close()
        deadline = time.monotonic() + 60
        tags: list[str] = []
        while len(set(tags)) < 2 * PHASE and time.monotonic() < deadline:
            with sqlite3.connect(db) as conn:
                try:
                    tags = [t for (t,) in conn.execute("SELECT tag FROM salt_events")]
                except sqlite3.OperationalError:
                    tags = []
            time.sleep(0.05)  # polling the database for the rows
        assert sorted(set(tags), key=lambda t: int(t[3:])) == [f"er/{n}"
                                                               for n in range(2 * PHASE)]
        assert master.terminate() == 0


BURST = 30000
"""More events than an ordinary bus listener may have waiting (20,000)."""


def _master_with_event_return(world: Any, whitelist: str) -> tuple[Any, Path, Path, int]:
    """A master with event_return to SQLite for tags ``whitelist``: (the daemon, its
    config dir, the database, the automation process's pid)."""
    import re

    db = world.root / "events.db"
    conf = world.master_dir(f"event_return: sqlite3\nsqlite3.database: {db}\n"
                            f"event_return_whitelist: ['{whitelist}']\n")
    master = world.start("master", conf)
    line = master.expect("event_return listening on the master's bus", timeout=30)
    pid = int(re.search(r"\(pid (\d+)\)", line).group(1))  # type: ignore[union-attr]
    return master, conf, db, pid


def _stored(db: Path, want: int, sql: str = "SELECT COUNT(DISTINCT tag) FROM salt_events",
            timeout: float = 120.0) -> Any:
    """The first answer of ``sql`` that reaches ``want`` rows' worth (a count, or the rows
    of a listing), or the last one after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        got: Any = None
        if db.exists():
            with sqlite3.connect(db) as conn:
                try:
                    rows = conn.execute(sql).fetchall()
                    got = rows[0][0] if "COUNT" in sql else rows
                except sqlite3.OperationalError:
                    got = None
        size = got if isinstance(got, int) else len(got or [])
        if size >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)  # polling the database for the rows


BURST = 30000
"""More events than an ordinary bus listener may have waiting (20,000)."""


@pytest.mark.integration
def test_a_burst_while_the_automation_process_is_stopped_loses_no_event() -> None:
    import os
    import signal

    with make_world() as world:
        master, conf, db, pid = _master_with_event_return(world, "burst/*")
        os.kill(pid, signal.SIGSTOP)  # far behind: nothing of the burst is read meanwhile
        try:
            bus = SaltEvent("master", load_node_config(conf, "master")["sock_dir"])
            for n in range(BURST):
                assert bus.fire_event({"n": n}, f"burst/{n}")
            bus.destroy()
        finally:
            os.kill(pid, signal.SIGCONT)
        assert _stored(db, BURST) == BURST
        assert master.terminate() == 0
        assert not [line for line in master.drain() if "the bus dropped" in line]


_FRAMES = st.lists(st.one_of(st.binary(max_size=40), st.builds(
    lambda v: struct.pack(">I", len(v)) + v,
    st.one_of(st.binary(max_size=20), st.builds(msgpack.packb, st.integers(-(2**63), 2**63 - 1)),
              st.builds(msgpack.packb, st.lists(st.integers(0, 99), max_size=3))))),
    max_size=8)


@given(_FRAMES)
@settings(max_examples=80, deadline=None)
def test_a_corrupt_segment_never_raises(frames: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "000000000000.spool").write_bytes(b"".join(frames))
        spool = Spool(directory, 1 << 20)
        events, position = spool.read(50)
        assert all(isinstance(e["tag"], str) for e in events)
        spool.append([("ok", {})])
        spool.commit(position)
        assert "ok" in [e["tag"] for e in spool.read(100)[0]]
        spool.close()


@pytest.mark.integration
def test_the_automation_process_is_started_again_when_it_dies() -> None:
    import os
    import signal

    with make_world() as world:
        master, conf, db, pid = _master_with_event_return(world, "again/*")
        os.kill(pid, signal.SIGKILL)
        master.expect("the reactor/event_return process exited with -9; starting it again",
                      timeout=30)
        master.expect("event_return listening on the master's bus", timeout=30)
        bus = SaltEvent("master", load_node_config(conf, "master")["sock_dir"])
        assert bus.fire_event({"n": 1}, "again/1")
        bus.destroy()
        assert _stored(db, 1, "SELECT tag FROM salt_events", 30) == [("again/1",)]
        assert master.terminate() == 0
