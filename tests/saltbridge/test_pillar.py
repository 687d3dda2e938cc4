"""Pillar compiled on the master: the YAML-only compiler, and Salt's as its oracle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raetsalt.saltbridge.pillar import NativePillar, SaltPillar, merge

TOP = """\
base:
  '*':
    - common
  'web*':
    - web
  'os:Debian':
    - match: grain
    - debian
  'db* or G@roles:db':
    - match: compound
    - db
"""
FILES = {
    "top.sls": TOP,
    "common.sls": "ntp: pool.ntp.org\nusers: {alice: 1}\n",
    "web.sls": "include:\n  - web.extra\nrole: web\nusers: {bob: 2}\n",
    "web/extra.sls": "ports: [80, 443]\n",
    "debian.sls": "family: debian\nntp: debian.pool.ntp.org\n",
    "db/init.sls": "role: db\n",
}


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, list[str]]:
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {"base": [str(tmp_path)]}


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("web1", {"os": "Debian"}, {"ntp": "debian.pool.ntp.org", "users": {"alice": 1, "bob": 2},
                                "role": "web", "ports": [80, 443], "family": "debian"}),
    ("db1", {"os": "Ubuntu"}, {"ntp": "pool.ntp.org", "users": {"alice": 1}, "role": "db"}),
    ("x9", {"os": "Ubuntu", "roles": ["db"]}, {"ntp": "pool.ntp.org", "users": {"alice": 1},
                                               "role": "db"}),
]


@pytest.mark.parametrize(("minion", "grains", "expected"), CASES)
def test_native_compiler(roots: dict[str, list[str]], minion: str, grains: dict[str, Any],
                         expected: dict[str, Any]) -> None:
    assert NativePillar(roots, {}).compile(minion, grains, None, None) == expected


@pytest.mark.parametrize(("minion", "grains", "expected"), CASES)
def test_salt_compiler_agrees(tmp_path: Path, roots: dict[str, list[str]], minion: str,
                              grains: dict[str, Any], expected: dict[str, Any]) -> None:
    pytest.importorskip("salt")
    opts = {"cachedir": str(tmp_path / "cache"), "id": "m", "log_file": str(tmp_path / "log")}
    assert SaltPillar(roots, opts).compile(minion, grains, None, None) == expected


def test_salt_compiler_renders_jinja_with_grains(tmp_path: Path) -> None:
    pytest.importorskip("salt")
    (tmp_path / "top.sls").write_text("base:\n  '*':\n    - motd\n")
    (tmp_path / "motd.sls").write_text("motd: hello {{ grains['id'] }}\nn: {{ 3 * 2 }}\n")
    compiler = SaltPillar({"base": [str(tmp_path)]}, {"cachedir": str(tmp_path / "c")})
    assert compiler.compile("web1", {"id": "web1"}, None, {"o": 1}) == {
        "motd": "hello web1", "n": 6, "o": 1}


def test_errors_and_override(roots: dict[str, list[str]], tmp_path: Path) -> None:
    (tmp_path / "top.sls").write_text(TOP + "  'bad*':\n    - missing\n    - broken\n"
                                      "  'G@x':\n    - match: nonsense\n    - common\n")
    (tmp_path / "broken.sls").write_text("a: [unclosed\n")
    pillar = NativePillar(roots, {}).compile("bad1", {}, None, {"users": {"eve": 3}})
    assert pillar["users"] == {"alice": 1, "eve": 3}
    errors = pillar["_errors"]
    assert any("'missing' in environment 'base' is not available" in e for e in errors)
    assert any("Rendering SLS 'broken.sls'" in e for e in errors)
    assert any("match type 'nonsense'" in e for e in errors)


def test_merge_is_recursive_and_replaces_the_rest() -> None:
    assert merge({"a": {"b": 1, "c": [1]}, "d": 1}, {"a": {"c": [2]}, "d": {"e": 1}}) == {
        "a": {"b": 1, "c": [2]}, "d": {"e": 1}}


def test_salts_own_keys_reach_salts_pillar(tmp_path: Path) -> None:
    """Keys raetsalt leaves to Salt (``opts['__salt']``: ext_pillar here) reach Salt's
    pillar compiler; raetsalt's own paths still win."""
    pytest.importorskip("salt")
    (tmp_path / "top.sls").write_text("base:\n  '*':\n    - plain\n")
    (tmp_path / "plain.sls").write_text("plain: 1\n")
    salt_keys = {"ext_pillar": [{"cmd_yaml": "echo 'extra: 2'"}],
                 "cachedir": "/nowhere"}
    compiler = SaltPillar({"base": [str(tmp_path)]},
                          {"cachedir": str(tmp_path / "c"), "__salt": salt_keys})
    assert compiler.opts["cachedir"] == str(tmp_path / "c" / "salt")
    assert compiler.compile("web1", {"id": "web1"}, None, None) == {"plain": 1, "extra": 2}
