"""Jobs still running: the minion's beats, the master passing them on, the client's
wait (``raetsalt.services.progress``), with a manual clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from services.test_master_jobs import USER, Clock, FakeRoster

from raetsalt import protocol as p
from raetsalt.cli._publish import Publication
from raetsalt.daemon.jobcache import JobCache
from raetsalt.protocol import ToClient
from raetsalt.services.master import MasterJobs
from raetsalt.services.minion import JobOutcome, MinionJobs, ToMaster
from raetsalt.services.progress import (
    BEAT_MAX,
    BEAT_MIN,
    MAX_BEAT_JIDS,
    Beats,
    alive_untrusted,
    beat_period,
    running_jids_untrusted,
)

JID = "20260101000000000001"
WALL = 1_800_000_000.0


def test_beat_period_is_half_the_wait_within_bounds() -> None:
    assert beat_period(5.0) == 2.5
    assert beat_period(0.1) == BEAT_MIN
    assert beat_period(3600.0) == BEAT_MAX
    assert beat_period(float("nan")) == BEAT_MAX and beat_period(-1.0) == BEAT_MAX


def test_beats_are_due_each_period_and_stop_when_the_job_ends() -> None:
    beats = Beats()
    assert beats.next_due() is None and beats.due(100.0) == []
    beats.started("a", 5.0, 0.0)
    beats.started("b", 60.0, 1.0)
    assert beats.next_due() == 2.5
    assert beats.due(2.4) == []
    assert beats.due(2.5) == [["a"]]
    assert beats.next_due() == 5.0
    assert beats.due(6.0) == [["a", "b"]]  # b: 1 + 5
    beats.finished("a")
    beats.finished("a")  # twice is harmless
    assert beats.due(100.0) == [["b"]]  # a long stall: one beat, not a burst
    assert beats.next_due() is not None and beats.next_due() > 100.0  # type: ignore[operator]


def test_many_jobs_go_in_several_messages() -> None:
    beats = Beats()
    for index in range(MAX_BEAT_JIDS + 3):
        beats.started(f"2026010100000000{index:04d}", 5.0, 0.0)
    groups = beats.due(10.0)
    assert [len(g) for g in groups] == [MAX_BEAT_JIDS, 3]


@given(st.dictionaries(st.text(max_size=5), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3))))
def test_hostile_bodies_give_only_well_formed_values(body: dict[str, Any]) -> None:
    for jid in running_jids_untrusted(body):
        assert isinstance(jid, str) and len(jid) == 20 and jid.isdigit()
    assert all(isinstance(m, str) for m in alive_untrusted(body))


def test_flooded_lists_are_cut() -> None:
    body = {"jids": [JID] * 10_000 + ["20260101000000000002"], "alive": ["m"] * 10_000}
    assert running_jids_untrusted(body) == [JID]  # each once, and none past the cap
    assert len(alive_untrusted(body)) == 512


def _started_minion(ttl: float) -> MinionJobs:
    jobs = MinionJobs("web1", {"id": "web1"})
    jobs.ask_clock(WALL)
    jobs.on_clock({"time": WALL}, 0.0, WALL)
    body = {"jid": JID, "fun": "test.sleep", "arg": [8], "tgt": "web1", "ttl": ttl,
            "expires": WALL + ttl}
    [spawn] = jobs.on_publish(body, 0.0, WALL)
    jobs.on_started(JID, 42)
    return jobs


def test_a_running_minion_tells_the_master_until_the_job_returns() -> None:
    jobs = _started_minion(5.0)
    assert jobs.get_timer() == 2.5
    [beat] = jobs.handle_timer(2.5, WALL + 2.5)
    assert isinstance(beat, ToMaster) and p.share_of(beat.body) == "running"
    assert beat.body["jids"] == [JID]
    assert jobs.handle_timer(3.0, WALL + 3.0) == []
    jobs.on_finished(JID, JobOutcome({"return": True, "retcode": 0, "success": True}))
    assert jobs.get_timer() is None
    assert jobs.handle_timer(10.0, WALL + 10.0) == []


def _master(tmp_path: Path) -> MasterJobs:
    return MasterJobs({"timeout": 5}, JobCache(tmp_path / "jobs"),
                      FakeRoster(["web1", "web2"]), estate="themaster", utcnow=Clock())


def _publish(master: MasterJobs) -> str:
    actions = master.on_publish(USER, "clyard", {"req": "r1", "tgt": "web*", "fun": "test.sleep",
                                                 "arg": [8], "timeout": 5}, 0.0)
    [ack] = [a.body for a in actions if isinstance(a, ToClient)]
    return str(ack["jid"])


def test_the_master_passes_beats_on_and_keeps_the_clients_interest(tmp_path: Path) -> None:
    master = _master(tmp_path)
    master.on_hello("web1", {"grains": {"id": "web1"}})
    master.on_hello("web2", {"grains": {"id": "web2"}})
    jid = _publish(master)
    first_expiry = master.get_timer()
    assert first_expiry is not None
    master.on_running("web1", {"jids": [jid, "20000101000000000000", "junk"]}, 30.0)
    master.on_running("intruder", {"jids": [jid]}, 30.0)  # not expected: ignored
    [alive] = master.answer_returns()
    assert isinstance(alive, ToClient) and alive.yard == "clyard"
    assert alive.body["req"] == "r1" and alive.body["jid"] == jid
    assert alive.body["alive"] == ["web1"] and alive.body["returns"] == []
    assert master.answer_returns() == []
    later = master.get_timer()
    assert later is not None and later > first_expiry  # the watch outlives its first time
    master.handle_timer(first_expiry)
    ret = {"jid": jid, "fun": "test.sleep", "fun_args": [8], "return": True, "retcode": 0}
    master.on_return("web1", ret)
    master.on_running("web1", {"jids": [jid]}, 31.0)  # after its return: not alive
    [sent] = master.answer_returns()
    assert p.job_returns(sent.body)[0][0] == "web1"  # type: ignore[union-attr]
    assert "alive" not in sent.body  # type: ignore[union-attr]


class FakeClient:
    """A lane client whose messages come from a script, with a manual clock."""

    def __init__(self, script: list[tuple[float, dict[str, Any]]], clock: list[float]) -> None:
        self.script = script
        self.clock = clock

    def receive(self, timeout: float | None) -> list[dict[str, Any]]:
        assert timeout is not None
        if self.script and self.script[0][0] <= self.clock[0] + timeout:
            at, body = self.script.pop(0)
            self.clock[0] = max(self.clock[0], at)
            return [body]
        self.clock[0] += timeout
        return []


def _ret(**fields: Any) -> dict[str, Any]:
    return p.lane_reply("m", "cl", p.SHARE_JOB_RET, req="r1", jid=JID, **fields)


def test_the_client_waits_while_a_minion_runs_and_gives_up_on_a_silent_one(
        monkeypatch: Any) -> None:
    clock = [0.0]
    monkeypatch.setattr("raetsalt.cli._publish.time.monotonic", lambda: clock[0])
    script = [(2.5, _ret(returns=[], alive=["web1", "web2"])),
              (5.0, _ret(returns=[], alive=["web1"])),
              (7.5, _ret(returns=[], alive=["web1"])),
              (8.0, _ret(returns=[["web1", {"return": True, "retcode": 0}]]))]
    client = FakeClient(script, clock)
    job = Publication(client, "r1", JID, ["web1", "web2"], set(), {"web1", "web2"})  # type: ignore[arg-type]
    got = list(job.returns(5.0, 5.0))
    assert got == [("web1", {"return": True, "retcode": 0})]
    # web2 last spoke at 2.5: given up 5 s later, after web1 returned at 8.0.
    assert clock[0] == 8.0
    # Without beats, the wait is -t.
    clock[0] = 0.0
    quiet = Publication(FakeClient([], clock), "r1", JID, ["web1"], set(), {"web1"})  # type: ignore[arg-type]
    assert list(quiet.returns(5.0, 5.0)) == [] and clock[0] == 5.0
