"""The master's Salt request service, sans-IO: what it serves, refuses, asks its workers
and answers, to whom."""

from __future__ import annotations

from typing import Any

import pytest

from raetsalt import protocol as p
from raetsalt.saltbridge.service import (
    MAX_INFLIGHT_PER_MINION,
    MAX_OVERRIDE_BYTES,
    MAX_PILLAR_BYTES,
    MAX_PILLAR_PER_MINION,
    RestartWorker,
    SaltRequestDrop,
    SaltRequests,
    ToWorker,
)
from raetsalt.services.master import ToMinion

OPTS = {"file_roots": {"base": ["/srv/salt"], "dev": ["/srv/dev"]},
        "pillar_roots": {"base": ["/srv/pillar"]}, "nodegroups": {"webs": "web*"}}


@pytest.fixture
def service() -> SaltRequests:
    return SaltRequests(OPTS, estate="master")


def req(service: SaltRequests, load: dict[str, Any], minion: str = "web1", rid: str = "1",
        now: float = 0.0) -> list[Any]:
    return service.on_request(minion, {"rid": rid, "load": load}, now, {"id": minion})


def answer(actions: list[Any]) -> tuple[str, dict[str, Any]]:
    [action] = actions
    assert isinstance(action, ToMinion)
    assert p.share_of(action.body) == p.SHARE_SALT_RET
    return action.minion, action.body


def test_file_requests_go_to_the_file_worker_and_back_to_the_asker(service: SaltRequests
                                                                   ) -> None:
    [work] = req(service, {"cmd": "_file_hash", "path": "web/init.sls", "saltenv": "base"})
    assert isinstance(work, ToWorker) and work.kind == "files" and work.op == "hash"
    assert work.args == {"saltenv": "base", "path": "web/init.sls"}
    minion, body = answer(service.on_result(work.op_id, {"ret": {"hsum": "ab"}}, 1.0))
    assert minion == "web1" and body["rid"] == "1" and body["ret"] == {"hsum": "ab"}
    assert service.on_result(work.op_id, {"ret": {}}, 1.0) == []  # answered once only
    [work] = req(service, {"cmd": "_serve_file", "path": "a", "saltenv": "dev", "loc": 7,
                           "gzip": 5})
    assert work.args == {"saltenv": "dev", "path": "a", "loc": 7, "gzip": 5}
    [work] = req(service, {"cmd": "_file_list", "saltenv": "base", "prefix": "web/"})
    assert work.op == "list" and work.args["form"] == "files" and work.args["prefix"] == "web/"


def test_answers_without_the_disk(service: SaltRequests) -> None:
    assert answer(req(service, {"cmd": "_file_envs"}))[1]["ret"] == ["base", "dev"]
    mopts = answer(req(service, {"cmd": "_master_opts"}))[1]["ret"]
    assert mopts["file_roots"] == {"base": [], "dev": []}  # names, never directories
    assert mopts["state_top"] == "salt://top.sls" and mopts["renderer"] == "jinja|yaml"
    assert mopts["nodegroups"] == {"webs": "web*"}
    assert answer(req(service, {"cmd": "_master_tops"}))[1]["ret"] == {}
    # An environment the master does not have: Salt's empty answers, no worker.
    body = answer(req(service, {"cmd": "_file_hash", "path": "x", "saltenv": "qa"}))[1]
    assert body["ret"] == {}


@pytest.mark.parametrize(("load", "reason", "text"), [
    ({"cmd": "_serve_file", "path": "../../etc/shadow", "saltenv": "base", "loc": 0},
     SaltRequestDrop.REFUSED_PATH, "leads out of file_roots"),
    ({"cmd": "_file_hash", "path": "/etc/shadow", "saltenv": "base"},
     SaltRequestDrop.REFUSED_PATH, "absolute"),
    ({"cmd": "_file_hash", "saltenv": "base"}, SaltRequestDrop.BAD_LOAD, "names no path"),
    ({"cmd": "_file_hash", "path": "x", "saltenv": "../base"}, SaltRequestDrop.BAD_LOAD,
     "not a saltenv"),
    ({"cmd": "_serve_file", "path": "x", "saltenv": "base", "loc": -1},
     SaltRequestDrop.BAD_LOAD, "byte offset"),
    ({"cmd": "_serve_file", "path": "x", "saltenv": "base", "loc": True},
     SaltRequestDrop.BAD_LOAD, "byte offset"),
    ({"cmd": "_serve_file", "path": "x", "saltenv": "base", "gzip": 99},
     SaltRequestDrop.BAD_LOAD, "gzip"),
    ({"cmd": "_file_list", "saltenv": "base", "prefix": "../"}, SaltRequestDrop.BAD_LOAD,
     "leads out"),
    ({"cmd": "_return", "jid": "1"}, SaltRequestDrop.UNKNOWN_COMMAND, "'_return' is not"),
    ({"cmd": "__init__"}, SaltRequestDrop.UNKNOWN_COMMAND, "is not a command"),
    ({"cmd": ["x"]}, SaltRequestDrop.UNKNOWN_COMMAND, "'list' is not"),
    ({"path": "x"}, SaltRequestDrop.UNKNOWN_COMMAND, "names no command"),
    ({"cmd": "_pillar", "pillar_override": "x"}, SaltRequestDrop.BAD_LOAD, "mapping"),
])
def test_refusals_are_answered_counted_and_do_no_work(service: SaltRequests,
                                                      load: dict[str, Any],
                                                      reason: SaltRequestDrop, text: str) -> None:
    minion, body = answer(req(service, load))
    assert minion == "web1" and text in body["error"]
    assert body.get("refused", False) is (reason is SaltRequestDrop.REFUSED_PATH)
    assert service.stats[reason.value] == 1 and service.inflight() == 0


@pytest.mark.parametrize("body", [{}, {"rid": 5, "load": {}}, {"rid": "1", "load": "x"},
                                  {"rid": "x" * 65, "load": {}}])
def test_malformed_requests_are_dropped_unanswered(service: SaltRequests,
                                                   body: dict[str, Any]) -> None:
    assert service.on_request("web1", body, 0.0) == []
    assert service.stats[SaltRequestDrop.NOT_A_REQUEST.value] == 1


def test_requests_in_flight_are_bounded_per_minion(service: SaltRequests) -> None:
    load = {"cmd": "_file_hash", "path": "x", "saltenv": "base"}
    for n in range(MAX_INFLIGHT_PER_MINION):
        assert isinstance(req(service, load, rid=str(n))[0], ToWorker)
    body = answer(req(service, load, rid="late"))[1]
    assert "busy" in body["error"] and service.stats[SaltRequestDrop.BUSY.value] == 1
    assert isinstance(req(service, load, minion="db1")[0], ToWorker)  # others unaffected
    for n in range(MAX_PILLAR_PER_MINION):
        assert isinstance(req(service, {"cmd": "_pillar"}, minion="db1", rid=f"p{n}")[0],
                          ToWorker)
    assert "busy" in answer(req(service, {"cmd": "_pillar"}, minion="db1"))[1]["error"]


def test_worker_errors_time_outs_and_deaths(service: SaltRequests) -> None:
    load = {"cmd": "_file_hash", "path": "x", "saltenv": "base"}
    [one] = req(service, load, rid="a")
    body = answer(service.on_result(one.op_id, {"refused": "salt://x leads out"}, 1.0))[1]
    assert body["refused"] is True and "leads out" in body["error"]
    [two] = req(service, load, rid="b", now=10.0)
    assert service.get_timer() == pytest.approx(40.0)
    assert service.handle_timer(39.0) == []
    assert service.handle_timer(40.0) == [RestartWorker("files")]
    body = answer(service.on_worker_lost("files", 40.0))[1]
    assert body["rid"] == "b" and "worker stopped" in body["error"]
    assert service.get_timer() is None and service.op_minion(two.op_id) is None


def test_pillar_is_compiled_for_the_road_id_only(service: SaltRequests) -> None:
    [work] = req(service, {"cmd": "_pillar", "id": "db1", "grains": {"id": "db1"},
                           "pillar_override": {"x": 1}, "pillarenv": "base"}, minion="web1")
    assert work.kind == "pillar"
    assert work.args == {"minion": "web1", "grains": {"id": "web1"}, "pillarenv": "base",
                         "override": {"x": 1}}
    minion, body = answer(service.on_result(work.op_id, {"ret": {"role": "web"}}, 1.0))
    assert minion == "web1" and body["ret"] == {"role": "web"}
    assert service.pillars == {}  # a job's request does not change the targeting view


def test_pillar_push_after_hello_refresh_and_no_roots(service: SaltRequests) -> None:
    [work] = service.on_hello("web1", {"os": "Debian"}, 0.0, roots_exist=True)
    assert isinstance(work, ToWorker) and work.args["override"] == {}
    # A refresh while compiling is remembered, not run twice at once.
    assert service.on_pillar_refresh("web1", {"os": "Debian"}, 0.1, roots_exist=True) == []
    push, again = service.on_result(work.op_id, {"ret": {"role": "web"}}, 1.0,
                                    {"os": "Debian", "new": 1})
    assert isinstance(push, ToMinion) and push.minion == "web1"
    assert p.share_of(push.body) == p.SHARE_PILLAR and push.body["pillar"] == {"role": "web"}
    assert isinstance(again, ToWorker) and again.args["grains"] == {"os": "Debian", "new": 1}
    assert service.pillars == {"web1": {"role": "web"}}
    [empty] = service.on_hello("db1", {}, 2.0, roots_exist=False)
    assert empty.body["pillar"] == {} and service.pillars["db1"] == {}


def test_oversized_pillars_and_overrides(service: SaltRequests) -> None:
    big = {"blob": "x" * MAX_OVERRIDE_BYTES}
    body = answer(req(service, {"cmd": "_pillar", "pillar_override": big}))[1]
    assert f"larger than {MAX_OVERRIDE_BYTES} bytes" in body["error"]
    huge = {"blob": "x" * (MAX_PILLAR_BYTES + 1)}
    [work] = service.on_hello("web1", {}, 0.0, roots_exist=True)
    assert service.on_result(work.op_id, {"ret": huge}, 1.0) == []
    assert "web1" not in service.pillars
    assert service.stats[SaltRequestDrop.TOO_LARGE.value] == 2
