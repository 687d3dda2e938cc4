"""The returners' pure parts: names, settings from untrusted publications, the load a
returner gets, and what a failing or unknown returner does."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt import protocol as p
from raetsalt.errors import BadPacket
from raetsalt.execution import returners as r

RET = {"return": {"stdout": "ok"}, "retcode": 0, "success": True, "out": "nested"}


def test_names_are_split_deduplicated_and_bounded() -> None:
    assert r.returner_names("master_bus, sqlite3,master_bus,") == ["master_bus", "sqlite3"]
    assert r.returner_names(["a", 3, "b"]) == ["a", "b"]
    assert r.returner_names(None) == [] and r.returner_names("") == []
    assert len(r.returner_names(",".join(f"r{n}" for n in range(100)))) == r.MAX_RETURNERS
    assert r.returner_names("x" * 65) == []


def test_load_has_salts_shape() -> None:
    load = r.returner_load("m1", "J", "cmd.run_all", ["ls"], RET, "prof", {"tag": "t"})
    assert load == {"id": "m1", "jid": "J", "fun": "cmd.run_all", "fun_args": ["ls"],
                    "return": {"stdout": "ok"}, "retcode": 0, "success": True,
                    "out": "nested", "ret_config": "prof", "ret_kwargs": {"tag": "t"}}
    assert r.master_bus_tag(load) == "t"
    assert r.master_bus_tag({"ret_kwargs": {"tag": ""}}) == r.DEFAULT_TAG


def test_master_bus_fires_and_a_refusing_bus_is_a_problem() -> None:
    fired: list[tuple[str, dict[str, Any]]] = []
    job = {"jid": "J", "fun": "test.ping", "arg": [], "ret": "master_bus",
           "ret_kwargs": {"tag": "monitoring"}}
    problems = r.deliver({"id": "m1"}, job, RET,
                         fire_master=lambda tag, data: fired.append((tag, data)) is None,
                         salt_returners=lambda: None)
    assert problems == {} and fired[0][0] == "monitoring" and fired[0][1]["id"] == "m1"
    problems = r.deliver({"id": "m1"}, job, RET, fire_master=lambda tag, data: False,
                         salt_returners=lambda: None)
    assert "did not take" in problems["master_bus"]


def test_unknown_and_failing_returners_are_logged_never_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    def boom(load: Any) -> None:
        raise RuntimeError("database down")

    asked: list[int] = []

    def salt_funcs() -> dict[str, Any]:
        asked.append(1)
        return {"boom.returner": boom}

    job = {"jid": "J", "fun": "test.ping", "arg": [], "ret": "boom,nope,master_bus"}
    problems = r.deliver({"id": "m1"}, job, RET, fire_master=lambda tag, data: True,
                         salt_returners=salt_funcs)
    assert set(problems) == {"boom", "nope"} and asked == [1]  # Salt's loader built once
    assert "database down" in problems["boom"] and "Traceback" not in caplog.text
    without = r.deliver({"id": "m1"}, {**job, "ret": "syslog"}, RET,
                        fire_master=lambda tag, data: True, salt_returners=lambda: None)
    assert "install the salt extra" in without["syslog"]


def test_sqlite3_returner_creates_its_table(tmp_path: Path) -> None:
    opts = {"id": "m1", "sqlite3.database": str(tmp_path / "a.db"),
            "other.sqlite3.database": str(tmp_path / "b.db")}
    job = {"jid": "J", "fun": "test.echo", "arg": ["x"], "ret": "sqlite3"}
    assert r.deliver(opts, job, RET, fire_master=lambda t, d: True) == {}
    assert r.deliver(opts, {**job, "ret_config": "other"}, RET,
                     fire_master=lambda t, d: True) == {}
    for name in ("a.db", "b.db"):
        with sqlite3.connect(tmp_path / name) as conn:
            assert conn.execute("SELECT id, jid, fun FROM salt_returns").fetchall() == [
                ("m1", "J", "test.echo")]
    assert "not set" in r.deliver({"id": "m1"}, job, RET, fire_master=lambda t, d: True)[
        "sqlite3"]


def test_ret_kwargs_from_a_minion_publication() -> None:
    assert r.ret_kwargs_untrusted({"tag": "x"}) == {"tag": "x"}
    assert r.ret_kwargs_untrusted({1: "x"}) == {} and r.ret_kwargs_untrusted("x") == {}
    assert r.ret_kwargs_untrusted({"big": "x" * 10_000}) == {}


def test_master_checks_returner_options() -> None:
    assert p.returner_options_untrusted({}) == {}
    assert p.returner_options_untrusted({"ret_config": "c", "ret_kwargs": {"tag": "t"}}) == {
        "ret_config": "c", "ret_kwargs": {"tag": "t"}}
    for bad in ({"ret_config": 3}, {"ret_config": "x" * 1000}, {"ret_kwargs": [1]},
                {"ret_kwargs": {1: 2}}, {"ret_kwargs": {"a": list(range(1000))}},
                {"ret_kwargs": {"a": "x" * 100_000}}):
        with pytest.raises(BadPacket):
            p.returner_options_untrusted(bad)


_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=5)
                       | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=5),
                       max_leaves=40)


@given(st.dictionaries(st.sampled_from(["ret_config", "ret_kwargs", "x"]), _values))
def test_returner_options_raise_only_bad_packet(body: dict[str, Any]) -> None:
    try:
        out = p.returner_options_untrusted(body)
    except BadPacket:
        return
    assert set(out) <= {"ret_config", "ret_kwargs"}


def test_the_minions_return_option_adds_returners_to_every_job() -> None:
    fired: list[str] = []
    job = {"jid": "J", "fun": "test.ping", "arg": [], "ret": ""}
    opts = {"id": "m1", "return": ["master_bus"]}
    assert r.deliver(opts, job, RET, fire_master=lambda t, d: fired.append(t) is None) == {}
    assert r.deliver(opts, {**job, "ret": "master_bus"}, RET,
                     fire_master=lambda t, d: fired.append(t) is None) == {}
    assert fired == [r.DEFAULT_TAG, r.DEFAULT_TAG]  # named twice, given once
