"""MinionJobs decisions, Salt's return for one job (execute) and the forking executor."""

from __future__ import annotations

import os
import selectors
import signal
import time
from typing import Any

import pytest

from raetsalt import protocol as p
from raetsalt.daemon.executor import ForkExecutor
from raetsalt.drivers.jobchild import plain
from raetsalt.execution.loader import Context, Loader
from raetsalt.services.minion import (
    MAX_HELD,
    JobOutcome,
    JobSpec,
    MasterClock,
    MinionJobs,
    SaveGrains,
    Spawn,
    ToClient,
    ToMaster,
    execute,
)

GRAINS = {"os": "Ubuntu", "roles": ["web"], "ipv4": ["10.0.0.5"]}
WALL = 1_800_000_000.0
"""The minion's wall clock in these tests (Unix seconds)."""


@pytest.fixture(scope="module")
def loader() -> Loader:
    return Loader()


def pub(jid: str = "20260101000000000001", tgt: Any = "*", tgt_type: str = "glob",
        fun: str = "test.ping", arg: list[Any] | None = None) -> dict[str, Any]:
    return {"jid": jid, "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": arg or [],
            "delimiter": ":", "user": "root", "ret": ""}


@pytest.mark.parametrize(
    ("tgt", "tgt_type", "runs"),
    [
        ("web*", "glob", True),
        ("db*", "glob", False),
        ("os:ubuntu", "grain", True),
        ("web1 and not G@os:Ubuntu", "compound", False),
        ("10.0.0.0/24", "ipcidr", True),
        ("web1,web2", "list", True),
        ("( web1", "compound", False),  # malformed: ignored, not run
        ("x", "pillar", False),  # unsupported: ignored
    ],
)
def test_the_minion_rechecks_the_target(tgt: str, tgt_type: str, runs: bool) -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    actions = jobs.on_publish(pub(tgt=tgt, tgt_type=tgt_type), 0.0, WALL)
    assert bool(actions) is runs
    if runs:
        assert isinstance(actions[0], Spawn) and actions[0].spec.fun == "test.ping"


def test_a_duplicate_publication_runs_once_and_garbage_is_ignored() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    assert len(jobs.on_publish(pub(), 0.0, WALL)) == 1
    assert jobs.on_publish(pub(), 0.0, WALL) == []
    assert jobs.on_publish({"jid": 5, "fun": "test.ping"}, 0.0, WALL) == []
    assert jobs.on_publish({**pub("20260101000000000002"), "tgt": {"x": 1}}, 0.0, WALL) == []


def test_hello_on_connect_and_on_grain_changes() -> None:
    jobs = MinionJobs("web1", dict(GRAINS), estate="web1")
    first = jobs.on_connected()
    assert isinstance(first[0], ToMaster) and first[0].body["start"] is True
    assert p.share_of(first[0].body) == "minion_hello"
    assert jobs.on_connected()[0].body["start"] is False  # type: ignore[union-attr]
    assert jobs.set_grains(dict(GRAINS)) == []
    changed = jobs.set_grains({**GRAINS, "role": "x"})
    assert changed[0].body["grains"]["role"] == "x"  # type: ignore[union-attr]


def timed(jid: str = "20260101000000000001", *, ttl: float = 5.0, expires: float,
          fun: str = "cmd.run") -> dict[str, Any]:
    return {**pub(jid, fun=fun), "ttl": ttl, "expires": expires}


def connected(skew: float = 0.0, round_trip: float = 0.02) -> MinionJobs:
    """A minion whose master's clock is ``skew`` s ahead of its own, measured once."""
    jobs = MinionJobs("web1", dict(GRAINS))
    jobs.ask_clock(WALL)
    answer = {"time": WALL + round_trip / 2 + skew}
    asked = jobs.on_clock(answer, 0.0, WALL + round_trip)
    assert all(p.share_of(a.body) == "clock_req" for a in asked)  # type: ignore[union-attr]
    return jobs


@pytest.mark.parametrize("skew", [0.0, 3600.0, -3600.0])
def test_a_publication_in_time_runs_whatever_the_clock_skew(skew: float) -> None:
    jobs = connected(skew)
    # sent by the master 0.2 s ago with a 5 s deadline, on the master's clock
    actions = jobs.on_publish(timed(expires=WALL + skew + 4.8), 1.0, WALL + 0.2)
    assert [type(a) for a in actions] == [Spawn]


@pytest.mark.parametrize("skew", [0.0, 3600.0, -3600.0])
def test_a_publication_past_its_deadline_is_dropped_and_counted(
    skew: float, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = connected(skew)
    # as once seen: published with -t 5, delivered 29 s later
    actions = jobs.on_publish(timed(expires=WALL + skew - 24.0), 1.0, WALL)
    assert actions == [] and jobs.running == {}
    assert jobs.dropped == {"expired": 1}
    assert "job 20260101000000000001 (cmd.run) dropped, not run: its deadline passed 24.0 s" \
        in caplog.text
    # the next one in time still runs: the drop was about that job only
    assert jobs.on_publish(timed("20260101000000000002", expires=WALL + skew + 3), 1.0, WALL)


def test_the_clock_uncertainty_is_allowed_for() -> None:
    jobs = connected(round_trip=4.0)  # the master's clock is known to +-2 s only
    assert jobs.on_publish(timed(expires=WALL - 2.3), 0.0, WALL)  # within 2 + 0.5 s
    assert not jobs.on_publish(timed("20260101000000000002", expires=WALL - 2.6), 0.0, WALL)


def test_a_slow_answer_is_refined_with_a_few_more_questions() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    [ask] = jobs.ask_clock(WALL)
    assert isinstance(ask, ToMaster) and p.share_of(ask.body) == "clock_req"
    # the master took 3 s to answer (busy): the offset is known to 3 s only
    [again] = jobs.on_clock({"time": WALL + 0.01}, 0.0, WALL + 3.0)
    assert isinstance(again, ToMaster) and p.share_of(again.body) == "clock_req"
    assert jobs.clock is not None and jobs.clock.uncertainty == pytest.approx(3.0)
    # a quick second exchange narrows it (both ranges hold): good enough, no more questions
    assert jobs.on_clock({"time": WALL + 3.02}, 0.0, WALL + 3.04) == []
    assert jobs.clock.low == pytest.approx(-0.02, abs=1e-6)
    assert jobs.clock.high == pytest.approx(0.01, abs=1e-5)


def test_questions_per_connection_are_bounded() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    jobs.ask_clock(WALL)
    asked = 0
    for n in range(10):  # an always-slow master
        out = jobs.on_clock({"time": WALL + n * 10 + 1}, 0.0, WALL + n * 10 + 2)
        asked += len(out)
        if not out:
            break
    assert asked == 3


def test_old_bounds_widen_with_time_and_a_stepped_clock_is_taken_alone() -> None:
    clock = MasterClock.measured(WALL, WALL + 0.1, WALL + 100.05)
    assert clock.bounds(WALL + 0.1) == pytest.approx((99.95, 100.05))
    assert clock.bounds(WALL + 10_000.1) == pytest.approx((98.95, 101.05))
    later = clock.narrowed(MasterClock.measured(WALL + 50, WALL + 50.5, WALL + 150.4))
    assert (later.low, later.high) == pytest.approx((99.95, 100.05), abs=0.01)
    stepped = clock.narrowed(MasterClock.measured(WALL + 60, WALL + 60.1, WALL + 60.05))
    assert (stepped.low, stepped.high) == pytest.approx((-0.05, 0.05))


def test_a_publication_before_the_masters_clock_is_known_waits_for_it() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    jobs.ask_clock(WALL)
    skew = 1000.0
    stale = timed("20260101000000000001", expires=WALL + skew - 10.0)  # queued 15 s ago
    fresh = timed("20260101000000000002", expires=WALL + skew + 4.0)
    assert jobs.on_publish(stale, 1.0, WALL) == []
    assert jobs.on_publish(fresh, 1.0, WALL) == []
    assert jobs.on_publish(fresh, 1.0, WALL) == []  # held once
    assert jobs.get_timer() == 6.0  # received at 1.0, waits at most min(ttl, 5 s)
    actions = jobs.on_clock({"time": WALL + skew + 0.05}, 1.1, WALL + 0.1)
    assert [a.spec.jid for a in actions if isinstance(a, Spawn)] == ["20260101000000000002"]
    assert jobs.dropped == {"expired": 1}
    assert jobs.get_timer() == pytest.approx(1.1 + 2.5)  # the running job's first beat


def test_without_an_answer_held_jobs_are_judged_by_the_minions_clock() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    jobs.ask_clock(WALL)
    jobs.on_publish(timed("20260101000000000001", ttl=2.0, expires=WALL + 1.5), 10.0, WALL)
    jobs.on_publish(timed("20260101000000000002", ttl=60.0, expires=WALL + 50), 10.0, WALL)
    jobs.on_publish(timed("20260101000000000003", ttl=9.0, expires=WALL - 1), 10.0, WALL)
    assert jobs.get_timer() == 12.0
    assert jobs.handle_timer(11.9, WALL + 1.9) == []
    # the loop came late: the first one is past 2 s since it arrived, it never starts
    assert jobs.handle_timer(12.5, WALL + 2.5) == []
    assert jobs.dropped == {"ttl_ran_out": 1}
    assert jobs.get_timer() == 15.0
    [spawn] = jobs.handle_timer(15.0, WALL + 5.0)
    assert isinstance(spawn, Spawn) and spawn.spec.jid == "20260101000000000002"
    assert jobs.dropped == {"ttl_ran_out": 1, "expired": 1}  # the third, by our clock


def test_hostile_deadlines_and_acks() -> None:
    jobs = connected()
    for ttl, expires in ((0, WALL), (-1, WALL), (1e12, WALL), (float("nan"), WALL),
                         (5, float("inf")), (True, WALL), ("5", WALL)):
        # a deadline that is not one is no deadline (a master before deadlines): it runs
        body = {**pub(f"2026010100000000{len(jobs.running):04d}"), "ttl": ttl,
                "expires": expires}
        assert jobs.on_publish(body, 0.0, WALL), (ttl, expires)
    for time_ in (None, "now", float("nan"), True):
        assert jobs.on_clock({"time": time_}, 0.0, WALL) == []
    # an answer to no question changes nothing
    before = jobs.clock
    assert jobs.on_clock({"time": WALL + 1e6}, 0.0, WALL) == [] and jobs.clock == before
    assert jobs.on_publish(timed("20260101000000009999", expires=WALL + 1), 0.0, WALL)


def test_held_publications_are_bounded() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    jobs.ask_clock(WALL)
    for n in range(MAX_HELD + 10):
        jobs.on_publish(timed(f"2026010100000{n:07d}", expires=WALL + 5), 0.0, WALL)
    # the ones beyond the bound were judged at once by the minion's own clock
    assert len(jobs.running) == 10 and jobs.get_timer() == 2.5  # their first beats
    for jid in list(jobs.running):
        jobs.on_finished(jid, None)
    assert jobs.get_timer() == 5.0  # the held ones


def test_drop_lines_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    jobs = connected()
    for n in range(50):
        jobs.on_publish(timed(f"2026010100000{n:07d}", expires=WALL - 60), float(n) / 10, WALL)
    assert jobs.dropped == {"expired": 50}
    assert caplog.text.count("dropped, not run") == 1
    jobs.on_publish(timed("20260101000000099999", expires=WALL - 60), 100.0, WALL)
    assert "(49 more dropped since the last such line)" in caplog.text


def test_finished_publication_returns_to_the_master_and_applies_grains() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    jobs.on_connected()
    jobs.on_publish(pub(fun="grains.setval", arg=["color", "red"]), 0.0, WALL)
    jobs.on_started("20260101000000000001", 99)
    assert jobs.proc_list()[0]["pid"] == 99
    outcome = JobOutcome({"return": {"color": "red"}, "retcode": 0, "success": True},
                         grains_set={"color": "red"})
    actions = jobs.on_finished("20260101000000000001", outcome)
    assert SaveGrains({"color": "red"}) in actions
    hello = [a for a in actions if isinstance(a, ToMaster) and p.share_of(a.body) == "minion_hello"]
    assert hello and hello[0].body["grains"]["color"] == "red"
    ret = [a.body for a in actions if isinstance(a, ToMaster) and p.share_of(a.body) == "return"]
    assert ret[0]["jid"] == "20260101000000000001" and ret[0]["return"] == {"color": "red"}
    assert ret[0]["fun_args"] == ["color", "red"] and "id" not in ret[0]
    assert jobs.running == {}


def test_a_killed_job_returns_nothing_and_a_call_gets_its_answer() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    jobs.on_publish(pub(), 0.0, WALL)
    assert jobs.on_finished("20260101000000000001", None) == []
    [spawn] = jobs.on_call("cl1", {"req": "a", "fun": "test.echo", "arg": ["x"]},
                           "20260101000000000009")
    assert isinstance(spawn, Spawn) and spawn.spec.kind == "call"
    actions = jobs.on_finished("20260101000000000009", JobOutcome(
        {"return": "x", "retcode": 0, "success": True}))
    reply = next(a for a in actions if isinstance(a, ToClient))
    assert reply.yard == "cl1" and reply.body["ret"]["id"] == "web1"
    assert reply.body["ret"]["jid"] == "20260101000000000009"
    to_master = next(a for a in actions if isinstance(a, ToMaster))
    assert to_master.body["jid"] == "req"


def spec(fun: str, *args: Any, kind: str = "publish", **kwargs: Any) -> JobSpec:
    return JobSpec("20260101000000000001", fun, p.pack_args(list(args), kwargs), "*", "glob",
                   "root", "", kind=kind)


def run(loader: Loader, job: JobSpec) -> JobOutcome:
    ctx = Context(opts={"id": "web1"}, grains=dict(GRAINS), loader=loader, jid=job.jid)
    return execute(loader, job, ctx, 1234)


def test_execute_builds_salts_returns(loader: Loader) -> None:
    assert run(loader, spec("test.ping")).ret == {"return": True, "retcode": 0, "success": True}
    echoed = run(loader, spec("test.arg", 1, "two", x=[1, 2])).ret["return"]
    assert echoed["args"] == [1, "two"]
    assert echoed["kwargs"] == {
        "x": [1, 2], "__pub_user": "root", "__pub_arg": [1, "two", {"__kwarg__": True,
                                                                    "x": [1, 2]}],
        "__pub_fun": "test.arg", "__pub_jid": "20260101000000000001", "__pub_tgt": "*",
        "__pub_tgt_type": "glob", "__pub_ret": ""}
    called = run(loader, spec("test.kwarg", kind="call", a=1)).ret["return"]
    assert called == {"a": 1, "__pub_fun": "test.kwarg", "__pub_jid": "20260101000000000001",
                      "__pub_pid": 1234, "__pub_tgt": "salt-call"}
    failed = run(loader, spec("cmd.run", "exit 3"))
    assert failed.ret == {"return": "", "retcode": 3, "success": False}


def test_execute_failures(loader: Loader) -> None:
    boom = run(loader, spec("test.exception", "kaboom")).ret
    assert boom["retcode"] == 1 and boom["success"] is False and boom["out"] == "nested"
    assert boom["return"].startswith("The minion function caused an exception: Traceback")
    assert "Exception: kaboom" in boom["return"]
    missing = run(loader, spec("nope.nothing"))
    assert missing.missing_fun and missing.ret["return"] == "'nope.nothing' is not available."
    assert missing.ret["retcode"] == 1
    similar = run(loader, spec("test.pin")).ret["return"]
    assert similar["test.pin"] == "'test.pin' is not available." and "test.ping" in similar
    bad = run(loader, spec("test.echo")).ret
    assert bad["return"].startswith("Passed invalid arguments to test.echo")
    assert "unchanged" in bad["return"]  # the docstring follows, as in Salt


def test_plain_makes_values_sendable() -> None:
    assert plain({1: {b"x", b"y"}, "t": (1, object)}) == {
        "1": ["x", "y"], "t": [1, repr(object)]}


def _wait(executor: ForkExecutor, count: int, timeout: float = 5.0) -> list[Any]:
    selector = selectors.DefaultSelector()
    executor.register(selector)
    done: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(done) < count:
        assert time.monotonic() < deadline, done
        selector.select(min(0.5, executor.timeout() or 0.5))
        done.extend(executor.poll())
    executor.unregister(selector)
    return done


def test_fork_executor_runs_jobs_concurrently_and_kills() -> None:
    def job(arg: Any) -> dict[str, Any]:
        if arg == "sleep":
            time.sleep(30)
        return {"value": arg, "pid": os.getpid(), "set": {1}}

    executor = ForkExecutor(job)
    try:
        sleeper = executor.spawn("j1", "sleep")
        pid = executor.spawn("j2", "quick")
        [(jid, outcome)] = _wait(executor, 1)  # while j1 still sleeps (running below)
        assert jid == "j2" and outcome == {"value": "quick", "pid": pid, "set": [1]}
        assert executor.running() == {"j1": sleeper}
        assert executor.kill("j1", signal.SIGTERM)
        assert _wait(executor, 1) == [("j1", None)]
        assert executor.running() == {} and not executor.kill("j1")
    finally:
        executor.close()
