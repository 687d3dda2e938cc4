"""The master's mine store (``raetsalt.services.mine``): Salt's shapes, the master's
``mine_get`` rules (a denial says why), minion-side ACLs, bounds."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from raetsalt.services.mine import ACL_DATA, ACL_ID, MineDenied, MineRefused, MineStore
from raetsalt.targeting import MinionFacts

TABLE = {m: MinionFacts({"id": m, "roles": [r]}, {}) for m, r in
         (("web1", "web"), ("web2", "web"), ("db1", "db"))}


def _size(value: Any) -> int:
    return len(msgpack.packb(value, default=str))


def _store(rules: Any = None) -> MineStore:
    mine = MineStore(rules, _size)
    mine.store("db1", {"data": {"network.ip_addrs": ["10.0.0.3"], "disk.usage": {"/": 1}}})
    mine.store("web1", {"data": {"network.ip_addrs": ["10.0.0.1"]}})
    return mine


def test_get_has_salts_shapes_and_targets() -> None:
    mine = _store()
    assert mine.get("web2", {"tgt": "*", "fun": "network.ip_addrs"}, TABLE, {}) == {
        "db1": ["10.0.0.3"], "web1": ["10.0.0.1"]}
    assert mine.get("web2", {"tgt": "G@roles:db", "tgt_type": "compound",
                             "fun": "network.ip_addrs,disk.usage"}, TABLE, {}) == {
        "network.ip_addrs": {"db1": ["10.0.0.3"]}, "disk.usage": {"db1": {"/": 1}}}
    assert mine.get("web2", {"tgt": "web*", "fun": ["disk.usage"]}, TABLE, {}) == {}


def test_store_merges_clear_replaces_delete_and_flush() -> None:
    mine = _store()
    mine.store("db1", {"data": {"x.y": 1}})
    assert set(mine.data["db1"]) == {"network.ip_addrs", "disk.usage", "x.y"}
    mine.store("db1", {"data": {"x.y": 2}, "clear": True})
    assert mine.data["db1"] == {"x.y": 2}
    mine.delete("db1", {"fun": "x.y"})
    assert mine.data["db1"] == {}
    mine.flush("web1")
    assert "web1" not in mine.data


def test_the_masters_rules_deny_loudly() -> None:
    mine = _store({"web.*": ["network\\..*"], "db1": ["disk.usage"]})
    assert mine.get("web2", {"tgt": "db1", "fun": "network.ip_addrs,disk.usage"}, TABLE,
                    {}) == {"network.ip_addrs": {"db1": ["10.0.0.3"]}}
    with pytest.raises(MineDenied, match="mine.get of network.ip_addrs by db1 is denied"):
        mine.get("db1", {"tgt": "*", "fun": "network.ip_addrs"}, TABLE, {})
    with pytest.raises(MineDenied, match="no rule matches other"):
        MineStore({"web.*": ["x"]}, _size).get("other", {"tgt": "*", "fun": "x"}, TABLE, {})


def test_minion_side_acl() -> None:
    mine = MineStore(None, _size)
    mine.store("db1", {"data": {"secret.fun": {ACL_ID: 1, ACL_DATA: "s3cret",
                                               "allow_tgt": "web1"}}})
    load = {"tgt": "db1", "fun": "secret.fun"}
    assert mine.get("web1", load, TABLE, {}) == {"db1": "s3cret"}
    assert mine.get("web2", load, TABLE, {}) == {}


@pytest.mark.parametrize("load", [{"data": "x"}, {"data": {1: 2}}, {"data": {"": 1}},
                                  {"data": {f"f{n}": n for n in range(300)}},
                                  {"data": {"big": "x" * (5 << 20)}}])
def test_bad_or_large_stores_are_refused(load: dict[str, Any]) -> None:
    with pytest.raises(MineRefused):
        MineStore(None, _size).store("m", load)


@pytest.mark.parametrize("load", [{"tgt": "*"}, {"tgt": "*", "fun": 3}, {"fun": "a"},
                                  {"tgt": "and and", "tgt_type": "compound", "fun": "a"}])
def test_bad_gets_are_refused(load: dict[str, Any]) -> None:
    with pytest.raises(MineRefused):
        _store().get("web1", load, TABLE, {})
