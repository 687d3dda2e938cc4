"""Pillar targeting (``-I``/``-J``, compound ``I@``/``J@``) on both sides, with Salt 3008's
pillar matcher as the oracle when ``salt`` is importable."""

from __future__ import annotations

from typing import Any

import pytest

from raetsalt.targeting import MinionFacts, match_bounds, match_minions, match_self, target_within

PILLARS: dict[str, dict[str, Any]] = {
    "web1": {"role": "web", "tier": {"name": "front", "ports": [80, 443]},
             "users": ["alice", "bob"], "Env": "Prod"},
    "web2": {"role": "web", "tier": {"name": "front", "ports": [8080]}, "users": []},
    "db1": {"role": "db", "tier": {"name": "back"}, "users": ["carol"],
            "apps": [{"name": "pg", "ver": "15"}]},
}
GRAINS: dict[str, dict[str, Any]] = {m: {"os": "Debian", "id": m} for m in PILLARS}
TABLE = {m: MinionFacts(GRAINS[m], PILLARS[m]) for m in PILLARS}

CASES: list[tuple[str, str, set[str]]] = [
    ("role:web", "pillar", {"web1", "web2"}),
    ("role:w*", "pillar", {"web1", "web2"}),
    ("role:WEB", "pillar", {"web1", "web2"}),
    ("tier:name:front", "pillar", {"web1", "web2"}),
    ("tier:ports:443", "pillar", {"web1"}),
    ("users:carol", "pillar", {"db1"}),
    ("tier:name", "pillar", {"web1", "web2", "db1"}),
    ("env:prod", "pillar", set()),
    ("Env:prod", "pillar", {"web1"}),
    ("apps:name:pg", "pillar", {"db1"}),
    ("nosuch:x", "pillar", set()),
    ("role:w.b", "pillar_pcre", {"web1", "web2"}),
    ("tier:ports:80.*", "pillar_pcre", {"web1", "web2"}),
    ("I@role:db", "compound", {"db1"}),
    ("I@role:web and not web2", "compound", {"web1"}),
    ("J@role:^d", "compound", {"db1"}),
    ("I@role:web or G@os:Debian", "compound", {"web1", "web2", "db1"}),
    ("I|@tier|name|back", "compound", {"db1"}),
]


@pytest.mark.parametrize(("tgt", "tgt_type", "expected"), CASES)
def test_master_and_minion_agree(tgt: str, tgt_type: str, expected: set[str]) -> None:
    assert match_minions(tgt, tgt_type, TABLE) == expected
    for minion in PILLARS:
        assert match_self(tgt, tgt_type, minion, GRAINS[minion],
                          pillar=PILLARS[minion]) == (minion in expected)


@pytest.mark.parametrize(("tgt", "tgt_type", "expected"), CASES)
def test_salt_pillar_matchers_agree(tgt: str, tgt_type: str, expected: set[str]) -> None:
    if tgt_type == "compound":
        pytest.skip("Salt's compound matcher needs a whole minion")
    pytest.importorskip("salt")
    from salt.matchers import pillar_match, pillar_pcre_match

    matcher = pillar_match if tgt_type == "pillar" else pillar_pcre_match
    for minion, pillar in PILLARS.items():
        assert bool(matcher.match(tgt, opts={"pillar": pillar})) == (minion in expected), minion


def test_unknown_pillar_is_only_possible() -> None:
    table: dict[str, Any] = {"web1": TABLE["web1"], "new": {"os": "Debian"},
                             "blank": MinionFacts({"os": "Debian"}, None)}
    bounds = match_bounds("I@role:web", "compound", table)
    assert bounds.definite == {"web1"}
    assert bounds.possible == {"web1", "new", "blank"}
    # Grain-only targets are not made uncertain by an unknown pillar.
    bounds = match_bounds("G@os:Debian", "compound", table)
    assert bounds.definite == bounds.possible == {"web1", "new", "blank"}


def test_minion_without_pillar_matches_no_pillar_target() -> None:
    assert not match_self("role:web", "pillar", "web1", GRAINS["web1"])
    assert match_self("not I@role:web", "compound", "web1", GRAINS["web1"])


def test_acl_subset_with_pillar_terms() -> None:
    # Known pillars: plain inclusion.
    assert target_within("I@role:web", "compound", "web*", TABLE)
    assert not target_within("I@role:db", "compound", "web*", TABLE)
    assert target_within("web1", "glob", "I@role:web", TABLE)
    assert not target_within("db1", "glob", "I@role:web", TABLE)
    # An unknown pillar can never widen what a rule allows...
    unknown = {**TABLE, "x9": MinionFacts({"os": "Debian"}, None)}
    assert not target_within("I@role:web", "compound", "web*", unknown)
    assert target_within("I@role:web", "compound", "I@role:web", unknown)
    # ...and does not matter for grain-only expressions.
    assert target_within("G@os:Debian and web*", "compound", "web*", unknown)
