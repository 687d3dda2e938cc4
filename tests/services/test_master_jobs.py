"""MasterJobs without sockets: expected minions, the job cache, events, returns to the
publishing client, runners with Salt's return shapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from raetsalt import protocol as p
from raetsalt.daemon.cachewriter import QueuedJobCache
from raetsalt.daemon.datacache import MinionDataCache
from raetsalt.daemon.jobcache import JobCache
from raetsalt.protocol import Requester
from raetsalt.services.master import (
    Fire,
    MasterJobs,
    ReturnDrop,
    ToClient,
    ToMinion,
    minion_target,
)
from raetsalt.services.ports import MinionState

USER = Requester("user", "root", 0)
GRAINS = {
    "minion1": {"os": "Debian", "roles": ["web"], "ipv4": ["10.0.0.1"]},
    "minion2": {"os": "Ubuntu", "roles": ["db"], "ipv4": ["10.0.1.2"]},
    "minion3": {"os": "CentOS", "roles": ["web", "db"], "ipv4": ["10.0.0.3"]},
}


class FakeRoster:
    def __init__(self, ids: list[str]) -> None:
        self.ids = list(ids)
        self.states = {m: MinionState(True, True, True, True, "127.0.0.1") for m in ids}

    def accepted(self) -> list[str]:
        return list(self.ids)

    def state(self, minion: str) -> MinionState:
        return self.states.get(minion, MinionState())


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 11, 21, 4, 27, 25, 667286, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(microseconds=1)
        return self.t


@pytest.fixture
def roster() -> FakeRoster:
    return FakeRoster(sorted(GRAINS))


@pytest.fixture
def master(tmp_path: Path, roster: FakeRoster) -> MasterJobs:
    jobs = MasterJobs(
        {"timeout": 5, "nodegroups": {"webs": "G@roles:web", "two": ["minion1", "minion2"]}},
        JobCache(tmp_path / "jobs"),
        roster,
        estate="themaster",
        data_cache=MinionDataCache(tmp_path / "minions"),
        utcnow=Clock(),
    )
    for minion, grains in GRAINS.items():
        jobs.on_hello(minion, {"grains": grains, "start": False})
    return jobs


def publish(master: MasterJobs, tgt: Any, tgt_type: str = "glob", fun: str = "test.ping",
            arg: list[Any] | None = None, now: float = 0.0, **extra: Any) -> list[Any]:
    body = {"req": "r1", "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": arg or [],
            **extra}
    return master.on_publish(USER, "clyard", body, now)


def ack(actions: list[Any]) -> dict[str, Any]:
    acks = [a.body for a in actions if isinstance(a, ToClient) and p.share_of(a.body) == "pub_ack"]
    assert len(acks) == 1
    return acks[0]


@pytest.mark.parametrize(
    ("tgt", "tgt_type", "expected"),
    [
        ("*", "glob", ["minion1", "minion2", "minion3"]),
        ("minion[12]", "glob", ["minion1", "minion2"]),
        ("minion(1|3)", "pcre", ["minion1", "minion3"]),
        ("minion2,minion3", "list", ["minion2", "minion3"]),
        ("roles:web", "grain", ["minion1", "minion3"]),
        ("os:(deb|cent).*", "grain_pcre", ["minion1", "minion3"]),
        ("10.0.0.0/24", "ipcidr", ["minion1", "minion3"]),
        ("webs", "nodegroup", ["minion1", "minion3"]),
        ("minion* and not G@os:Ubuntu", "compound", ["minion1", "minion3"]),
        ("N@two and not minion1", "compound", ["minion2"]),
    ],
)
def test_expected_minions_per_target_type(
    master: MasterJobs, tgt: str, tgt_type: str, expected: list[str]
) -> None:
    actions = publish(master, tgt, tgt_type)
    reply = ack(actions)
    assert reply["minions"] == expected and reply["jid"]
    sent = sorted(a.minion for a in actions if isinstance(a, ToMinion))
    assert sent == expected
    load = master.cache.get_load(reply["jid"])
    assert load is not None and load["minions"] == expected and load["tgt"] == tgt


def test_publication_expands_nodegroups_and_keeps_salt_fields(master: MasterJobs) -> None:
    actions = publish(master, "N@webs or minion2", "compound", "test.arg",
                      p.pack_args([1], {"a": 2}))
    pub = next(a.body for a in actions if isinstance(a, ToMinion))
    assert pub["route"]["dst"][2] == "fun"
    assert pub["tgt_type"] == "compound" and "N@" not in pub["tgt"]
    assert pub["arg"] == [1, {"__kwarg__": True, "a": 2}]
    assert pub["user"] == "root" and pub["ret"] == ""
    new = next(a for a in actions if isinstance(a, Fire))
    assert new.tag == f"salt/job/{pub['jid']}/new"
    assert {"jid", "tgt", "tgt_type", "user", "fun", "arg", "minions", "missing"} <= set(new.data)


def test_unknown_grains_get_the_publication_but_are_not_expected(
    master: MasterJobs, roster: FakeRoster
) -> None:
    roster.ids.append("minion4")
    roster.states["minion4"] = MinionState(True, True, True, True)
    actions = publish(master, "roles:web", "grain")
    assert ack(actions)["minions"] == ["minion1", "minion3"]
    assert sorted(a.minion for a in actions if isinstance(a, ToMinion)) == [
        "minion1", "minion3", "minion4"]


def test_no_match_assigns_no_jid_and_preview_publishes_nothing(master: MasterJobs) -> None:
    reply = ack(publish(master, "nobody*"))
    assert reply["minions"] == [] and reply["jid"] == ""
    assert master.cache.jids() == []
    actions = publish(master, "minion1,minion2", "list", preview=True)
    assert actions == [a for a in actions if isinstance(a, ToClient)]
    assert ack(actions)["minions"] == ["minion1", "minion2"]
    assert master.cache.jids() == []


def test_bad_targets_are_errors_not_empty_matches(master: MasterJobs) -> None:
    for tgt, tgt_type in (("a and", "compound"), ("x", "pillar"), ("nope", "nodegroup")):
        reply = ack(publish(master, tgt, tgt_type))
        assert reply["error"].startswith("Invalid target"), reply


def test_list_target_reports_ids_without_keys_as_missing(master: MasterJobs) -> None:
    reply = ack(publish(master, "minion1,ghost", "list"))
    assert reply["minions"] == ["minion1"] and reply["missing"] == ["ghost"]


def test_not_connected_minions_are_named_and_get_no_job(
    master: MasterJobs, roster: FakeRoster
) -> None:
    roster.states["minion2"] = MinionState(True, True, True, False)  # allowed, not alive
    roster.states["minion3"] = MinionState(True, True, False, False)  # session down
    actions = publish(master, "*")
    assert ack(actions)["not_connected"] == ["minion2", "minion3"]
    # nothing is queued on the road for them: it would run when they come back
    assert [a.minion for a in actions if isinstance(a, ToMinion)] == ["minion1"]


def test_a_publication_carries_its_deadline(master: MasterJobs) -> None:
    actions = publish(master, "minion1", timeout=2.5)
    pub = next(a.body for a in actions if isinstance(a, ToMinion))
    assert pub["ttl"] == 2.5
    sent = master.utcnow().timestamp()
    assert sent - 0.01 < pub["expires"] - 2.5 <= sent
    default = next(a.body for a in publish(master, "minion1") if isinstance(a, ToMinion))
    assert default["ttl"] == 5.0  # the master's timeout
    huge = next(a.body for a in publish(master, "minion1", timeout=1e9)
                if isinstance(a, ToMinion))
    assert huge["ttl"] == p.MAX_JOB_TTL


def test_a_clock_req_is_answered_with_the_masters_clock(master: MasterJobs) -> None:
    [answer] = master.on_clock_req("minion2")
    assert isinstance(answer, ToMinion) and answer.minion == "minion2"
    assert p.share_of(answer.body) == "clock"
    assert answer.body["time"] == pytest.approx(master.utcnow().timestamp(), abs=0.01)


def test_returns_are_stored_fired_and_forwarded_with_the_road_id(master: MasterJobs) -> None:
    jid = ack(publish(master, "minion1,minion2", "list"))["jid"]
    body = {"jid": jid, "fun": "test.ping", "fun_args": [], "return": True, "retcode": 0,
            "success": True, "id": "forged"}
    actions = master.on_return("minion1", body)
    event = next(a for a in actions if isinstance(a, Fire))
    assert event.tag == f"salt/job/{jid}/ret/minion1"
    assert event.data["id"] == "minion1" and event.data["cmd"] == "_return"
    assert master.cache.get_returns(jid)["minion1"]["return"] is True
    # The client gets it with the next batch of returns.
    [fwd] = master.answer_returns()
    assert isinstance(fwd, ToClient)
    assert fwd.yard == "clyard" and fwd.body["req"] == "r1" and fwd.body["jid"] == jid
    assert p.job_returns(fwd.body) == [
        ("minion1", {"return": True, "retcode": 0, "success": True})]
    assert master.answer_returns() == []
    # Returns for jobs the master never published are dropped, and counted.
    assert master.on_return("minion1", {**body, "jid": "20000101000000000000"}) == []
    assert master.on_return("minion1", {**body, "jid": "../../etc"}) == []
    assert master.stats[ReturnDrop.UNKNOWN_JOB] == 2
    assert master.answer_returns() == []


def test_returns_go_in_batches_and_wait_while_the_client_is_behind(tmp_path: Path) -> None:
    many = [f"m{i:04d}" for i in range(1200)]
    # The master's own cache, not committed here: reads see what is queued.
    master = MasterJobs({"timeout": 5}, QueuedJobCache(tmp_path / "jobs", threaded=False),
                        FakeRoster(many), estate="themaster", utcnow=Clock())
    jid = ack(publish(master, ",".join(many), "list"))["jid"]
    body = {"jid": jid, "fun": "test.ping", "fun_args": [], "return": True}
    for minion in many[:1100]:
        master.on_return(minion, body)
    # The client is behind: nothing is sent, nothing is lost.
    assert master.answer_returns(lambda sink: False) == []
    assert master.returns_waiting()
    batches = master.answer_returns(lambda sink: sink.yard == "clyard")
    sent = [pair for action in batches for pair in p.job_returns(action.body)]
    assert [len(p.job_returns(a.body)) for a in batches] == [512, 512, 76]
    assert [m for m, _ in sent] == many[:1100]
    assert not master.returns_waiting()
    # A minion that returns twice is stored again but sent once; the rest follow.
    master.on_return(many[0], {**body, "return": False})
    assert master.stats[ReturnDrop.REPEATED] == 1
    assert master.cache.get_returns(jid)[many[0]]["return"] is False
    for minion in many[1100:]:
        master.on_return(minion, body)
    [last] = master.answer_returns()
    assert [m for m, _ in p.job_returns(last.body)] == many[1100:]
    # Every expected minion returned: the watch is gone, later returns go nowhere.
    master.on_return(many[5], body)
    assert master.answer_returns() == [] and not master.returns_waiting()
    # A client that went away with returns still waiting for it: nothing is sent.
    jid = ack(publish(master, ",".join(many), "list"))["jid"]
    master.on_return(many[0], {**body, "jid": jid})
    assert master.returns_waiting()
    master.forget_client("clyard")
    assert master.answer_returns() == [] and not master.returns_waiting()


def test_a_flood_of_returns_for_unknown_jobs_is_counted_and_sends_nothing(
        master: MasterJobs) -> None:
    body = {"fun": "test.ping", "fun_args": [], "return": "x" * 1000}
    for index in range(5000):
        assert master.on_return("minion1", {**body, "jid": f"2000010100000{index:07d}"}) == []
    for bad in ({"jid": 5}, {"jid": "1" * 10_000}, {"fun": "x"}, {**body, "jid": None}):
        assert master.on_return("minion1", bad) == []
    assert master.stats[ReturnDrop.UNKNOWN_JOB] == 5001
    assert master.stats[ReturnDrop.MALFORMED] == 3
    assert master.cache.jids() == [] and not master.returns_waiting()


def test_a_call_return_gets_a_jid_and_a_load(master: MasterJobs) -> None:
    actions = master.on_return("minion2", {"jid": "req", "fun": "test.echo", "fun_args": ["x"],
                                           "return": "x", "retcode": 0, "success": True})
    tag = next(a.tag for a in actions if isinstance(a, Fire))
    jid = tag.split("/")[2]
    assert master.cache.get_load(jid)["fun"] == "test.echo"  # type: ignore[index]


def test_hello_with_start_fires_the_start_event_and_grains_survive_restart(
    master: MasterJobs, tmp_path: Path, roster: FakeRoster
) -> None:
    actions = master.on_hello("minion1", {"grains": {"os": "Arch"}, "start": True})
    event = actions[0]
    assert isinstance(event, Fire) and event.tag == "salt/minion/minion1/start"
    assert event.data["data"].startswith("Minion minion1 started at ")
    again = MasterJobs({}, JobCache(tmp_path / "jobs"), roster,
                       data_cache=MinionDataCache(tmp_path / "minions"), utcnow=Clock())
    assert again.grains["minion1"] == {"os": "Arch"}


def test_a_reconnection_with_the_same_grains_writes_nothing(
    master: MasterJobs, tmp_path: Path, roster: FakeRoster
) -> None:
    class Counting(MinionDataCache):
        saved: list[str] = []

        def save(self, minion: str, grains: Any) -> None:
            self.saved.append(minion)
            super().save(minion, grains)

    cache = Counting(tmp_path / "minions")
    jobs = MasterJobs({}, JobCache(tmp_path / "jobs"), roster, data_cache=cache,
                      utcnow=Clock())
    jobs.on_hello("minion1", {"grains": {"os": "Arch", "cpus": [1, 2]}})
    kept = jobs.grains["minion1"]
    jobs.on_hello("minion1", {"grains": {"os": "Arch", "cpus": [1, 2]}, "start": True})
    assert cache.saved == ["minion1"] and jobs.grains["minion1"] is kept
    # After a restart the cached grains are the known ones: a reconnection writes nothing.
    again = MasterJobs({}, JobCache(tmp_path / "jobs"), roster, data_cache=cache,
                       utcnow=Clock())
    again.on_hello("minion1", {"grains": {"os": "Arch", "cpus": [1, 2]}})
    assert cache.saved == ["minion1"]
    again.on_hello("minion1", {"grains": {"os": "Debian", "cpus": [1, 2]}})
    assert cache.saved == ["minion1", "minion1"]
    assert again.grains["minion1"]["os"] == "Debian"
    assert MinionDataCache(tmp_path / "minions").load_all()["minion1"]["os"] == "Debian"


def run(master: MasterJobs, fun: str, *args: Any, now: float = 0.0, **kwargs: Any) -> Any:
    actions = master.on_runner(USER, "runyard", {"req": "q", "fun": fun,
                                                 "arg": p.pack_args(list(args), kwargs)}, now)
    replies = [a.body for a in actions if isinstance(a, ToClient)]
    if not replies:
        return actions
    assert len(replies) == 1 and p.share_of(replies[0]) == "run_ret"
    if "error" in replies[0]:
        raise RuntimeError(replies[0]["error"])
    return replies[0]["return"]


def test_manage_runners_follow_presence(master: MasterJobs, roster: FakeRoster) -> None:
    roster.states["minion2"] = MinionState(True, True, True, False, "10.0.1.2")
    assert run(master, "manage.up") == ["minion1", "minion3"]
    assert run(master, "manage.down") == ["minion2"]
    assert run(master, "manage.status") == {"up": ["minion1", "minion3"], "down": ["minion2"]}
    assert run(master, "manage.status", tgt="G@roles:db", tgt_type="compound") == {
        "up": ["minion3"], "down": ["minion2"]}
    assert run(master, "manage.present") == ["minion1", "minion3"]
    assert run(master, "manage.not_present") == ["minion2"]
    assert run(master, "manage.alived", show_ip=True) == {
        "minion1": "127.0.0.1", "minion3": "127.0.0.1"}
    assert run(master, "manage.allowed") == ["minion1", "minion2", "minion3"]
    with pytest.raises(RuntimeError, match="'manage.nope' is not available."):
        run(master, "manage.nope")


def test_jobs_runners_shapes(master: MasterJobs) -> None:
    jid = ack(publish(master, "minion1,minion2", "list", "test.arg", [1]))["jid"]
    master.on_return("minion1", {"jid": jid, "fun": "test.arg", "fun_args": [1],
                                 "return": {"args": [1]}, "retcode": 0, "success": True})
    listed = run(master, "jobs.list_jobs")
    assert listed == {jid: {"Function": "test.arg", "Arguments": [1],
                            "Target": "minion1,minion2", "Target-type": "list", "User": "root",
                            "StartTime": listed[jid]["StartTime"]}}
    assert listed[jid]["StartTime"].startswith("2026, Nov 21 04:27:25.")
    assert run(master, "jobs.list_jobs", search_function="cmd.*") == {}
    assert run(master, "jobs.lookup_jid", jid) == {"minion1": {"args": [1]}}
    assert run(master, "jobs.lookup_jid", jid, missing=True) == {
        "minion1": {"args": [1]}, "minion2": "Minion did not return"}
    job = run(master, "jobs.list_job", jid)
    assert job["Minions"] == ["minion1", "minion2"] and job["jid"] == jid
    assert job["Result"] == {"minion1": {"return": {"args": [1]}, "retcode": 0, "success": True}}
    printed = run(master, "jobs.print_job", jid)
    assert list(printed) == [jid] and printed[jid]["Result"] == job["Result"]
    assert run(master, "jobs.exit_success", jid) == {"minion1": True, "minion2": False}
    assert run(master, "jobs.lookup_jid", "20000101000000000000") == {}


def test_lookup_jid_uses_the_outputter_of_failed_returns(master: MasterJobs) -> None:
    jid = ack(publish(master, "minion1", "list", "test.exception"))["jid"]
    master.on_return("minion1", {"jid": jid, "fun": "test.exception", "fun_args": [],
                                 "return": "The minion function caused an exception: ...",
                                 "retcode": 1, "success": False, "out": "nested"})
    assert run(master, "jobs.lookup_jid", jid) == {
        "outputter": "nested",
        "data": {"minion1": "The minion function caused an exception: ..."}}


def test_jobs_active_asks_the_minions_that_are_up(master: MasterJobs, roster: FakeRoster) -> None:
    roster.states["minion3"] = MinionState(True, True, True, False)
    sleeping = ack(publish(master, "minion1", "list", "test.sleep", [10]))["jid"]
    actions = run(master, "jobs.active", now=1.0)
    asks = [a for a in actions if isinstance(a, ToMinion)]
    assert sorted(a.minion for a in asks) == ["minion1", "minion2"]
    ask_jid = asks[0].body["jid"]
    assert asks[0].body["fun"] == "saltutil.running"
    running = [{"jid": sleeping, "fun": "test.sleep", "arg": [10], "tgt": "minion1",
                "tgt_type": "list", "user": "root", "pid": 4242}]
    assert master.on_return("minion1", {"jid": ask_jid, "return": running}) == []
    done = master.on_return("minion2", {"jid": ask_jid, "return": []})
    reply = done[0].body  # type: ignore[union-attr]
    assert reply["return"] == {sleeping: {
        "Function": "test.sleep", "Arguments": [10], "Target": "minion1",
        "Target-type": "list", "User": "root", "StartTime": reply["return"][sleeping]["StartTime"],
        "Running": [{"minion1": 4242}], "Returned": []}}
    assert ask_jid not in master.cache.jids()


def test_jobs_active_answers_after_the_timeout(master: MasterJobs) -> None:
    run(master, "jobs.active", now=1.0)
    assert master.get_timer() == pytest.approx(6.0)
    actions = master.handle_timer(6.0)
    assert [a.body["return"] for a in actions if isinstance(a, ToClient)] == [{}]


def test_minion_target_expands_nested_nodegroups() -> None:
    groups = {"a": "minion1 or N@b", "b": ["minion2"]}
    tgt, tgt_type = minion_target("N@a and not x", "compound", groups)
    assert tgt_type == "compound" and "N@" not in tgt


def test_a_restricted_runner_runs_the_arguments_it_was_checked_with(
    tmp_path: Path, roster: FakeRoster
) -> None:
    """A ``k=v`` string is a keyword argument to the publisher_acl check, so it must be
    one to the runner too (it was a positional ``ext_source`` before)."""
    rule = {"fred": [{"@runner": [{"jobs.list_jobs": {"kwargs": {"search_function": "cmd"}}}]}]}
    jobs = MasterJobs({"timeout": 5, "publisher_acl": rule}, JobCache(tmp_path / "jobs"),
                      roster, estate="themaster", data_cache=MinionDataCache(tmp_path / "m"),
                      utcnow=Clock())
    ack(publish(jobs, "minion1", fun="test.ping"))
    fred = Requester("user", "fred", 1000)
    body = {"req": "q", "fun": "jobs.list_jobs", "arg": ["search_function=cmd.*"]}
    [reply] = [a.body for a in jobs.on_runner(fred, "y", body, 0.0) if isinstance(a, ToClient)]
    assert reply["return"] == {}  # filtered: the only job is test.ping
    body["arg"] = ["cmd.*"]
    [reply] = [a.body for a in jobs.on_runner(fred, "y", body, 0.0) if isinstance(a, ToClient)]
    assert reply["denied"] is True and "positional argument 1" in reply["error"]


def test_manage_versions_sorts_the_minions_as_salt_does(
        master: MasterJobs, roster: FakeRoster, monkeypatch: pytest.MonkeyPatch) -> None:
    from raetsalt.services import runners_more

    monkeypatch.setattr(runners_more, "master_version", lambda: "3008.4")
    roster.states["minion3"] = MinionState(True, True, True, False)
    actions = run(master, "manage.versions", now=1.0)
    asks = [a for a in actions if isinstance(a, ToMinion)]
    assert sorted(a.minion for a in asks) == ["minion1", "minion2"]
    assert asks[0].body["fun"] == "test.version"
    ask = asks[0].body["jid"]
    master.on_return("minion1", {"jid": ask, "return": "3007.1"})
    [done] = master.on_return("minion2", {"jid": ask, "return": "3008.4"})
    assert done.body["return"] == {  # type: ignore[union-attr]
        "Minion requires update": {"minion1": "3007.1"}, "Up to date": {"minion2": "3008.4"},
        "Master": "3008.4"}
    assert runners_more.version_key("3008.0rc1") < runners_more.version_key("3008.0")  # type: ignore[operator]
    assert runners_more.version_key("not a version") is None


def test_last_run_and_list_jobs_filter(master: MasterJobs) -> None:
    assert run(master, "jobs.last_run") is False
    first = ack(publish(master, "minion1", "list", "test.arg", [1]))["jid"]
    second = ack(publish(master, "minion2", "list", "cmd.run", ["id"]))["jid"]
    assert list(run(master, "jobs.last_run")) == [second]
    assert list(run(master, "jobs.last_run", function="test.*")) == [first]
    assert list(run(master, "jobs.list_jobs_filter", 1)) == [second]
    assert run(master, "jobs.master") == []


def test_a_batch_publishes_every_sub_batch_under_its_first_jid(master: MasterJobs) -> None:
    """Salt's batch: one job.  Only the client that started the batch adds to it."""
    first = ack(publish(master, ["minion1"], "list", batch=True))
    jid = first["jid"]
    returned = master.on_return("minion1", {"jid": jid, "fun": "test.ping", "return": True})
    assert returned and master.answer_returns()  # the first sub-batch is done
    actions = master.on_publish(USER, "clyard", {"req": "r2", "tgt": ["minion2", "minion3"],
                                                 "tgt_type": "list", "fun": "test.ping",
                                                 "arg": [], "jid": jid}, 1.0)
    assert ack(actions)["jid"] == jid
    assert sorted(a.minion for a in actions if isinstance(a, ToMinion)) == ["minion2",
                                                                            "minion3"]
    assert {a.body["jid"] for a in actions if isinstance(a, ToMinion)} == {jid}
    assert [a.tag for a in actions if isinstance(a, Fire)] == [f"salt/job/{jid}/new"]
    load = master.cache.get_load(jid)
    assert load is not None and load["minions"] == ["minion1", "minion2", "minion3"]
    master.on_return("minion3", {"jid": jid, "fun": "test.ping", "return": True})
    [answer] = master.answer_returns()
    assert isinstance(answer, ToClient) and answer.body["req"] == "r2"
    # Another client, a made-up jid, a job that is no batch: refused, nothing published.
    for yard, asked in (("otheryard", jid), ("clyard", "20261121042725667286"),
                        ("clyard", ack(publish(master, "minion1"))["jid"])):
        refused = master.on_publish(USER, yard, {"req": "r3", "tgt": ["minion1"],
                                                 "tgt_type": "list", "fun": "test.ping",
                                                 "arg": [], "jid": asked}, 2.0)
        assert "is no batch of this client's" in ack(refused)["error"]
        assert not [a for a in refused if isinstance(a, ToMinion)]
    alice = Requester("user", "alice", 1000)  # another user behind the same yard name
    refused = master.on_publish(alice, "clyard", {"req": "r5", "tgt": ["minion1"],
                                                  "tgt_type": "list", "fun": "test.ping",
                                                  "arg": [], "jid": jid}, 2.5)
    assert "is no batch of this client's" in ack(refused)["error"]
    master.forget_client("clyard")  # the client is gone: nobody may add to its batch
    refused = master.on_publish(USER, "clyard", {"req": "r4", "tgt": ["minion1"],
                                                 "tgt_type": "list", "fun": "test.ping",
                                                 "arg": [], "jid": jid}, 3.0)
    assert "error" in ack(refused)
