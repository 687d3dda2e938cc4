"""The start event (``salt/minion/<id>/start``) built from the time the minion's daemon
started, as its first hello to each master tells it: every master fires the same event
(the cluster's reaction claims then see one event), and a start time a minion should not
have sent is bounded (the master's own time instead, counted)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt import protocol as p
from raetsalt.daemon.jobcache import JobCache
from raetsalt.services.master import (
    START_AHEAD,
    START_BEHIND,
    Fire,
    HelloDrop,
    MasterJobs,
)
from raetsalt.services.minion import MinionJobs, ToMaster
from raetsalt.services.ports import MinionState
from raetsalt.services.reactor import event_key
from raetsalt.timefmt import salt_stamp

NOW = datetime(2026, 11, 26, 22, 30, 0, 250000, tzinfo=UTC)
STARTED = NOW - timedelta(seconds=3.5)


class Roster:
    def accepted(self) -> list[str]:
        return ["web1"]

    def state(self, minion: str) -> MinionState:
        return MinionState(True, True, True, True, "127.0.0.1")


def a_master(tmp_path: Path, name: str, now: datetime) -> MasterJobs:
    return MasterJobs({}, JobCache(tmp_path / name), Roster(), estate=name,
                      utcnow=lambda: now)


def start_event(master: MasterJobs, body: dict[str, Any]) -> Fire:
    [fire] = master.on_hello("web1", {"grains": {"os": "Debian"}, "start": True, **body})
    assert isinstance(fire, Fire) and fire.tag == "salt/minion/web1/start"
    return fire


def first_hello(minion: MinionJobs, master: str) -> dict[str, Any]:
    [hello] = minion.on_connected(master)
    assert isinstance(hello, ToMaster) and hello.to == master
    return hello.body


def test_two_masters_given_the_same_hello_fire_the_same_start_event(tmp_path: Path) -> None:
    # The masters' clocks differ, and they hear the hello at different moments.
    ma = a_master(tmp_path, "ma", NOW)
    mb = a_master(tmp_path, "mb", NOW + timedelta(seconds=2.75))
    minion = MinionJobs("web1", {"os": "Debian"}, estate="web1",
                        started=STARTED.timestamp(), utc_offset=3600)
    to_a, to_b = first_hello(minion, "ma"), first_hello(minion, "mb")
    assert to_a["start"] is True and to_a["start_time"] == STARTED.timestamp()
    assert to_a["utc_offset"] == 3600
    a, b = start_event(ma, to_a), start_event(mb, to_b)
    assert a == b
    assert event_key(a.tag, a.data) == event_key(b.tag, b.data)
    # Salt's text: the minion's local time, as time.asctime() writes it there.
    assert a.data["data"] == "Minion web1 started at Thu Nov 26 23:29:56 2026"
    assert a.data["_stamp"] == salt_stamp(STARTED) == "2026-11-26T22:29:56.750000"
    assert not ma.stats and not mb.stats


def test_only_the_first_hello_to_each_master_says_the_minion_started() -> None:
    minion = MinionJobs("web1", {}, estate="web1", started=STARTED.timestamp())
    assert first_hello(minion, "ma")["start"] is True
    again = first_hello(minion, "ma")  # a reconnection: no new start, no start time
    assert again["start"] is False and "start_time" not in again
    assert first_hello(minion, "mb")["start"] is True  # another master (hot, failover)
    # Grain changes go to the master as before.
    [changed] = minion.set_grains({"os": "x"})
    assert isinstance(changed, ToMaster) and changed.body["start"] is False


def test_hellos_held_for_salts_grains_go_to_each_master_held() -> None:
    minion = MinionJobs("web1", {}, estate="web1", started=STARTED.timestamp())
    minion.hold_hello("ma")
    minion.hold_hello("mb")
    hellos = minion.release_hellos()
    assert [(h.to, h.body["start"]) for h in hellos if isinstance(h, ToMaster)] == [
        ("ma", True), ("mb", True)]
    [plain] = minion.release_hellos()  # none held: the one master's
    assert isinstance(plain, ToMaster) and plain.to is None and plain.body["start"] is True


def test_a_hello_without_a_start_time_gets_the_masters_time(tmp_path: Path) -> None:
    master = a_master(tmp_path, "ma", NOW)
    fire = start_event(master, {})  # a minion from before start times
    assert fire.data["_stamp"] == salt_stamp(NOW)
    assert fire.data["data"] == f"Minion web1 started at {NOW.astimezone().ctime()}"
    assert not master.stats
    old = MinionJobs("web1", {}, estate="web1")  # no start time known: none sent
    body = first_hello(old, "ma")
    assert body["start"] is True and "start_time" not in body
    assert p.share_of(body) == "minion_hello"


@pytest.mark.parametrize("hostile", [
    (NOW + timedelta(seconds=START_AHEAD + 1)).timestamp(),  # the far future
    (NOW - timedelta(seconds=START_BEHIND + 1)).timestamp(),  # the far past
    0, -1e300, 1e300, 2**63 - 1, -(2**63), float("nan"), float("inf"), -float("inf"),
    True, "2026-11-26T22:29:56", b"\x00", [STARTED.timestamp()], {"t": 1}, None,
])
def test_a_hostile_start_time_gives_the_masters_time_and_is_counted(
        tmp_path: Path, hostile: Any, caplog: pytest.LogCaptureFixture) -> None:
    master = a_master(tmp_path, "ma", NOW)
    fire = start_event(master, {"start_time": hostile, "utc_offset": 3600})
    assert fire.data["_stamp"] == salt_stamp(NOW)
    assert fire.data["data"] == f"Minion web1 started at {NOW.astimezone().ctime()}"
    if hostile is None:  # the same as none sent
        assert not master.stats
    else:
        assert master.stats[HelloDrop.START_TIME] == 1
        assert "not believable" in caplog.text and "Traceback" not in caplog.text


def test_bad_start_time_lines_are_throttled(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    master = a_master(tmp_path, "ma", NOW)
    for _ in range(100):
        start_event(master, {"start_time": "soon"})
    assert master.stats[HelloDrop.START_TIME] == 100
    assert caplog.text.count("not believable") == 1


@pytest.mark.parametrize("offset", [10**9, -(18 * 3600 + 60), 30, 1.5, "+01:00", True,
                                    [3600]])
def test_a_bad_utc_offset_gives_utc_and_is_counted(tmp_path: Path, offset: Any) -> None:
    master = a_master(tmp_path, "ma", NOW)
    fire = start_event(master, {"start_time": STARTED.timestamp(), "utc_offset": offset})
    assert fire.data["data"] == "Minion web1 started at Thu Nov 26 22:29:56 2026"
    assert fire.data["_stamp"] == salt_stamp(STARTED)
    assert master.stats[HelloDrop.UTC_OFFSET] == 1 and not master.stats[HelloDrop.START_TIME]


@given(start=st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                       st.integers(min_value=-(2**64), max_value=2**64), st.text(max_size=5),
                       st.none(), st.booleans()),
       offset=st.one_of(st.integers(min_value=-(2**64), max_value=2**64),
                        st.floats(), st.none()))
def test_any_start_time_makes_a_start_event_within_bounds(start: Any, offset: Any) -> None:
    master = MasterJobs({}, _NullCache(), Roster(), estate="ma", utcnow=lambda: NOW)
    fire = start_event(master, {"start_time": start, "utc_offset": offset})
    stamp = datetime.fromisoformat(fire.data["_stamp"]).replace(tzinfo=UTC)
    assert NOW - timedelta(seconds=START_BEHIND) <= stamp
    assert stamp <= NOW + timedelta(seconds=START_AHEAD)
    assert fire.data["data"].startswith("Minion web1 started at ")


class _NullCache:
    """A job cache that keeps nothing (the start event needs none)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None
