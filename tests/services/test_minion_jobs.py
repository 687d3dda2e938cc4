"""MinionJobs decisions, Salt's return for one job (execute) and the forking executor."""

from __future__ import annotations

import os
import selectors
import signal
import time
from typing import Any

import pytest

from raetsalt.execution.loader import Context, Loader
from raetsalt.services import protocol as p
from raetsalt.services.executor import ForkExecutor, plain
from raetsalt.services.minion import (
    JobOutcome,
    JobSpec,
    MinionJobs,
    SaveGrains,
    Spawn,
    ToClient,
    ToMaster,
    execute,
)

GRAINS = {"os": "Ubuntu", "roles": ["web"], "ipv4": ["10.0.0.5"]}


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
    actions = jobs.on_publish(pub(tgt=tgt, tgt_type=tgt_type))
    assert bool(actions) is runs
    if runs:
        assert isinstance(actions[0], Spawn) and actions[0].spec.fun == "test.ping"


def test_a_duplicate_publication_runs_once_and_garbage_is_ignored() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    assert len(jobs.on_publish(pub())) == 1
    assert jobs.on_publish(pub()) == []
    assert jobs.on_publish({"jid": 5, "fun": "test.ping"}) == []
    assert jobs.on_publish({**pub("20260101000000000002"), "tgt": {"x": 1}}) == []


def test_hello_on_connect_and_on_grain_changes() -> None:
    jobs = MinionJobs("web1", dict(GRAINS), estate="web1")
    first = jobs.on_connected()
    assert isinstance(first[0], ToMaster) and first[0].body["start"] is True
    assert p.share_of(first[0].body) == "minion_hello"
    assert jobs.on_connected()[0].body["start"] is False  # type: ignore[union-attr]
    assert jobs.set_grains(dict(GRAINS)) == []
    changed = jobs.set_grains({**GRAINS, "role": "x"})
    assert changed[0].body["grains"]["role"] == "x"  # type: ignore[union-attr]


def test_finished_publication_returns_to_the_master_and_applies_grains() -> None:
    jobs = MinionJobs("web1", dict(GRAINS))
    jobs.on_connected()
    jobs.on_publish(pub(fun="grains.setval", arg=["color", "red"]))
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
    jobs.on_publish(pub())
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
        started = time.monotonic()
        pid = executor.spawn("j2", "quick")
        [(jid, outcome)] = _wait(executor, 1)
        assert time.monotonic() - started < 2.0
        assert jid == "j2" and outcome == {"value": "quick", "pid": pid, "set": [1]}
        assert executor.running() == {"j1": sleeper}
        assert executor.kill("j1", signal.SIGTERM)
        assert _wait(executor, 1) == [("j1", None)]
        assert executor.running() == {} and not executor.kill("j1")
    finally:
        executor.close()
