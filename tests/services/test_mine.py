"""The master's mine, sans-IO: shapes (Salt's), road identity, ``mine_get`` rules,
bounds and a store that fails."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.errors import TargetError
from raetsalt.services.master import Fire, ToMinion
from raetsalt.services.mine import MAX_MINE_BYTES, MasterMine, is_mine_request

MINIONS = ["db1", "db2", "web1"]


def targeted(tgt: Any, tgt_type: str) -> list[str]:
    if tgt_type != "glob" or not isinstance(tgt, str):
        raise TargetError(f"bad target type {tgt_type}")
    import fnmatch
    return [m for m in MINIONS if fnmatch.fnmatch(m, tgt)]


class Store:
    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}
        self.fail = False

    def load_all(self) -> dict[str, dict[str, Any]]:
        return dict(self.data)

    def save(self, minion: str, data: Mapping[str, Any]) -> None:
        if self.fail:
            raise OSError("disk full")
        self.data[minion] = dict(data)

    def remove(self, minion: str) -> None:
        self.data.pop(minion, None)


def ask(mine: MasterMine, minion: str, **load: Any) -> dict[str, Any]:
    actions = mine.on_request(minion, {"rid": "1", "load": load}, 0.0)
    [answer] = [a for a in actions if isinstance(a, ToMinion)]
    assert answer.minion == minion
    return answer.body


def make(opts: dict[str, Any] | None = None, store: Store | None = None) -> MasterMine:
    return MasterMine(opts or {}, store, targeted, utcnow=lambda: datetime.now(UTC))


def test_store_get_shapes_and_road_identity() -> None:
    store = Store()
    mine = make(store=store)
    # The load's id is ignored: the road says who wrote.
    assert ask(mine, "db1", cmd="_mine", id="web1", data={"ip": ["10.0.0.1"]})["ret"] is True
    assert ask(mine, "db2", cmd="_mine", data={"ip": ["10.0.0.2"], "os": "x"})["ret"] is True
    assert store.data == {"db1": {"ip": ["10.0.0.1"]}, "db2": {"ip": ["10.0.0.2"], "os": "x"}}
    assert ask(mine, "web1", cmd="_mine_get", tgt="db*", fun="ip")["ret"] == {
        "db1": ["10.0.0.1"], "db2": ["10.0.0.2"]}
    assert ask(mine, "web1", cmd="_mine_get", tgt="db*", fun="ip,os")["ret"] == {
        "ip": {"db1": ["10.0.0.1"], "db2": ["10.0.0.2"]}, "os": {"db2": "x"}}
    assert ask(mine, "web1", cmd="_mine_get", tgt="db*", fun=["os"])["ret"] == {
        "os": {"db2": "x"}}
    assert ask(mine, "db2", cmd="_mine_delete", fun="os")["ret"] is True
    assert ask(mine, "web1", cmd="_mine_delete", fun="os")["ret"] is False  # no mine at all
    assert ask(mine, "db2", cmd="_mine", data={"a": 1}, clear=True)["ret"] is True
    assert store.data["db2"] == {"a": 1}
    assert ask(mine, "db1", cmd="_mine_flush")["ret"] is True
    assert "db1" not in store.data
    assert make(store=store).mines == {"db2": {"a": 1}}  # a restarted master


def test_minion_side_acl() -> None:
    mine = make()
    entry = {"__data__": [1], "__saltmine_acl__": 1, "allow_tgt": "web*"}
    ask(mine, "db1", cmd="_mine", data={"secret": entry})
    assert ask(mine, "web1", cmd="_mine_get", tgt="*", fun="secret")["ret"] == {"db1": [1]}
    assert ask(mine, "db2", cmd="_mine_get", tgt="*", fun="secret")["ret"] == {}


def test_mine_get_rules_deny_loudly() -> None:
    mine = make({"mine_get": {"web": ["ip$"], "db2$": []}})
    ask(mine, "db1", cmd="_mine", data={"ip": 1, "os": 2})
    assert ask(mine, "web1", cmd="_mine_get", tgt="*", fun="ip")["ret"] == {"db1": 1}
    actions = mine.on_request("web1", {"rid": "1", "load": {
        "cmd": "_mine_get", "tgt": "*", "fun": "ip,os"}}, 0.0)
    answer, fire = actions
    assert isinstance(answer, ToMinion) and isinstance(fire, Fire)
    assert answer.body["error"].endswith("do not allow web1 to read 'os'")
    assert answer.body["denied"] is True and "ret" not in answer.body
    assert fire.tag == "raetsalt/mine_get/web1/denied" and fire.data["fun"] == ["os"]
    assert "error" in ask(mine, "db2", cmd="_mine_get", tgt="*", fun="ip")
    assert "error" in ask(mine, "db1", cmd="_mine_get", tgt="*", fun="ip")  # no rule at all
    assert mine.stats["mine_get_denied"] == 3


def test_bounds_bad_loads_and_a_failing_store() -> None:
    store = Store()
    mine = make(store=store)
    big = ask(mine, "db1", cmd="_mine", data={"x": "a" * MAX_MINE_BYTES})
    assert "at most" in big["error"] and "db1" not in mine.mines
    for load in ({"cmd": "_mine", "data": [1]}, {"cmd": "_mine", "data": {1: 2}},
                 {"cmd": "_mine_get", "tgt": "*", "fun": 3},
                 {"cmd": "_mine_get", "tgt": None, "fun": "x"},
                 {"cmd": "_mine_get", "tgt": "*", "fun": "x", "tgt_type": "nope"},
                 {"cmd": "_mine_delete", "fun": None}):
        assert "error" in ask(mine, "db1", **load)
    store.fail = True
    answer = ask(mine, "db1", cmd="_mine", data={"a": 1})
    assert "could not store" in answer["error"] and "db1" not in mine.mines
    assert mine.on_request("db1", {"rid": 5, "load": {"cmd": "_mine"}}, 0.0) == []
    assert mine.on_request("db1", {"rid": "x" * 65, "load": {"cmd": "_mine"}}, 0.0) == []


def test_is_mine_request() -> None:
    assert is_mine_request({"load": {"cmd": "_mine_get"}})
    assert not is_mine_request({"load": {"cmd": "_pillar"}})
    assert not is_mine_request({"load": "x"})


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.dictionaries(st.sampled_from(["cmd", "data", "fun", "tgt", "tgt_type", "clear"]),
                       st.one_of(st.none(), st.text(max_size=5), st.integers(),
                                 st.lists(st.text(max_size=3), max_size=3),
                                 st.dictionaries(st.text(max_size=3), st.integers(),
                                                 max_size=3))))
def test_any_load_gets_one_answer_or_none(load: dict[str, Any]) -> None:
    load["cmd"] = load.get("cmd") if load.get("cmd") in (
        "_mine", "_mine_get", "_mine_delete", "_mine_flush") else "_mine_get"
    actions = make().on_request("web1", {"rid": "1", "load": load}, 0.0)
    answers = [a for a in actions if isinstance(a, ToMinion)]
    assert len(answers) == 1
    assert ("ret" in answers[0].body) != ("error" in answers[0].body)


@pytest.mark.parametrize("minutes", [0, -1, "x"])
def test_mine_clock_off(minutes: Any) -> None:
    from raetsalt.services.mineclock import MineClock
    clock = MineClock({"mine_interval": minutes, "mine_functions": {"a": []}})
    assert not clock.on_pillar({}, 0.0) and clock.get_timer() is None


def test_mine_clock_runs_at_first_pillar_then_every_interval() -> None:
    from raetsalt.services.mineclock import MineClock
    clock = MineClock({"mine_interval": 2})
    assert not clock.on_pillar({}, 10.0)  # nothing configured anywhere
    assert not clock.on_pillar({"mine_functions": {"a": []}}, 11.0)  # only the first pillar
    pillar = {"mine_functions": {"a": []}}
    assert clock.get_timer() == 130.0
    assert not clock.handle_timer(pillar, 129.0)
    assert clock.handle_timer(pillar, 130.0) and clock.get_timer() == 250.0
    assert not clock.handle_timer(pillar, 250.0, busy=True)  # the last run still going


def test_the_masters_own_read_has_no_rules() -> None:
    mine = make({"mine_get": {}})
    entry = {"__data__": [1], "__saltmine_acl__": 1, "allow_tgt": "nobody"}
    ask(mine, "db1", cmd="_mine", data={"ip": 1, "secret": entry})
    assert mine.read("db*", "ip") == {"db1": 1}
    assert mine.read("*", ["ip", "secret"]) == {"ip": {"db1": 1}, "secret": {"db1": [1]}}
    with pytest.raises(ValueError, match="needs a function name"):
        mine.read("*", 3)
    with pytest.raises(TargetError):
        mine.read("*", "ip", "nope")
