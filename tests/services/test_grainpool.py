"""The master's grain pool: alike values shared, different ones kept apart, bounded."""

from __future__ import annotations

from raetsalt.services.grainpool import GrainPool


def test_alike_values_are_one_object_and_different_ones_stay_apart() -> None:
    pool = GrainPool()
    a = pool.share({"id": "a", "os": "Linux", "cpu_flags": ["fpu", "vme"], "n": 1,
                    "ip4": ["10.0.0.1"], "x": {"k": [1]}})
    b = pool.share({"id": "b", "os": "Linux", "cpu_flags": ["fpu", "vme"], "n": 1,
                    "ip4": ["10.0.0.2"], "x": {"k": [1]}})
    assert a["cpu_flags"] is b["cpu_flags"] and a["x"] is b["x"] and a["os"] is b["os"]
    assert a["ip4"] == ["10.0.0.1"] and b["ip4"] == ["10.0.0.2"]
    assert (a["id"], b["id"]) == ("a", "b")
    # The same value under another key is another grain.
    c = pool.share({"ip6": ["10.0.0.1"]})
    assert c["ip6"] is not a["ip4"]


def test_the_pool_is_bounded() -> None:
    pool = GrainPool(limit=10, largest=100)
    for n in range(100):
        grains = {"serial": f"s{n}", "big": list(range(200)), "many": [n], "flag": [True]}
        assert pool.share(grains) == grains
    assert len(pool) == 10


def test_equal_looking_values_of_other_types_are_not_shared() -> None:
    pool = GrainPool()
    a = pool.share({"v": [1], "w": {"k": "1"}})
    b = pool.share({"v": [True], "w": {"k": 1}})
    assert b["v"] == [True] and b["v"][0] is True and b["w"] == {"k": 1}
    assert a["v"] is not b["v"]
