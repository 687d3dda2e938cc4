"""Table-driven tests for raetsalt.acl (Salt 3008 peer / peer_run / ACL semantics)."""
# ruff: noqa: E501 - the rule tables read better one case per line

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.acl import (
    Decision,
    check_blacklist,
    check_eauth,
    check_peer,
    check_peer_run,
    check_publisher_acl,
    check_publisher_acl_runner,
    fill_auth_list,
    normalized_arg,
    parse_args,
    split_functions,
)
from raetsalt.acl_config import (
    validate_acl_config,
    validate_eauth_config,
    validate_master_access,
    validate_peer_config,
    validate_peer_run_config,
)
from raetsalt.errors import ConfigError
from raetsalt.protocol import unpack_args

MINIONS: dict[str, dict[str, Any] | None] = {
    "web1.example.com": {"os": "RedHat", "roles": ["web"]},
    "web2.example.com": {"os": "Ubuntu", "roles": ["web"]},
    "db1.example.com": {"os": "RedHat", "roles": ["db"]},
    "mongo1": {"os": "Ubuntu"},
    "mongo2": {"os": "RedHat"},
    "log1": {"os": "Ubuntu"},
    "webserv1": {"os": "Ubuntu"},
    "minion.foo.org": {"os": "Debian"},
    "nocache": None,
}
NODEGROUPS = {"mongos": ["mongo1", "mongo2"], "webs": "web*"}

PEERS: dict[str, Any] = {
    # Salt's peer page, verbatim examples.
    "open": {".*": [".*"]},
    "example": {".*example.com": ["test.*", "ps.*", "pkg.*"]},
    "two": {
        ".*example.com": ["test.*", "ps.*", "pkg.*"],
        ".*foo.org": ["test.*", "ps.*", "pkg.*"],
    },
    # Target dicts, argument rules, compound and nodegroup keys.
    "targeted": {
        "web.*": [
            {"db*": ["cmd.run", {"test.echo": {"args": ["hello", None], "kwargs": {"tag": "ok.*"}}}]},
            {"G@os:Ubuntu": ["pkg.list_pkgs$"]},
            {"L@mongo1,mongo2": ["network.ip_addrs"]},
            {"*": ["test.ping$"]},
            {"mongo* and G@os:RedHat": ["service.*"]},
            {"N@mongos": ["disk.usage"]},
        ],
    },
    "anchors": {"web": ["network.ip_addrs"], "log1$": ["test.ping$"], "mongo1": ["grains.item"]},
    "nonlist": {".*": "test.ping"},
    "empty": {},
    "multi_spec": {
        ".*": [{"*": [{"file.read": [{"args": ["/etc/hosts$"]}, {"args": ["/tmp/.*"]}]}]}],
    },
    "kwonly": {".*": [{"*": [{"cmd.run": {"kwargs": {"cwd": "/tmp$", "runas": None}}}]}]},
    "twokeys": {".*": [{"*": ["test.ping"], "db*": ["cmd.run"]}]},
    "at_key": {".*": [{"@runner": ["manage.*"]}]},
    "badrx": {"(": [".*"], ".*": ["("]},
}

E = "web1.example.com"
# (peer config, requesting id, fun, arg, tgt, tgt_type, allowed)
PEER_CASES: list[tuple[str, str, Any, Any, Any, str, bool]] = [
    # `.*` opens everything, except the publish.* recursion guard
    ("open", "mongo1", "test.ping", [], "*", "glob", True),
    ("open", "mongo1", "cmd.run", ["rm -rf /"], "*", "glob", True),
    ("open", "nocache", "state.apply", [], "G@os:Ubuntu", "compound", True),
    ("open", "mongo1", "publish.publish", [], "*", "glob", False),
    ("open", "mongo1", "publish.runner", [], "*", "glob", False),
    ("open", "mongo1", "test.ping,publish.publish", [[], []], "*", "glob", False),
    ("open", "mongo1", "publishX.foo", [], "*", "glob", True),
    ("open", "mongo1", "test.ping", [], "( bad", "compound", False),
    # `.*example.com` with test.*, ps.*, pkg.*
    ("example", E, "test.ping", [], "*", "glob", True),
    ("example", E, "test.version", [], "*", "glob", True),
    ("example", E, "ps.top", [], "*", "glob", True),
    ("example", E, "pkg.install", ["vim"], "*", "glob", True),
    ("example", E, "cmd.run", ["ls"], "*", "glob", False),
    ("example", E, "state.apply", [], "*", "glob", False),
    ("example", "db1.example.com", "ps.kill_pid", ["1"], "web*", "glob", True),
    ("example", "mongo1", "test.ping", [], "*", "glob", False),
    ("example", "minion.foo.org", "test.ping", [], "*", "glob", False),
    ("example", "example.com.evil", "test.ping", [], "*", "glob", True),  # prefix only
    ("example", "xexample.com", "test.ping", [], "*", "glob", True),
    ("example", "examplexcom", "test.ping", [], "*", "glob", True),  # '.' is any char
    ("example", "exampleco", "test.ping", [], "*", "glob", False),
    ("example", E, "testfoo.x", [], "*", "glob", True),  # test.* is a prefix regex
    ("example", E, "tes", [], "*", "glob", False),
    ("example", E, "pkgs.x", [], "*", "glob", True),  # '.' is any char
    ("example", E, "Test.ping", [], "*", "glob", False),
    # several id regexes
    ("two", "minion.foo.org", "test.ping", [], "*", "glob", True),
    ("two", "minion.foo.org", "pkg.refresh_db", [], "*", "glob", True),
    ("two", "minion.foo.org", "cmd.run", [], "*", "glob", False),
    ("two", E, "ps.top", [], "*", "glob", True),
    ("two", "mongo1", "test.ping", [], "*", "glob", False),
    ("two", "foo.org", "test.ping", [], "*", "glob", True),
    # comma commands: every function must be allowed
    ("example", E, "test.ping,pkg.version", [[], ["vim"]], "*", "glob", True),
    ("example", E, "test.ping,cmd.run", [[], ["ls"]], "*", "glob", False),
    ("example", E, "cmd.run,test.ping", [["ls"], []], "*", "glob", False),
    ("example", E, ["test.ping", "ps.top"], [[], []], "*", "glob", True),
    ("example", E, ["test.ping", "cmd.run"], [[], []], "*", "glob", False),
    ("example", E, "saltutil.find_job", ["123"], "*", "glob", False),  # no whitelist for peer
    ("example", E, "test.ping,saltutil.find_job", [[], []], "*", "glob", False),
    ("example", E, "test.ping,", [[], []], "*", "glob", False),
    ("example", E, "", [], "*", "glob", False),
    # target dicts: the whole target must fall inside the key's set
    ("targeted", E, "cmd.run", ["ls"], "db*", "glob", True),
    ("targeted", E, "cmd.run", ["ls"], "db1.example.com", "glob", True),
    ("targeted", E, "cmd.run", ["ls"], "db1.example.com", "list", True),
    ("targeted", E, "cmd.run", ["ls"], "db1.example.com,mongo1", "list", False),
    ("targeted", E, "cmd.run", ["ls"], "*", "glob", False),
    ("targeted", E, "cmd.run", ["ls"], "d*", "glob", True),  # same set as db*
    ("targeted", E, "cmd.run", ["ls"], "^db", "pcre", True),
    # the uncached minion might have roles:db and is not inside db*
    ("targeted", E, "cmd.run", ["ls"], "G@roles:db", "compound", False),
    ("targeted", E, "cmd.run", ["ls"], "G@roles:db and db*", "compound", True),
    ("targeted", E, "cmd.run", ["ls"], "os:RedHat", "grain", False),
    ("targeted", E, "cmd.run", ["ls"], "nothing*", "glob", True),  # empty target passes
    ("targeted", E, "cmd.runx", ["ls"], "db*", "glob", True),
    ("targeted", E, "cmd.script", ["ls"], "db*", "glob", False),
    ("targeted", E, "pkg.list_pkgs", [], "G@os:Ubuntu", "compound", True),
    ("targeted", E, "pkg.list_pkgs", [], "os:ubuntu", "grain", True),
    ("targeted", E, "pkg.list_pkgs", [], "mongo1", "glob", True),
    ("targeted", E, "pkg.list_pkgs", [], "mongo*", "glob", False),
    ("targeted", E, "pkg.list_pkgs", [], "webserv1,log1,mongo1", "list", True),
    ("targeted", E, "pkg.list_pkgs_extra", [], "mongo1", "glob", False),
    ("targeted", E, "network.ip_addrs", [], "mongo*", "glob", True),
    ("targeted", E, "network.ip_addrs6", [], "mongo1", "glob", True),
    ("targeted", E, "network.ip_addrs", [], "mongo*", "pcre", True),
    ("targeted", E, "network.ip_addrs", [], "mongo", "pcre", True),
    ("targeted", E, "network.ip_addrs", [], "log1", "glob", False),
    ("targeted", E, "test.ping", [], "*", "glob", True),
    ("targeted", E, "test.ping", [], "not db*", "compound", True),
    ("targeted", E, "test.pingx", [], "*", "glob", False),
    ("targeted", E, "service.restart", ["x"], "mongo2", "glob", True),
    ("targeted", E, "service.restart", ["x"], "mongo1", "glob", False),
    ("targeted", E, "service.restart", ["x"], "mongo*", "glob", False),
    ("targeted", E, "service.restart", ["x"], "G@os:RedHat and mongo*", "compound", True),
    ("targeted", E, "disk.usage", [], "mongo*", "glob", True),
    ("targeted", E, "disk.usage", [], "mongos", "nodegroup", True),
    ("targeted", E, "disk.usage", [], "webs", "nodegroup", False),
    ("targeted", E, "disk.usage", [], "N@mongos and G@os:Ubuntu", "compound", True),
    # uncached minions: unknown grains never widen what a target may reach
    ("targeted", E, "pkg.list_pkgs", [], "nocache", "glob", False),
    ("targeted", E, "pkg.list_pkgs", [], "G@os:Ubuntu", "compound", True),
    ("targeted", E, "test.ping", [], "nocache", "glob", True),
    ("targeted", E, "cmd.run", ["ls"], "not G@os:Ubuntu", "compound", False),
    # argument rules (positional prefix regexes, None = any, kwargs)
    ("targeted", E, "test.echo", ["hello", "x", "tag=ok1"], "db*", "glob", True),
    ("targeted", E, "test.echo", ["hello world", "x", "tag=okay"], "db*", "glob", True),
    ("targeted", E, "test.echo", ["hello", "x", "extra", "tag=ok"], "db*", "glob", False),  # one too many
    ("targeted", E, "test.echo", ["hello", "tag=ok"], "db*", "glob", False),  # arg 1 missing
    ("targeted", E, "test.echo", ["bye", "x", "tag=ok"], "db*", "glob", False),
    ("targeted", E, "test.echo", ["hello", "x"], "db*", "glob", False),  # kwarg missing
    ("targeted", E, "test.echo", ["hello", "x", "tag=bad"], "db*", "glob", False),
    ("targeted", E, "test.echo", ["hello", "x", {"__kwarg__": True, "tag": "ok"}], "db*", "glob", True),
    ("targeted", E, "test.echo", ["hello", "x", {"tag": "ok"}], "db*", "glob", False),
    ("targeted", E, "test.echo", ["hello", "x", "tag=ok"], "*", "glob", False),
    ("targeted", E, "test.echo", ["hello", 5, "tag=ok"], "db*", "glob", True),
    ("targeted", E, "test.echo", ["hello", "x", "tag==ok"], "db*", "glob", False),
    ("targeted", E, "test.echo", ["hello", "x", "tag=ok"], "db1.example.com", "list", True),
    ("multi_spec", "mongo1", "file.read", ["/etc/hosts"], "*", "glob", True),
    ("multi_spec", "mongo1", "file.read", ["/etc/hostsx"], "*", "glob", False),
    ("multi_spec", "mongo1", "file.read", ["/tmp/a"], "*", "glob", True),
    ("multi_spec", "mongo1", "file.read", ["/etc/shadow"], "*", "glob", False),
    ("multi_spec", "mongo1", "file.read", [], "*", "glob", False),
    ("multi_spec", "mongo1", "file.read", "/tmp/x", "*", "glob", True),  # one string arg
    ("kwonly", "mongo1", "cmd.run", ["cwd=/tmp", "runas=bob"], "*", "glob", True),
    ("kwonly", "mongo1", "cmd.run", ["ls", "cwd=/tmp", "runas=bob"], "*", "glob", False),  # no args rule
    ("kwonly", "mongo1", "cmd.run", ["cwd=/tmp/x", "runas=bob"], "*", "glob", False),
    ("kwonly", "mongo1", "cmd.run", ["cwd=/tmp"], "*", "glob", False),
    ("kwonly", "mongo1", "cmd.run", ["runas=", "cwd=/tmp"], "*", "glob", True),
    ("kwonly", "mongo1", "cmd.run", ["runas=", "cwd=/tmp", "env={}"], "*", "glob", False),
    # id keys are prefix regexes too
    ("anchors", "webserv1", "network.ip_addrs", [], "*", "glob", True),
    ("anchors", "web1.example.com", "network.ip_addrs", [], "*", "glob", True),
    ("anchors", "webserv1", "network.ip_addrs6", [], "*", "glob", True),
    ("anchors", "log1", "test.ping", [], "*", "glob", True),
    ("anchors", "log10", "test.ping", [], "*", "glob", False),
    ("anchors", "log1", "test.pingx", [], "*", "glob", False),
    ("anchors", "mongo10", "grains.item", ["os"], "*", "glob", True),
    ("anchors", "xmongo1", "grains.item", ["os"], "*", "glob", False),
    ("anchors", "Webserv1", "network.ip_addrs", [], "*", "glob", False),
    # shapes Salt ignores
    ("nonlist", "mongo1", "test.ping", [], "*", "glob", False),
    ("empty", "mongo1", "test.ping", [], "*", "glob", False),
    ("twokeys", "mongo1", "test.ping", [], "*", "glob", False),
    ("at_key", "mongo1", "manage.up", [], "*", "glob", False),
    ("badrx", "mongo1", "test.ping", [], "*", "glob", False),
]


@pytest.mark.parametrize(("cfg", "mid", "fun", "arg", "tgt", "tgt_type", "allowed"), PEER_CASES)
def test_check_peer(cfg: str, mid: str, fun: Any, arg: Any, tgt: Any, tgt_type: str, allowed: bool) -> None:
    d = check_peer(PEERS[cfg], mid, fun, arg, tgt, tgt_type, MINIONS, NODEGROUPS)
    assert isinstance(d, Decision)
    assert d.allowed is allowed, d.reason
    assert bool(d) is allowed
    if allowed:
        assert d.rule
    assert d.reason


def test_peer_none_is_disabled() -> None:
    d = check_peer(None, "mongo1", "test.ping", [], "*", "glob", MINIONS)
    assert not d.allowed and "disabled" in d.reason


def test_peer_strict_mode() -> None:
    cfg = PEERS["anchors"]
    assert check_peer(cfg, "web", "network.ip_addrs6", [], "*", "glob", MINIONS).allowed
    assert not check_peer(cfg, "web", "network.ip_addrs6", [], "*", "glob", MINIONS,
                          strict=True).allowed
    assert check_peer(cfg, "web", "network.ip_addrs", [], "*", "glob", MINIONS, strict=True).allowed
    assert check_peer(cfg, "webserv1", "network.ip_addrs", [], "*", "glob", MINIONS).allowed
    assert not check_peer(cfg, "webserv1", "network.ip_addrs", [], "*", "glob", MINIONS,
                          strict=True).allowed
    args_cfg = {".*": [{"*": [{"cmd.run": {"args": ["ls"]}}]}]}
    assert check_peer(args_cfg, "m", "cmd.run", ["ls; rm -rf /"], "*", "glob", MINIONS).allowed
    assert not check_peer(args_cfg, "m", "cmd.run", ["ls; rm -rf /"], "*", "glob", MINIONS,
                          strict=True).allowed


def test_peer_kwarg_parameter() -> None:
    cfg = PEERS["kwonly"]
    d = check_peer(cfg, "mongo1", "cmd.run", [], "*", "glob", MINIONS,
                   kwarg={"cwd": "/tmp", "runas": "x"})
    assert d.allowed
    d = check_peer(cfg, "mongo1", "cmd.run", ["ls"], "*", "glob", MINIONS,
                   kwarg={"cwd": "/tmp", "runas": "x"})
    assert not d.allowed and "positional argument 1 ('ls') is not allowed" in d.reason


# ---------------------------------------------------------------------------
# Reason texts: what was denied and why, without leaking other rules
# ---------------------------------------------------------------------------


def test_reason_no_id_rule() -> None:
    d = check_peer(PEERS["two"], "mongo1", "test.ping", [], "*", "glob", MINIONS)
    assert d.reason == "no peer rule matches minion id 'mongo1'"
    assert "example" not in d.reason and "foo.org" not in d.reason
    assert d.rule is None


def test_reason_no_function_rule() -> None:
    d = check_peer(PEERS["two"], E, "cmd.run", ["ls"], "*", "glob", MINIONS)
    assert d.reason == "minion 'web1.example.com' may not run 'cmd.run': no function rule allows it"
    assert "test." not in d.reason and "foo.org" not in d.reason


def test_reason_target_outside() -> None:
    d = check_peer(PEERS["targeted"], E, "cmd.run", ["ls"], "*", "glob", MINIONS)
    assert "target '*' (glob)" in d.reason
    assert "outside the allowed expression" in d.reason
    assert "db*" not in d.reason
    assert d.rule is not None and "db*" in d.rule  # operators see the rule


def test_reason_arguments() -> None:
    d = check_peer(PEERS["targeted"], E, "test.echo", ["bye", "x", "tag=ok"], "db*", "glob", MINIONS)
    assert "may not run 'test.echo' with these arguments" in d.reason
    assert "hello" not in d.reason


def test_reason_names_the_denied_function_of_a_comma_command() -> None:
    d = check_peer(PEERS["example"], E, "test.ping,cmd.run,ps.top", [[], [], []], "*", "glob", MINIONS)
    assert "'cmd.run'" in d.reason and "'test.ping'" not in d.reason


def test_reason_recursion_and_invalid_target() -> None:
    d = check_peer(PEERS["open"], "mongo1", "publish.publish", [], "*", "glob", MINIONS)
    assert "publish.*" in d.reason
    d = check_peer(PEERS["open"], "mongo1", "test.ping", [], "X@y", "compound", MINIONS)
    assert d.reason.startswith("minion 'mongo1': invalid target") and "X@" in d.reason
    d = check_peer(PEERS["open"], "mongo1", "test.ping", [], "R@%cluster", "compound", MINIONS)
    assert d.reason.startswith("minion 'mongo1': invalid target") and "range" in d.reason


def test_rule_lists_every_deciding_rule() -> None:
    d = check_peer(PEERS["example"], E, "test.ping,pkg.version", [[], []], "*", "glob", MINIONS)
    assert d.rule == "peer['.*example.com'] -> 'test.*'; peer['.*example.com'] -> 'pkg.*'"
    d = check_peer(PEERS["targeted"], E, "service.stop", ["x"], "mongo2", "glob", MINIONS)
    assert d.rule == "peer['web.*'] -> 'mongo* and G@os:RedHat' -> 'service.*'"


# ---------------------------------------------------------------------------
# peer_run
# ---------------------------------------------------------------------------

PEER_RUNS: dict[str, Any] = {
    "open": {".*": [".*"]},
    "example": {".*example.com": ["manage.*", "jobs.*"]},
    "args": {"mongo.*": [{"jobs.lookup_jid": {"args": [r"\d+$"]}}, "manage.up$"]},
    "nonlist": {".*": "manage.up"},
    "badrx": {"*": ["manage.*"]},
}
# (config, id, fun, arg, allowed)
PEER_RUN_CASES: list[tuple[str, str, Any, Any, bool]] = [
    ("open", "mongo1", "manage.up", None, True),
    ("open", "mongo1", "state.orchestrate", ["x"], True),
    ("open", "mongo1", "manage", None, False),
    ("open", "mongo1", "a.b.c", None, False),
    ("example", E, "manage.up", None, True),
    ("example", E, "manage.down", None, True),
    ("example", E, "jobs.lookup_jid", ["1"], True),
    ("example", E, "jobs.list_jobs", None, True),
    ("example", E, "state.orchestrate", None, False),
    ("example", E, "cache.grains", None, False),
    ("example", E, "managex.up", None, True),
    ("example", "mongo1", "manage.up", None, False),
    ("example", "db1.example.com", "manage.status", None, True),
    ("example", E, "manage.up,jobs.active", None, True),
    ("example", E, "manage.up,state.orch", None, False),
    ("example", E, "", None, False),
    ("args", "mongo1", "jobs.lookup_jid", ["20240101"], True),
    ("args", "mongo1", "jobs.lookup_jid", ["2024x"], False),
    ("args", "mongo1", "jobs.lookup_jid", [], False),
    ("args", "mongo1", "jobs.lookup_jid", "123", True),
    ("args", "mongo1", "manage.up", None, True),
    ("args", "mongo1", "manage.upx", None, False),
    ("args", "mongo1", "manage.down", None, False),
    ("args", "web1", "manage.up", None, False),
    ("nonlist", "mongo1", "manage.up", None, False),
    ("badrx", "mongo1", "manage.up", None, False),
]


@pytest.mark.parametrize(("cfg", "mid", "fun", "arg", "allowed"), PEER_RUN_CASES)
def test_check_peer_run(cfg: str, mid: str, fun: Any, arg: Any, allowed: bool) -> None:
    d = check_peer_run(PEER_RUNS[cfg], mid, fun, arg=arg)
    assert d.allowed is allowed, d.reason
    assert d.reason


def test_peer_run_default_absent_and_reasons() -> None:
    assert "disabled" in check_peer_run(None, "m", "manage.up").reason
    assert "disabled" in check_peer_run({}, "m", "manage.up").reason
    d = check_peer_run(PEER_RUNS["example"], "mongo1", "manage.up")
    assert d.reason == "no peer_run rule matches minion id 'mongo1'"
    d = check_peer_run(PEER_RUNS["example"], E, "state.orch")
    assert d.reason == "minion 'web1.example.com' may not run 'state.orch': no runner rule allows it"
    d = check_peer_run(PEER_RUNS["example"], E, "manage.up")
    assert d.rule == "peer_run['.*example.com'] -> 'manage.*'"
    d = check_peer_run(PEER_RUNS["args"], "mongo1", "jobs.lookup_jid", arg=["x"])
    assert "with these arguments" in d.reason


# ---------------------------------------------------------------------------
# publisher_acl
# ---------------------------------------------------------------------------

ACLS: dict[str, Any] = {
    # Salt's ACL page: a glob target key, a grain key, an unrestricted user.
    "doc": {
        "fred": [{"web*": ["pkg.list_pkgs", "test.*", "apache.*"]}],
        "dave": [
            "test.version",
            {"mongo*": ["network.*"]},
            {"log*": ["network.*", "pkg.*"]},
            {"G@os:RedHat": ["kmod.*"]},
        ],
        "steve": [".*"],
    },
    "patterns": {
        "admin|manager_.*": ["saltutil.*"],
        "user_*": [{"web* and G@os:Ubuntu": [{"my_mod.*": {"args": ["a.*", "b.*"],
                                                          "kwargs": {"kwa": "kwa.*", "kwb": "kwb"}}}]}],
        "ops%": ["state.*"],
        "*": ["test.ping$"],
    },
    "empty_user": {"bob": []},
}
BLACKLISTS: dict[str, Any] = {
    "none": None,
    "doc": {"users": ["root", "^(?!sudo_).*$"], "modules": ["cmd.*", "test.echo"]},
    "mods": {"modules": ["cmd.*", "test.echo"]},
    "users": {"users": ["mallory", "eve*"]},
}
# (acl, user, groups, fun, arg, tgt, tgt_type, blacklist, allowed)
ACL_CASES: list[tuple[str, str, list[str], Any, Any, Any, str, str, bool]] = [
    ("doc", "fred", [], "pkg.list_pkgs", [], "web*", "glob", "none", True),
    ("doc", "fred", [], "test.ping", [], "web*", "glob", "none", True),
    ("doc", "fred", [], "apache.signal", ["restart"], "web1.example.com", "glob", "none", True),
    ("doc", "fred", [], "test.ping", [], "*", "glob", "none", False),
    ("doc", "fred", [], "test.ping", [], "webserv1", "list", "none", True),
    ("doc", "fred", [], "test.ping", [], "mongo1", "glob", "none", False),
    ("doc", "fred", [], "pkg.install", ["vim"], "web*", "glob", "none", False),
    ("doc", "fred", [], "pkg.list_pkgs_x", [], "web*", "glob", "none", True),
    ("doc", "fred", [], "cmd.run", ["ls"], "web*", "glob", "none", False),
    ("doc", "fred", [], "test.ping", [], "G@roles:web", "compound", "none", False),  # nocache
    ("doc", "fred", [], "test.ping", [], "G@roles:web and web*", "compound", "none", True),
    ("doc", "fred", [], "test.ping", [], "G@os:Ubuntu", "compound", "none", False),
    ("doc", "fred", [], "test.ping,apache.version", [[], []], "web*", "glob", "none", True),
    ("doc", "fred", [], "test.ping,cmd.run", [[], []], "web*", "glob", "none", False),
    ("doc", "fred", [], "saltutil.find_job", ["1"], "*", "glob", "none", True),
    ("doc", "fred", [], "saltutil.find_job,cmd.run", [["1"], ["ls"]], "*", "glob", "none", False),
    ("doc", "fred", [], "saltutil.find_jobx", [], "web*", "glob", "none", False),
    ("doc", "dave", [], "test.version", [], "*", "glob", "none", True),
    ("doc", "dave", [], "test.ping", [], "*", "glob", "none", False),
    ("doc", "dave", [], "network.ip_addrs", [], "mongo*", "glob", "none", True),
    ("doc", "dave", [], "network.ip_addrs", [], "mongo1,mongo2", "list", "none", True),
    ("doc", "dave", [], "network.ip_addrs", [], "log1", "glob", "none", True),
    ("doc", "dave", [], "network.ip_addrs", [], "mongo1,log1", "list", "none", False),
    ("doc", "dave", [], "network.ip_addrs", [], "*", "glob", "none", False),
    ("doc", "dave", [], "pkg.install", ["x"], "log*", "glob", "none", True),
    ("doc", "dave", [], "pkg.install", ["x"], "mongo*", "glob", "none", False),
    ("doc", "dave", [], "kmod.load", ["x"], "G@os:RedHat", "compound", "none", True),
    ("doc", "dave", [], "kmod.load", ["x"], "os:redhat", "grain", "none", True),
    ("doc", "dave", [], "kmod.load", ["x"], "mongo2", "glob", "none", True),
    ("doc", "dave", [], "kmod.load", ["x"], "mongo*", "glob", "none", False),
    ("doc", "dave", [], "kmod.load", ["x"], "nocache", "glob", "none", False),
    ("doc", "dave", [], "kmod.load", ["x"], "db1.example.com,web1.example.com", "list", "none", True),
    ("doc", "steve", [], "cmd.run", ["rm -rf /"], "*", "glob", "none", True),
    ("doc", "steve", [], "anything.at_all", [], "R@x", "compound", "none", False),
    ("doc", "nobody", [], "test.ping", [], "*", "glob", "none", False),
    ("doc", "fredrick", [], "test.ping", [], "web*", "glob", "none", False),
    ("doc", "root", [], "cmd.run", ["ls"], "*", "glob", "none", True),
    ("doc", "salt", [], "cmd.run", ["ls"], "*", "glob", "none", True),  # master user
    # user patterns: glob or full-match regex; groups; '*' fallback
    ("patterns", "admin", [], "saltutil.sync_all", [], "*", "glob", "none", True),
    ("patterns", "manager_1", [], "saltutil.refresh_pillar", [], "*", "glob", "none", True),
    ("patterns", "admin2", [], "saltutil.sync_all", [], "*", "glob", "none", False),
    ("patterns", "admin2", [], "test.ping", [], "*", "glob", "none", True),  # '*' fallback
    ("patterns", "xadmin", [], "saltutil.sync_all", [], "*", "glob", "none", False),
    ("patterns", "user_a", [], "test.ping", [], "*", "glob", "none", False),  # matched: no '*'
    ("patterns", "user_a", [], "my_mod.f", ["a1", "b2", "kwa=kwa1", "kwb=kwb"], "webserv1", "glob", "none", True),
    ("patterns", "user_a", [], "my_mod.f", ["a1", "b2", "kwa=kwa1", "kwb=kwbX"], "webserv1", "glob", "none", True),
    ("patterns", "user_a", [], "my_mod.f", ["a1", "c2", "kwa=kwa1", "kwb=kwb"], "webserv1", "glob", "none", False),
    ("patterns", "user_a", [], "my_mod.f", ["a1", "b2", "kwb=kwb"], "webserv1", "glob", "none", False),
    ("patterns", "user_a", [], "my_mod.f", ["a1"], "webserv1", "glob", "none", False),
    ("patterns", "user_a", [], "my_mod.f", ["a1", "b2", "kwa=kwa1", "kwb=kwb"], "web*", "glob", "none", False),
    ("patterns", "user_a", [], "my_mod.f", ["a1", "b2", "kwa=kwa1", "kwb=kwb"], "web2.example.com", "glob", "none", True),
    ("patterns", "carol", ["ops"], "state.apply", [], "*", "glob", "none", True),
    ("patterns", "carol", ["ops"], "test.ping", [], "*", "glob", "none", True),  # no name match
    ("patterns", "carol", ["dev"], "state.apply", [], "*", "glob", "none", False),
    ("patterns", "carol", [], "test.ping", [], "*", "glob", "none", True),
    ("patterns", "carol", [], "test.pingx", [], "*", "glob", "none", False),
    ("empty_user", "bob", [], "test.ping", [], "*", "glob", "none", False),
    # blacklist: checked first, for everyone, per function
    ("doc", "steve", [], "cmd.run", ["ls"], "*", "glob", "mods", False),
    ("doc", "steve", [], "test.echo", ["x"], "*", "glob", "mods", False),
    ("doc", "steve", [], "test.echoes", ["x"], "*", "glob", "mods", False),
    ("doc", "steve", [], "test.ping", [], "*", "glob", "mods", True),
    ("doc", "steve", [], "test.ping,cmd.run", [[], []], "*", "glob", "mods", False),
    ("doc", "root", [], "cmd.run", ["ls"], "*", "glob", "mods", False),
    ("doc", "root", [], "test.ping", [], "*", "glob", "doc", False),
    ("doc", "steve", [], "test.ping", [], "*", "glob", "doc", False),  # not sudo_*
    ("doc", "steve", [], "test.ping", [], "*", "glob", "users", True),
    ("doc", "mallory", [], "test.ping", [], "*", "glob", "users", False),
    ("doc", "eve2", [], "test.ping", [], "*", "glob", "users", False),
    ("doc", "steve", [], "test.ping", [], "*", "glob", "none", True),
]


@pytest.mark.parametrize(
    ("acl", "user", "groups", "fun", "arg", "tgt", "tgt_type", "bl", "allowed"), ACL_CASES
)
def test_check_publisher_acl(
    acl: str, user: str, groups: list[str], fun: Any, arg: Any, tgt: Any, tgt_type: str,
    bl: str, allowed: bool,
) -> None:
    d = check_publisher_acl(
        ACLS[acl], user, groups, fun, arg, tgt, tgt_type, MINIONS, BLACKLISTS[bl],
        unrestricted=("root", "salt"),
    )
    assert d.allowed is allowed, d.reason
    assert d.reason


def test_publisher_acl_reasons() -> None:
    d = check_publisher_acl(ACLS["doc"], "nobody", [], "test.ping", [], "*", "glob", MINIONS)
    assert d.reason == "user 'nobody' has no publisher_acl entry"
    d = check_publisher_acl(ACLS["doc"], "root", [], "cmd.run", [], "*", "glob", MINIONS)
    assert d.allowed and d.reason == "user 'root' is unrestricted" and d.rule is None
    d = check_publisher_acl(ACLS["doc"], "steve", [], "test.ping,cmd.run", [[], []], "*",
                            "glob", MINIONS, BLACKLISTS["mods"])
    assert "'cmd.run'" in d.reason and "blacklisted" in d.reason
    assert d.rule == "publisher_acl_blacklist['modules'][0] -> 'cmd.*'"
    d = check_publisher_acl(ACLS["doc"], "mallory", [], "test.ping", [], "*", "glob", MINIONS,
                            BLACKLISTS["users"])
    assert d.reason == "user 'mallory' is blacklisted by publisher_acl_blacklist"
    d = check_publisher_acl(ACLS["doc"], "fred", [], "saltutil.find_job", ["1"], "*", "glob", MINIONS)
    assert d.rule == "whitelist -> 'saltutil.find_job'"
    d = check_publisher_acl(ACLS["doc"], "dave", [], "kmod.load", [], "G@os:RedHat", "compound",
                            MINIONS)
    assert d.rule == "publisher_acl['dave'] -> 'G@os:RedHat' -> 'kmod.*'"


def test_root_is_not_unrestricted_unless_listed() -> None:
    d = check_publisher_acl(ACLS["doc"], "root", [], "cmd.run", [], "*", "glob", MINIONS,
                            unrestricted=())
    assert not d.allowed


def test_permissive_acl_adds_star() -> None:
    acl = ACLS["patterns"]
    assert not check_publisher_acl(acl, "user_a", [], "test.ping", [], "*", "glob", MINIONS).allowed
    assert check_publisher_acl(acl, "user_a", [], "test.ping", [], "*", "glob", MINIONS,
                               permissive=True).allowed


# ---------------------------------------------------------------------------
# external_auth
# ---------------------------------------------------------------------------

EAUTH: dict[str, Any] = {
    "pam": {
        "fred": ["test.*", {"G@os:RedHat": ["kmod.*"]}],
        "admin.*": [".*", "@runner", "@wheel", "@jobs"],
        "ops%": [
            {"@runner": ["manage.*", {"jobs.lookup_jid": {"args": [r"\d+"]}}]},
            {"@wheel": ["key.list_all"]},
        ],
        "mod_user": [{"@manage": ["up$", "down$"]}, "@jobs"],
        "*": ["test.ping"],
    },
}
# (user, groups, fun, arg, tgt, kind, allowed)
EAUTH_CASES: list[tuple[str, list[str], Any, Any, Any, str, bool]] = [
    ("fred", [], "test.ping", [], "*", "publish", True),
    ("fred", [], "test.ping,cmd.run", [[], []], "*", "publish", False),
    ("fred", [], "saltutil.find_job,cmd.run", [[], []], "*", "publish", False),
    ("fred", [], "saltutil.find_job", ["1"], "*", "publish", True),
    ("fred", [], "kmod.load", ["x"], "G@os:RedHat", "publish", True),
    ("fred", [], "kmod.load", ["x"], "*", "publish", False),
    ("fred", [], "manage.up", [], None, "runner", False),
    ("admin1", [], "cmd.run", ["ls"], "*", "publish", True),
    ("admin1", [], "manage.up", [], None, "runner", True),
    ("admin1", [], "key.list_all", [], None, "wheel", True),
    ("admin1", [], "manage", [], None, "runner", False),  # Check syntax
    ("carol", ["ops"], "manage.up", [], None, "runner", True),
    ("carol", ["ops"], "jobs.lookup_jid", ["2024"], None, "runner", True),
    ("carol", ["ops"], "jobs.lookup_jid", ["x"], None, "runner", False),
    ("carol", ["ops"], "state.orch", [], None, "runner", False),
    ("carol", ["ops"], "key.list_all", [], None, "wheel", True),
    ("carol", ["ops"], "key.accept", ["m"], None, "wheel", False),
    ("carol", ["ops"], "test.ping", [], "*", "publish", True),  # '*' fallback
    ("carol", ["ops"], "manage.up", [], None, "wheel", False),
    ("mod_user", [], "manage.up", [], None, "runner", True),
    ("mod_user", [], "manage.upx", [], None, "runner", False),
    ("mod_user", [], "manage.status", [], None, "runner", False),
    ("mod_user", [], "jobs.active", [], None, "runner", True),
    ("mod_user", [], "jobs.list_jobs", [], None, "wheel", True),
    ("mod_user", [], "test.ping", [], "*", "publish", False),
    ("nobody", [], "test.ping", [], "*", "publish", True),
    ("nobody", [], "test.version", [], "*", "publish", False),
    ("nobody", [], "manage.up", [], None, "runner", False),
]


@pytest.mark.parametrize(("user", "groups", "fun", "arg", "tgt", "kind", "allowed"), EAUTH_CASES)
def test_check_eauth(user: str, groups: list[str], fun: Any, arg: Any, tgt: Any, kind: str,
                     allowed: bool) -> None:
    d = check_eauth(EAUTH, "pam", user, groups, fun, arg, tgt, "glob", MINIONS, kind=kind)
    assert d.allowed is allowed, d.reason


def test_eauth_reasons_and_backend() -> None:
    d = check_eauth(EAUTH, "ldap", "fred", [], "test.ping", [], "*", "glob", MINIONS)
    assert not d.allowed and "'ldap'" in d.reason
    d = check_eauth(EAUTH, "pam", "admin1", [], "manage", [], kind="runner")
    assert "Check syntax" in d.reason
    with pytest.raises(ValueError):
        check_eauth(EAUTH, "pam", "fred", [], "x.y", kind="cloud")
    d = check_eauth(EAUTH, "pam", "carol", ["ops"], "manage.up", kind="runner")
    assert d.rule == "external_auth['pam']['ops%'] -> '@runner' -> 'manage.*'"


def test_fill_auth_list() -> None:
    cfg = EAUTH["pam"]
    assert fill_auth_list(cfg, "x", "fred") == ["test.*", {"G@os:RedHat": ["kmod.*"]}]
    assert fill_auth_list(cfg, "x", "zed") == ["test.ping"]
    assert fill_auth_list(cfg, "x", "zed", ["ops"])[-1] == "test.ping"
    assert "test.ping" not in fill_auth_list(cfg, "x", "fred", permissive=False)
    assert "test.ping" in fill_auth_list(cfg, "x", "fred", permissive=True)


# ---------------------------------------------------------------------------
# Argument parsing and function splitting
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arg", "kwarg", "args", "kwargs"),
    [
        (None, None, [], {}),
        ("ls", None, ["ls"], {}),
        (5, None, [5], {}),
        (["a", "k=v"], None, ["a"], {"k": "v"}),
        (["k=v=w"], None, [], {"k": "v=w"}),
        (["a==b"], None, ["a==b"], {}),
        (["1k=v"], None, ["1k=v"], {}),
        (["echo a=b"], None, ["echo a=b"], {}),
        (["x", {"__kwarg__": True, "y": 1}], None, ["x"], {"y": 1}),
        (["x", {"y": 1}], None, ["x", {"y": 1}], {}),
        (["k=v"], {"k": "w"}, [], {"k": "w"}),
        (["my.key-1=v"], None, [], {"my.key-1": "v"}),
    ],
)
def test_parse_args(arg: Any, kwarg: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    assert parse_args(arg, kwarg) == (args, kwargs)


def test_split_functions() -> None:
    assert split_functions("a.b,c.d") == ["a.b", "c.d"]
    assert split_functions(["a.b", "c.d"]) == ["a.b", "c.d"]
    assert split_functions("a.b, c.d") == ["a.b", "c.d"]


def test_multi_function_args_are_per_function() -> None:
    cfg = {".*": [{"*": [{"test.echo": {"args": ["hi"]}}, "test.ping"]}]}
    ok = check_peer(cfg, "m", "test.ping,test.echo", [[], ["hi"]], "*", "glob", MINIONS)
    assert ok.allowed
    # Salt's peer form: one whitespace-separated string per function
    assert check_peer(cfg, "m", "test.ping,test.echo", ["", "hi"], "*", "glob", MINIONS).allowed
    assert not check_peer(cfg, "m", "test.ping,test.echo", ["", "hi there"], "*", "glob",
                          MINIONS).allowed
    assert not check_peer(cfg, "m", "test.ping,test.echo", [["hi"], []], "*", "glob", MINIONS).allowed
    assert not check_peer(cfg, "m", "test.ping,test.echo", [], "*", "glob", MINIONS).allowed


# ---------------------------------------------------------------------------
# Config validation
# ---------------------------------------------------------------------------

VALID_CONFIGS: list[tuple[Any, Any]] = [
    (validate_peer_config, PEERS["open"]),
    (validate_peer_config, PEERS["example"]),
    (validate_peer_config, PEERS["two"]),
    (validate_peer_config, PEERS["multi_spec"]),
    (validate_peer_config, PEERS["kwonly"]),
    (validate_peer_config, None),
    (validate_peer_config, {}),
    (validate_peer_config, {".*": [{"N@any and G@os:x": ["test.*"]}]}),
    (validate_peer_config, {".*": [{"*": "test.ping"}]}),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"args": None, "kwargs": None}}]}]}),
    (validate_peer_run_config, PEER_RUNS["example"]),
    (validate_peer_run_config, PEER_RUNS["args"]),
    (validate_peer_run_config, None),
    (validate_acl_config, ACLS["doc"]),
    (validate_acl_config, ACLS["patterns"]),
    (validate_eauth_config, EAUTH),
]


@pytest.mark.parametrize(("validator", "config"), VALID_CONFIGS)
def test_valid_configs(validator: Any, config: Any) -> None:
    assert isinstance(validator(config), list)


# (validator, config, fragment of the ConfigError message)
INVALID_CONFIGS: list[tuple[Any, Any, str]] = [
    (validate_peer_config, ["x"], "peer: must be a mapping"),
    (validate_peer_config, {"*": [".*"]}, "peer['*']: invalid minion id regex '*'"),
    (validate_peer_config, {"(": [".*"]}, "invalid minion id regex '('"),
    (validate_peer_config, {".*": "test.ping"}, "peer['.*']: must be a list of rules"),
    (validate_peer_config, {".*": ["test.(ping"]}, "peer['.*'][0]: invalid function regex 'test.(ping'"),
    (validate_peer_config, {".*": ["ok", "*.ping"]}, "peer['.*'][1]: invalid function regex"),
    (validate_peer_config, {".*": [5]}, "rule must be a regex or a one-key mapping"),
    (validate_peer_config, {".*": [{"a*": ["x"], "b*": ["y"]}]}, "exactly one key"),
    (validate_peer_config, {".*": [{"web* and": ["x"]}]}, "invalid target expression 'web* and'"),
    (validate_peer_config, {".*": [{"( web*": ["x"]}]}, "unbalanced"),
    (validate_peer_config, {".*": [{"R@role": ["x"]}]}, "range targeting"),
    (validate_peer_config, {".*": [{"X@y": ["x"]}]}, "unknown matcher"),
    (validate_peer_config, {".*": [{"E@(": ["x"]}]}, "invalid regular expression"),
    (validate_peer_config, {".*": [{"*": []}]}, "function list is empty"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"arg": ["a"]}}]}]}, "unknown argument spec key"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"args": "a"}}]}]}, "must be a list of argument rules"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"args": ["(a"]}}]}]},
     "peer['.*'][0]['*'][0]['f.x']['args'][0]: invalid argument regex '(a'"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"args": [[1]]}}]}]}, "an argument rule is a regex, null"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"args": [{"a": 1}]}}]}]}, "not dict"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"kwargs": {"__pub_user": None}}}]}]}, "never start with '__'"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"kwargs": {1: None}}}]}]}, "cannot be a keyword argument name"),
    (validate_peer_config, {".*": [5]}, "rule must be a regex or a one-key mapping"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"kwargs": {"k": "(x"}}}]}]}, "invalid argument regex"),
    (validate_peer_config, {".*": [{"*": [{"f.x": {"kwargs": ["k"]}}]}]}, "must be a mapping of name"),
    (validate_peer_config, {".*": [{"*": [{"f.x": None}]}]}, "argument spec must be a mapping"),
    (validate_peer_config, {".*": [{"*": [{"f.x": []}]}]}, "argument spec list is empty"),
    (validate_peer_config, {".*": [{"*": [{"a": {}, "b": {}}]}]}, "exactly one key"),
    (validate_peer_config, {".*": ["@runner"]}, "belong in external_auth"),
    (validate_peer_config, {".*": [{"@runner": ["x"]}]}, "belong in external_auth"),
    (validate_peer_run_config, {"*": ["manage.*"]}, "peer_run['*']: invalid minion id regex"),
    (validate_peer_run_config, {".*": "manage.up"}, "peer_run['.*']: must be a list"),
    (validate_peer_run_config, {".*": ["manage.(up"]}, "invalid function regex"),
    (validate_peer_run_config, {".*": [{"jobs.x": {"args": ["("]}}]}, "invalid argument regex"),
    (validate_peer_run_config, {".*": [{"jobs.x": {"bogus": 1}}]}, "unknown argument spec key"),
    (validate_peer_run_config, "manage.*", "must be a mapping"),
    (validate_acl_config, {"fred": "test.*"}, "publisher_acl['fred']: must be a list"),
    (validate_acl_config, {"fred": ["test.("]}, "publisher_acl['fred'][0]: invalid function regex"),
    (validate_acl_config, {"fred": [{"G@os": ["x"]}]}, "needs key:value"),
    (validate_acl_config, {"fred": [{"@runner": ["m.("]}]}, "invalid function regex"),
    (validate_acl_config, {"": ["x"]}, "user key must be a non-empty string"),
    (validate_acl_config, ["fred"], "must be a mapping of user"),
    (validate_eauth_config, {"pam": {"fred": [{"@runner": ["m.("]}]}}, "invalid function regex"),
    (validate_eauth_config, {"pam": {"fred": ["@"]}}, "'@' needs a client or module name"),
    (validate_eauth_config, {"pam": ["fred"]}, "external_auth['pam']: must be a mapping"),
    (validate_eauth_config, "pam", "external_auth: must be a mapping"),
]


@pytest.mark.parametrize(("validator", "config", "fragment"), INVALID_CONFIGS)
def test_invalid_configs(validator: Any, config: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        validator(config)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("blacklist", "fragment"),
    [
        ({"users": "root"}, "['users']: must be a list"),
        ({"modules": ["cmd.("]}, "invalid module regex"),
        ({"modules": [1]}, "must be a string"),
        ({"people": []}, "unknown key"),
        (["root"], "must be a mapping"),
    ],
)
def test_invalid_blacklist(blacklist: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_acl_config({}, blacklist)
    assert fragment in str(info.value)
    assert "publisher_acl_blacklist" in str(info.value)


def test_validation_resolves_nodegroups_when_given() -> None:
    cfg = {".*": [{"N@mongos": ["x"]}]}
    validate_peer_config(cfg)
    validate_peer_config(cfg, nodegroups=NODEGROUPS)
    with pytest.raises(ConfigError, match="unknown nodegroup"):
        validate_peer_config({".*": [{"N@nope": ["x"]}]}, nodegroups=NODEGROUPS)


def test_unanchored_regex_warnings() -> None:
    warnings = validate_peer_config({"web1": ["network.ip_addrs", "test.*", "test.ping$"]})
    assert len(warnings) == 2
    assert any("'web1' is a prefix match" in w and "'web1$'" in w for w in warnings)
    assert any("'network.ip_addrs'" in w for w in warnings)
    assert validate_peer_config({".*example.com": ["test.*"]}) == []


# -- publisher_acl runner rules (raetsalt-run for local users: a divergence, Salt 3008 does
# not check runners for local users at all)

RUNNER_ACL: dict[str, Any] = {
    "fred": ["test.*", "@manage"],
    "ops": [{"@runner": ["jobs.list_jobs$", {"jobs.lookup_jid": {"args": [r"\d+$"]}}]}],
    "viewer": [{"@manage": ["up$", "status$"]}],
    "nobody": ["test.ping"],
    "ops_group%": ["@runner"],
}
RUNNER_CASES = [
    ("fred", [], "manage.up", None, True),
    ("fred", [], "manage.down", None, True),
    ("fred", [], "jobs.list_jobs", None, False),
    ("ops", [], "jobs.list_jobs", None, True),
    ("ops", [], "jobs.list_jobs2", None, False),
    ("ops", [], "jobs.lookup_jid", ["20261121000000000000"], True),
    ("ops", [], "jobs.lookup_jid", ["x"], False),
    ("ops", [], "jobs.lookup_jid", None, False),
    ("ops", [], "manage.up", None, False),
    ("viewer", [], "manage.up", None, True),
    ("viewer", [], "manage.status", None, True),
    ("viewer", [], "manage.upx", None, False),
    ("viewer", [], "manage.up,manage.down", None, False),
    ("viewer", [], "manage.up,manage.status", None, True),
    ("nobody", [], "manage.up", None, False),
    ("nobody", [], "test.ping", None, False),
    ("stranger", [], "manage.up", None, False),
    ("stranger", ["ops_group"], "jobs.active", None, True),
    ("root", [], "jobs.active", None, True),
    ("viewer", [], "manageup", None, False),
]


@pytest.mark.parametrize(("user", "groups", "fun", "arg", "allowed"), RUNNER_CASES)
def test_publisher_acl_runner(user: str, groups: list[str], fun: str, arg: Any,
                              allowed: bool) -> None:
    decision = check_publisher_acl_runner(RUNNER_ACL, user, groups, fun, arg)
    assert decision.allowed is allowed, decision


def test_publisher_acl_runner_reasons_and_blacklist() -> None:
    d = check_publisher_acl_runner(RUNNER_ACL, "viewer", [], "manage.down")
    assert d.reason == "user 'viewer' may not run 'manage.down': no runner rule allows it"
    d = check_publisher_acl_runner(RUNNER_ACL, "stranger", [], "manage.up")
    assert d.reason == "user 'stranger' has no publisher_acl entry"
    d = check_publisher_acl_runner(RUNNER_ACL, "fred", [], "manage.up", None,
                                   {"users": ["fr.*"]})
    assert not d.allowed and "blacklisted" in d.reason
    d = check_publisher_acl_runner(RUNNER_ACL, "fred", [], "manage.up")
    assert d.rule == "publisher_acl['fred'] -> '@manage'"


BLACKLIST_CASES = [
    ({"users": ["root"]}, "root", "test.ping", "is blacklisted"),
    ({"users": ["^(?!sudo_).*$"]}, "fred", None, "is blacklisted"),
    ({"users": ["^(?!sudo_).*$"]}, "sudo_fred", "test.ping", None),
    ({"users": ["ad*"]}, "admin", "test.ping", "is blacklisted"),
    ({"modules": ["cmd.*"]}, "fred", "test.ping,cmd.run", "'cmd.run': the function is"),
    ({"modules": ["cmd.*"]}, "fred", ["test.ping", "cmd.run"], "'cmd.run'"),
    ({"modules": ["cmd.*"]}, "fred", "test.ping", None),
    ({"modules": ["test.echo$"]}, "fred", "test.echoes", None),
    ({}, "fred", "cmd.run", None),
    (None, "fred", "cmd.run", None),
]


@pytest.mark.parametrize(("blacklist", "user", "fun", "fragment"), BLACKLIST_CASES)
def test_check_blacklist(blacklist: Any, user: str, fun: Any, fragment: str | None) -> None:
    decision = check_blacklist(blacklist, user, fun)
    if fragment is None:
        assert decision is None
    else:
        assert decision is not None and not decision.allowed and fragment in decision.reason


NORMALIZED_CASES = [
    ("test.arg", ["a", "k=v"], ["a", {"__kwarg__": True, "k": "v"}]),
    ("test.arg", "one", ["one"]),
    ("test.arg", None, []),
    ("test.arg", ["a", {"__kwarg__": True, "x": 1}, "y=2"],
     ["a", {"__kwarg__": True, "x": 1, "y": "2"}]),
    ("test.arg", ["a b=c", "=x"], ["a b=c", "=x"]),
    ("test.ping,test.arg", ["", "x k=v"], [[], ["x", {"__kwarg__": True, "k": "v"}]]),
    ("test.ping,test.arg", [[], ["x"]], [[], ["x"]]),
    ("a.b,c.d", [], [[], []]),
]


@pytest.mark.parametrize(("fun", "arg", "expected"), NORMALIZED_CASES)
def test_normalized_arg_publishes_what_was_checked(fun: str, arg: Any, expected: Any) -> None:
    assert normalized_arg(fun, arg) == expected


def test_eauth_backend_settings_are_not_users() -> None:
    config = {"file": {"^filename": "/etc/u", "^filetype": "htpasswd", "fred": ["test.*"]}}
    assert validate_eauth_config(config) == []
    assert check_eauth(config, "file", "fred", [], "test.ping", [], "*", "glob",
                       MINIONS).allowed
    assert not check_eauth(config, "file", "^filename", [], "test.ping", [], "*", "glob",
                           MINIONS).allowed


def test_validate_master_access_checks_every_option() -> None:
    opts = {"peer": {".*": ["test.*"]}, "peer_run": {"web1": ["manage.up"]},
            "publisher_acl": {"fred": ["@manage"]}, "publisher_acl_blacklist": {},
            "external_auth": {"pam": {"fred": ["test.*"]}}, "nodegroups": NODEGROUPS}
    warnings = validate_master_access(opts)
    assert any("peer_run['web1']" in w for w in warnings)
    with pytest.raises(ConfigError, match=r"peer_run\['\*'\]"):
        validate_master_access({**opts, "peer_run": {"*": ["x"]}})
    with pytest.raises(ConfigError, match="N@nope"):
        validate_master_access({**opts, "peer": {".*": [{"N@nope": ["x"]}]}})


def test_case_count() -> None:
    # The brief asks for at least 200 table cases over peer, peer_run and publisher_acl.
    assert len(PEER_CASES) + len(PEER_RUN_CASES) + len(ACL_CASES) >= 200
    assert len(RUNNER_CASES) + len(BLACKLIST_CASES) + len(NORMALIZED_CASES) >= 35


# ---------------------------------------------------------------------------
# An argument rule restricts the whole call (publisher_acl, peer, peer_run, eauth)
# ---------------------------------------------------------------------------

ECHO_ONLY = {"cmd.run": {"args": ["echo [a-z]+$"]}}
"""The rule of the attack (and the README's shape): one positional argument."""
PATH_ENV = "env={'PATH': '/home/attacker/bin'}"
ESCAPES: list[tuple[Any, str]] = [
    # (arg, fragment of the refusal)
    (["echo abc", "python_shell=False", PATH_ENV], "keyword argument 'python_shell' is not allowed"),
    (["echo abc", {"__kwarg__": True, "python_shell": False, "env": {"PATH": "/tmp"}}],
     "keyword argument 'python_shell' is not allowed"),
    (["echo abc", "cwd=/"], "keyword argument 'cwd' is not allowed"),
    (["echo abc", "/tmp"], "positional argument 2 ('/tmp') is not allowed"),
    (["echo abc", "/", {"PATH": "/tmp"}, False], "positional argument 2 ('/') is not allowed"),
    ([["echo abc"]], "positional argument 1 is a list, and argument rules match only text"),
    ([{"cmd": "echo abc"}], "positional argument 1 is a mapping"),
    ([b"echo abc"], "positional argument 1 is bytes"),
    ([5], "positional argument 1 is a number"),
    ([None], "positional argument 1 is null"),
    ([], "positional argument 1 is missing"),
    (["echo abc", "__pub_user=root"], "keyword argument '__pub_user' is reserved"),
    (["echo abc", {"__kwarg__": True, "__pub_fun": "x"}], "keyword argument '__pub_fun' is reserved"),
    (["echo abc", {"__kwarg__": True, "__kwarg__x": 1}], "'__kwarg__x' is reserved"),
    (["echo abc", {"__kwarg__": True, 1: "x"}], "keyword argument names must be text"),
    (["echo abc; id"], "positional argument 1 ('echo abc; id') does not match"),
    (["echo abc\nid"], "does not match"),
]


def _publisher(arg: Any, kwarg: Any = None) -> Decision:
    acl = {"nobody": ["test.ping", {"minion2": [ECHO_ONLY]}]}
    return check_publisher_acl(acl, "nobody", [], "cmd.run", arg, "minion2", "glob", MINIONS2,
                               kwarg=kwarg)


def _peer(arg: Any, kwarg: Any = None) -> Decision:
    peer = {"minion1$": [{"minion2": [ECHO_ONLY]}]}
    return check_peer(peer, "minion1", "cmd.run", arg, "minion2", "glob", MINIONS2, kwarg=kwarg)


def _eauth(arg: Any, kwarg: Any = None) -> Decision:
    config = {"file": {"fred": [{"minion2": [ECHO_ONLY]}]}}
    return check_eauth(config, "file", "fred", [], "cmd.run", arg, "minion2", "glob", MINIONS2,
                       kwarg=kwarg)


MINIONS2: dict[str, dict[str, Any] | None] = {"minion1": {}, "minion2": {}}
CHECKS = {"publisher_acl": _publisher, "peer": _peer, "external_auth": _eauth}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_the_reported_rule_allows_its_one_argument(check: str) -> None:
    decision = CHECKS[check](["echo abc"])
    assert decision.allowed, decision.reason
    assert CHECKS[check]("echo abc").allowed  # one string is one argument


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize(("arg", "fragment"), ESCAPES)
def test_no_argument_escapes_a_rule_that_lists_args(check: str, arg: Any, fragment: str) -> None:
    decision = CHECKS[check](arg)
    assert not decision.allowed
    assert "may not run 'cmd.run'" in decision.reason and fragment in decision.reason, decision.reason
    assert "echo [a-z]" not in decision.reason  # the rule itself is never shown


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_the_kwarg_parameter_is_checked_like_the_rest(check: str) -> None:
    decision = CHECKS[check](["echo abc"], {"env": {"PATH": "/tmp"}})
    assert not decision.allowed and "keyword argument 'env' is not allowed" in decision.reason


def test_comma_commands_check_each_functions_own_arguments() -> None:
    peer = {"m": [{"*": ["test.ping$", ECHO_ONLY]}]}

    def ok(arg: Any) -> bool:
        return check_peer(peer, "m", "test.ping,cmd.run", arg, "*", "glob", MINIONS).allowed

    assert ok([[], ["echo abc"]])
    assert not ok([[], ["echo abc", PATH_ENV]])
    assert not ok([[], ["echo abc", {"__kwarg__": True, "cwd": "/"}]])
    assert ok([["x=1"], ["echo abc"]])  # test.ping's plain regex leaves its arguments free
    assert not ok([["__pub_jid=1"], ["echo abc"]])  # ... except the reserved names
    assert not ok(["", "echo abc"])  # Salt's string form splits on blanks: two arguments
    assert not ok([[], {"__kwarg__": True, "env": {}}])
    assert ok([[], ["echo abc"], ["ignored: no third function"]])


def test_a_function_rule_without_arguments_stays_free_but_never_reserved() -> None:
    # A plain function regex restricts no argument (Salt), except the reserved names.
    peer = {"m": [".*"]}
    assert check_peer(peer, "m", "cmd.run", ["id", "cwd=/", PATH_ENV], "*", "glob", MINIONS).allowed
    d = check_peer(peer, "m", "test.arg", ["__pub_user=root"], "*", "glob", MINIONS)
    assert not d.allowed and "reserved" in d.reason


LITERAL_RULE = {"m": [{"*": [{"test.sleep": {"args": [5]}},
                             {"cmd.run": {"args": ["echo [a-z]+$"], "kwargs": {"python_shell": False}}},
                             {"test.echo": {"args": [r"\d+$"]}}]}]}
LITERAL_CASES: list[tuple[str, Any, bool]] = [
    ("test.sleep", [5], True),
    ("test.sleep", ["5"], False),
    ("test.sleep", [5.0], False),
    ("test.sleep", [True], False),
    ("test.sleep", [6], False),
    ("cmd.run", ["echo abc", {"__kwarg__": True, "python_shell": False}], True),
    ("cmd.run", ["echo abc", "python_shell=False"], False),  # a string, not the literal
    ("cmd.run", ["echo abc", {"__kwarg__": True, "python_shell": 0}], False),
    ("cmd.run", ["echo abc", {"__kwarg__": True, "python_shell": None}], False),
    ("cmd.run", ["echo abc"], False),  # a listed keyword argument is required
    ("test.echo", ["12"], True),
    ("test.echo", [12], False),  # a number never matches a regex
]


@pytest.mark.parametrize(("fun", "arg", "allowed"), LITERAL_CASES)
def test_literal_rules_match_only_that_value(fun: str, arg: Any, allowed: bool) -> None:
    assert check_peer(LITERAL_RULE, "m", fun, arg, "*", "glob", MINIONS).allowed is allowed


def test_literal_rules_pass_validation() -> None:
    assert all("prefix match" in w for w in validate_peer_config(LITERAL_RULE))


RUNNER_ESCAPES: list[tuple[Any, bool]] = [
    (["20240101"], True),
    (["20240101", "ext_source=x"], False),
    (["20240101", {"__kwarg__": True, "returned": False}], False),
    (["20240101", "20240102"], False),
    ([20240101], False),
]


@pytest.mark.parametrize(("arg", "allowed"), RUNNER_ESCAPES)
def test_runner_argument_rules_restrict_the_whole_call(arg: Any, allowed: bool) -> None:
    rule = [{"jobs.lookup_jid": {"args": [r"\d+$"]}}]
    assert check_peer_run({"m": rule}, "m", "jobs.lookup_jid", arg=arg).allowed is allowed
    assert check_publisher_acl_runner({"u": [{"@runner": rule}]}, "u", [], "jobs.lookup_jid",
                                      arg).allowed is allowed
    assert check_eauth({"pam": {"u": [{"@jobs": [{"lookup_jid": {"args": [r"\d+$"]}}]}]}},
                       "pam", "u", [], "jobs.lookup_jid", arg, kind="runner").allowed is allowed


def test_several_specs_name_the_first_misfit() -> None:
    d = check_peer(PEERS["multi_spec"], "mongo1", "file.read", ["/etc/passwd"], "*", "glob",
                   MINIONS)
    assert not d.allowed
    assert d.reason.endswith("positional argument 1 ('/etc/passwd') does not match (nor "
                             "does any of the rule's other 1 argument specs fit)")


def test_a_huge_argument_is_echoed_clipped() -> None:
    d = _peer(["echo abc", "x" * 100_000])
    assert not d.allowed and "(100000 characters)" in d.reason and len(d.reason) < 300
    d = check_peer({"m": ["test.*"]}, "m", "y" * 50_000, [], "*", "glob", MINIONS)
    assert not d.allowed and len(d.reason) < 300


_WORDS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["k=v", "env={}", "python_shell=False", "__pub_user=root", "a==b", "=x",
                     "cwd=/", "x y=z"]),
    st.integers(), st.booleans(), st.none(),
    st.lists(st.text(max_size=4), max_size=3),
    st.dictionaries(st.text(max_size=6), st.text(max_size=4), max_size=3),
    st.dictionaries(st.sampled_from(["env", "cwd", "__pub_fun", "k"]), st.text(max_size=4),
                    max_size=3).map(lambda d: {"__kwarg__": True, **d}),
)


@given(st.lists(_WORDS, max_size=6))
def test_the_minion_runs_exactly_the_checked_arguments(arg: list[Any]) -> None:
    """What the master publishes (``normalized_arg``) unpacks on the minion to the very
    arguments the check saw, and checking it again gives the same arguments."""
    checked = parse_args(arg)
    published = normalized_arg("cmd.run", arg)
    assert unpack_args(published) == checked
    assert parse_args(published) == checked
    groups = normalized_arg("test.ping,cmd.run", [arg, arg])
    assert [unpack_args(g) for g in groups] == [checked, checked]
