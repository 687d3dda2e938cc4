"""The reactor's pure decisions (``raetsalt.services.reactor``) and its worker
(``raetsalt.daemon.reactor``) with a fake renderer and a fake master client."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt import protocol as p
from raetsalt.daemon.reactor import Reactor
from raetsalt.services.reactor import (
    Reaction,
    ReactorConfigError,
    ReactorMap,
    event_key,
    reactions_from_high,
    reactions_of_event,
)


def test_map_matches_globs_in_order_each_file_once() -> None:
    mapping = ReactorMap.from_config([
        {"salt/minion/*/start": ["/r/start.sls", "/r/log.sls"]},
        {"salt/minion/web*/start": "/r/web.sls"},
        {"salt/*": ["/r/log.sls"]},
    ])
    assert mapping.files_for("salt/minion/web1/start") == ["/r/start.sls", "/r/log.sls",
                                                            "/r/web.sls"]
    assert mapping.files_for("salt/auth") == ["/r/log.sls"]
    assert mapping.files_for("other") == [] and not ReactorMap.from_config(None)


@pytest.mark.parametrize("bad", ["x", [["a"]], [{"a": 1}], [{"a": ["x"], "b": ["y"]}],
                                 [{"a": [""]}]])
def test_bad_reactor_config(bad: Any) -> None:
    with pytest.raises(ReactorConfigError):
        ReactorMap.from_config(bad)


def test_reactions_follow_salts_argument_rules() -> None:
    high = {
        "new": {"local.state.apply": [{"tgt": "web1"}, {"args": [{"mods": "web"}]}]},
        "legacy": {"cmd.cmd.run": [{"tgt": ["a", "b"]}, {"expr_form": "list"},
                                   {"arg": ["uptime"]}, {"ret": "master_bus"}]},
        "positional": {"local.test.arg": [{"tgt": "*"}, {"args": [1, 2]}]},
        "runner": {"runner.jobs.lookup_jid": [{"jid": "123"}]},
        "wheel": {"wheel.key.accept": [{"match": "m1"}]},
        "caller": {"caller.test.echo": [{"args": ["hi"]}]},
    }
    reactions, problems = reactions_from_high(high, "/r/x.sls")
    assert problems == []
    by_id = {r.id: r for r in reactions}
    assert by_id["new"] == Reaction("new", "local", "state.apply", [], {"mods": "web"},
                                    "web1", "glob", sls="/r/x.sls")
    assert by_id["legacy"].kind == "local" and by_id["legacy"].tgt_type == "list"
    assert by_id["legacy"].arg == ["uptime"] and by_id["legacy"].ret == "master_bus"
    assert by_id["positional"].arg == [1, 2]
    assert by_id["runner"].kwarg == {"jid": "123"} and by_id["wheel"].kwarg == {"match": "m1"}
    assert by_id["caller"].arg == ["hi"]


def test_malformed_reactions_name_their_id_and_the_others_run() -> None:
    high = {"ok": {"runner.manage.up": []},
            "notarget": {"local.test.ping": []},
            "badkind": {"pkg.installed": [{"name": "x"}]},
            "both": {"local.test.ping": [{"tgt": "*"}, {"args": [1]}, {"arg": [1]}]},
            "list": ["x"]}
    reactions, problems = reactions_from_high(high, "f")
    assert [r.id for r in reactions] == ["ok"]
    assert len(problems) == 4 and all(any(i in pr for i in ("notarget", "badkind", "both",
                                                              "list")) for pr in problems)
    assert reactions_from_high("text", "f")[1] and reactions_from_high(None, "f") == ([], [])


@given(st.recursive(st.none() | st.text(max_size=5) | st.integers(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=30))
def test_any_rendering_gives_reactions_or_problems_never_an_exception(high: Any) -> None:
    reactions, problems = reactions_from_high(high, "f")
    assert all(isinstance(r, Reaction) for r in reactions)


class FakeClient:
    def __init__(self, log: list[dict[str, Any]], refuse: bool = False) -> None:
        self.log = log
        self.refuse = refuse
        self.answers: list[dict[str, Any]] = []
        self.count = 0

    def request(self, share: str, **fields: Any) -> str:
        self.count += 1
        req = f"r{self.count}"
        self.log.append({"share": share, **fields})
        answer = {p.SHARE_PUBLISH: p.SHARE_PUB_ACK, p.SHARE_RUNNER: p.SHARE_RUN_RET}[share]
        body = {"req": req, "route": {"dst": [None, "x", answer]}, "jid": "1"}
        if self.refuse:
            body["error"] = "not allowed"
        self.answers.append(body)
        return req

    def receive(self, timeout: float | None) -> list[dict[str, Any]]:
        out, self.answers = self.answers, []
        return out

    def close(self) -> None:
        pass


def _reactor(render: Any, sent: list[dict[str, Any]], **kw: Any) -> Reactor:
    mapping = ReactorMap.from_config([{"t/*": ["/a.sls", "/b.sls"]}, {"t/x": ["/a.sls"]}])
    return Reactor(mapping, render, {"sock_dir": "/nowhere", "timeout": 5}, threads=1,
                   client_factory=lambda: FakeClient(sent, kw.get("refuse", False)),
                   hwm=kw.get("hwm", 100))


def test_each_file_once_per_event_and_reactions_carried_out() -> None:
    sent: list[dict[str, Any]] = []

    def render(sls: str, tag: str, data: dict[str, Any]) -> Any:
        if sls == "/a.sls":
            return {"job": {"local.cmd.run": [{"tgt": data["id"]}, {"arg": ["true"]}]}}
        return {"run": {"runner.manage.up": []}}

    reactor = _reactor(render, sent)
    assert reactor.offer("t/x", {"id": "m1"}) and reactor.offer("nothing", {})
    assert reactor.wait_idle(10)
    reactor.close()
    assert [m["share"] for m in sent] == [p.SHARE_PUBLISH, p.SHARE_RUNNER]
    assert sent[0]["tgt"] == "m1" and sent[0]["arg"] == ["true"]
    assert reactor.stats["matched"] == 1 and reactor.stats["reactions"] == 2


def test_a_full_queue_drops_counts_and_never_blocks(caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()
    sent: list[dict[str, Any]] = []

    def render(sls: str, tag: str, data: dict[str, Any]) -> Any:
        gate.wait(10)
        return {}

    reactor = _reactor(render, sent, hwm=2)
    results = [reactor.offer("t/y", {}) for _ in range(10)]
    gate.set()
    assert reactor.wait_idle(10)
    reactor.close()
    assert results.count(False) == reactor.stats["dropped"] >= 7
    assert sum("dropped" in r.message for r in caplog.records) == 1


def test_failures_are_logged_once_per_file_tag_and_problem(
        caplog: pytest.LogCaptureFixture) -> None:
    sent: list[dict[str, Any]] = []

    def render(sls: str, tag: str, data: dict[str, Any]) -> Any:
        if sls == "/a.sls":
            raise ValueError("Jinja syntax error\nline 3")
        return {"job": {"local.test.ping": [{"tgt": "*"}]}}

    reactor = _reactor(render, sent, refuse=True)
    for _ in range(5):
        reactor.offer("t/y", {})
    assert reactor.wait_idle(10)
    reactor.close()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2, errors
    assert any("/a.sls for tag t/y: cannot be rendered: Jinja syntax error line 3" in e
               for e in errors)
    assert any("/b.sls" in e and "not allowed" in e for e in errors)
    assert reactor.stats["failed"] == 10 and "Traceback" not in caplog.text


def test_large_events_are_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("raetsalt.daemon.reactor.MAX_QUEUED_BYTES", 3000)
    gate = threading.Event()

    def render(sls: str, tag: str, data: dict[str, Any]) -> Any:
        gate.wait(10)
        return {}

    reactor = _reactor(render, [], hwm=1000)
    results = [reactor.offer("t/y", {"blob": "x" * 1000}) for _ in range(10)]
    gate.set()
    assert reactor.wait_idle(10)
    reactor.close()
    assert results.count(True) <= 3 and reactor.stats["dropped"] >= 7
    assert reactor.queued_bytes == 0


def test_salt_urls_resolve_inside_the_base_file_roots(tmp_path: Any) -> None:
    from raetsalt.saltbridge.mastersalt import local_path

    (tmp_path / "reactor").mkdir()
    (tmp_path / "reactor" / "a.sls").write_text("{}")
    (tmp_path.parent / "outside.sls").write_text("{}")
    opts = {"file_roots": {"base": [str(tmp_path)]}}
    assert local_path("salt://reactor/a.sls", opts) == str(tmp_path / "reactor" / "a.sls")
    assert local_path("salt://../outside.sls", opts) is None
    assert local_path("salt://nothing.sls", opts) is None
    assert local_path("/abs/x.sls", opts) == "/abs/x.sls"


def test_closing_drops_what_waits_and_does_not_wait_for_it(
        caplog: pytest.LogCaptureFixture) -> None:
    gate, entered = threading.Event(), threading.Event()

    def render(sls: str, tag: str, data: dict[str, Any]) -> Any:
        entered.set()
        gate.wait(10)
        return {}

    reactor = _reactor(render, [], hwm=100)
    for _ in range(50):
        assert reactor.offer("t/y", {})
    assert entered.wait(10)  # the worker is in its first reaction
    # ...which ends once close has begun
    threading.Thread(target=lambda: (reactor._stopping.wait(10), gate.set())).start()
    reactor.close(timeout=10)
    assert reactor.stats["done"] == 1 and reactor.stats["dropped"] == 49
    assert reactor.queued_bytes == 0
    assert any("49 queued event(s) not reacted to" in r.getMessage() for r in caplog.records)


def test_an_event_runs_each_reaction_id_once_as_salt_merges_the_files() -> None:
    # Salt renders every file of every matching entry into one high-data mapping
    # (dict.update): an id a later file renders again replaces the earlier one.
    first = {"ping": {"local.test.ping": [{"tgt": "a"}]},
             "up": {"runner.manage.up": []}}
    second = {"ping": {"local.test.ping": [{"tgt": "b"}]},
              "bad": "not a mapping"}
    reactions, problems = reactions_of_event([("/1.sls", first), ("/2.sls", second),
                                              ("/3.sls", ["a list"])])
    assert [(r.id, r.tgt, r.sls) for r in reactions] == [("ping", "b", "/2.sls"),
                                                         ("up", "", "/1.sls")]
    assert [sls for sls, _ in problems] == ["/3.sls", "/2.sls"]


def test_several_entries_naming_one_file_react_once_per_event() -> None:
    sent: list[dict[str, Any]] = []
    mapping = ReactorMap.from_config([{"t/*": "/a.sls"}, {"t/x": ["/a.sls", "/b.sls"]},
                                      {"*": "/b.sls"}])
    renders: list[str] = []

    def render(sls: str, tag: str, data: dict[str, Any]) -> Any:
        renders.append(sls)
        return {"job": {"local.cmd.run": [{"tgt": "m1"}, {"arg": [sls]}]}}

    reactor = Reactor(mapping, render, {"sock_dir": "/nowhere"}, threads=1,
                      client_factory=lambda: FakeClient(sent))
    assert reactor.offer("t/x", {})
    assert reactor.wait_idle(10)
    reactor.close()
    assert renders == ["/a.sls", "/b.sls"]  # each file once
    assert [m["arg"] for m in sent] == [["/b.sls"]]  # the id 'job' once: the later file's


class Claims:
    """The cluster store's answer: the first claim of an (event, reaction) wins."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def claim(self, key: str, reaction: str) -> bool:
        first = (key, reaction) not in self.seen
        self.seen.append((key, reaction))
        return first


def test_claimed_reactions_run_on_one_master_only() -> None:
    claims = Claims()
    sent: list[dict[str, Any]] = []

    def render(sls: str, tag: str, data: dict[str, Any]) -> Any:
        return {"job": {"local.cmd.run": [{"tgt": "m1"}, {"arg": ["true"]}]}}

    masters = [Reactor(ReactorMap.from_config([{"fleet/*": "/a.sls"}]), render,
                       {"sock_dir": "/nowhere"}, threads=1, claims=claims,
                       client_factory=lambda: FakeClient(sent)) for _ in range(2)]
    for reactor in masters:  # both masters see the event, each stamped on arrival
        assert reactor.offer("fleet/up", {"n": 1, "_stamp": f"{id(reactor)}"})
        assert reactor.wait_idle(10)
    masters[0].offer("fleet/up", {"n": 2})  # another event reacts
    assert masters[0].wait_idle(10)
    for reactor in masters:
        reactor.close()
    assert len(sent) == 2
    assert sum(r.stats["claimed_elsewhere"] for r in masters) == 1
    assert event_key("t", {"a": 1, "_stamp": "x"}) == event_key("t", {"a": 1})
    assert event_key("t", {"a": 1}) != event_key("t", {"a": 2}) != event_key("u", {"a": 2})
    assert event_key("t", {"a": 1, "b": {"x": [1, {"p": 2, "q": 3}], "y": 2}}) == \
        event_key("t", {"b": {"y": 2, "x": [1, {"q": 3, "p": 2}]}, "a": 1})
    assert event_key("t", {"a": [1, 2]}) != event_key("t", {"a": [2, 1]})
