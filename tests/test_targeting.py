"""Table-driven tests for raetsalt.targeting (Salt 3008 targeting semantics)."""

from __future__ import annotations

from typing import Any

import pytest

from raetsalt.errors import TargetError
from raetsalt.targeting import (
    CLI_FLAGS,
    TARGET_TYPES,
    expand_nodegroup,
    match_bounds,
    match_minions,
    match_self,
    target_within,
    tgt_type_from_flag,
    validate_target,
)

MINIONS: dict[str, dict[str, Any] | None] = {
    "webserv1": {
        "os": "Ubuntu",
        "os_family": "Debian",
        "ipv4": ["10.0.0.5", "127.0.0.1"],
        "ipv6": ["::1", "fe80::1"],
        "roles": ["web", "app"],
        "kernelrelease": "6.1.0-13-amd64",
        "kernel": {"release": "6.1.0", "name": "Linux"},
        "num_cpus": 4,
        "locale_info": {"timezone": "UTC"},
        "ec2": {"tags": {"env": "prod", "team": "web"}},
    },
    "webserv2": {
        "os": "CentOS",
        "os_family": "RedHat",
        "ipv4": ["10.0.1.5"],
        "roles": ["web"],
        "num_cpus": 2,
        "ec2": {"tags": {"env": "staging"}},
    },
    "WebServ3": {"os": "Windows", "os_family": "Windows", "ipv4": ["192.168.1.10"], "roles": []},
    "db1": {
        "os": "Ubuntu",
        "os_family": "Debian",
        "ipv4": ["10.0.2.5"],
        "roles": ["db", "backup"],
        "num_cpus": 16,
        "mounts": [{"path": "/data"}, {"path": "/var"}],
    },
    "db2": {
        "os": "CentOS",
        "os_family": "RedHat",
        "ipv4": ["10.0.2.6"],
        "ipv6": ["2001:db8::6"],
        "roles": "db",
    },
    "db10.example.com": {"os": "Debian", "os_family": "Debian", "ipv4": ["172.16.0.10"],
                         "ipv6": ["2001:db8::10"]},
    "mail.example.org": {"os": "FreeBSD", "ipv4": "10.0.3.1"},
    "nocache": None,
}
ALL = set(MINIONS)
KNOWN = ALL - {"nocache"}
WEB = {"webserv1", "webserv2"}
DBS = {"db1", "db2", "db10.example.com"}

NODEGROUPS: dict[str, Any] = {
    "webs": "webserv*",
    "dbs_list": ["db1", "db2"],
    "both": "N@webs or N@dbs_list",
    "ubuntu_webs": "N@webs and G@os:Ubuntu",
    "or_group": "db1 or db2",
    "list_ops": ["webserv1", "or", "db1"],
    "regexy": ["^db\\d$"],
    "mixed_plain": ["db1", "webserv[1]"],
    "nested_list": ["N@dbs_list", "or", "webserv1"],
    "deep": "N@both and not N@dbs_list",
    "cycle_a": "N@cycle_b",
    "cycle_b": "db1 or N@cycle_a",
    "self": "N@self",
    "unknown_ref": "N@nope",
    "empty": "",
    "bad_type": 5,
    "single": "webserv1",
}

# (tgt, tgt_type, expected) over MINIONS.
CASES: list[tuple[Any, str, set[str]]] = [
    # ---- glob: fnmatch, case-sensitive ids
    ("*", "glob", ALL),
    ("webserv*", "glob", WEB),
    ("WEBSERV1", "glob", set()),
    ("*Serv*", "glob", {"WebServ3"}),
    ("*serv*", "glob", WEB),
    ("db?", "glob", {"db1", "db2"}),
    ("db[12]", "glob", {"db1", "db2"}),
    ("db[!1]", "glob", {"db2"}),
    ("*.example.com", "glob", {"db10.example.com"}),
    ("*.example.*", "glob", {"db10.example.com", "mail.example.org"}),
    ("db1", "glob", {"db1"}),
    ("db", "glob", set()),
    ("db*", "glob", DBS),
    ("nocache", "glob", {"nocache"}),
    ("nomatch*", "glob", set()),
    ("[", "glob", set()),
    # ---- pcre: re.match, start-anchored only
    ("web", "pcre", WEB),
    ("web$", "pcre", set()),
    ("webserv1$", "pcre", {"webserv1"}),
    (r".*example\.com", "pcre", {"db10.example.com"}),
    (".*example.com", "pcre", {"db10.example.com"}),
    (r"db\d$", "pcre", {"db1", "db2"}),
    (r"db\d", "pcre", DBS),
    ("^db", "pcre", DBS),
    ("serv", "pcre", set()),
    (".*serv", "pcre", WEB),
    ("(?i)webserv", "pcre", WEB | {"WebServ3"}),
    ("db1|mail", "pcre", {"db1", "db10.example.com", "mail.example.org"}),
    (".*", "pcre", ALL),
    ("db1\\b", "pcre", {"db1"}),
    # ---- list: exact membership
    ("db1,db2", "list", {"db1", "db2"}),
    (["db1", "webserv1"], "list", {"db1", "webserv1"}),
    ("db1,,db2,", "list", {"db1", "db2"}),
    ("db1,unknown", "list", {"db1"}),
    ("db", "list", set()),
    ("db1, db2", "list", {"db1"}),
    ([], "list", set()),
    ("db*", "list", set()),
    ("nocache", "list", {"nocache"}),
    (("db2",), "list", {"db2"}),
    # ---- grain: subdict_match, glob, case-insensitive values
    ("os:Ubuntu", "grain", {"webserv1", "db1"}),
    ("os:ubuntu", "grain", {"webserv1", "db1"}),
    ("os:UBUNTU", "grain", {"webserv1", "db1"}),
    ("os:Ub*", "grain", {"webserv1", "db1"}),
    ("OS:Ubuntu", "grain", set()),
    ("os_family:Debian", "grain", {"webserv1", "db1", "db10.example.com"}),
    ("os:*", "grain", KNOWN),
    ("roles:web", "grain", WEB),
    ("roles:db", "grain", {"db1", "db2"}),
    ("roles:d*", "grain", {"db1", "db2"}),
    ("roles:backup", "grain", {"db1"}),
    ("roles:we", "grain", set()),
    ("ec2:tags:env:prod", "grain", {"webserv1"}),
    ("ec2:tags:env:*", "grain", WEB),
    ("ec2:tags:env", "grain", WEB),
    ("ec2:tags:team", "grain", {"webserv1"}),
    ("ec2:*", "grain", WEB),
    ("ec2:tags:env:PROD", "grain", {"webserv1"}),
    ("locale_info:timezone:utc", "grain", {"webserv1"}),
    ("num_cpus:4", "grain", {"webserv1"}),
    ("num_cpus:1*", "grain", {"db1"}),
    ("kernelrelease:6.1*", "grain", {"webserv1"}),
    ("kernel:release:6.*", "grain", {"webserv1"}),
    ("kernel:name", "grain", {"webserv1"}),
    ("mounts:path:/data", "grain", {"db1"}),
    ("mounts:path:/var", "grain", {"db1"}),
    ("mounts:1:path:/var", "grain", {"db1"}),
    ("mounts:0:path:/var", "grain", set()),
    ("nonexistent:x", "grain", set()),
    ("os:Ubuntu:extra", "grain", set()),
    ("*:web", "grain", WEB),
    ("*:ubuntu", "grain", {"webserv1", "db1"}),
    ("*:prod", "grain", set()),
    ("*:tags", "grain", WEB),
    ("ipv4:10.0.*", "grain", {"webserv1", "webserv2", "db1", "db2", "mail.example.org"}),
    ("os:[CU]*", "grain", {"webserv1", "webserv2", "db1", "db2"}),
    # ---- grain_pcre: lower-cased, start-anchored
    ("os:(Ubuntu|CentOS)", "grain_pcre", {"webserv1", "webserv2", "db1", "db2"}),
    ("os:ubu", "grain_pcre", {"webserv1", "db1"}),
    ("os:UBU", "grain_pcre", {"webserv1", "db1"}),
    ("os:buntu", "grain_pcre", set()),
    ("os:.*buntu", "grain_pcre", {"webserv1", "db1"}),
    (r"os:\D+", "grain_pcre", set()),
    (r"os:\w+$", "grain_pcre", KNOWN),
    (r"num_cpus:\d$", "grain_pcre", WEB),
    (r"num_cpus:\d+", "grain_pcre", {"webserv1", "webserv2", "db1"}),
    ("roles:(web|db)$", "grain_pcre", {"webserv1", "webserv2", "db1", "db2"}),
    ("ec2:tags:env:st", "grain_pcre", {"webserv2"}),
    ("os:(?:free)", "grain_pcre", {"mail.example.org"}),
    # ---- ipcidr
    ("10.0.0.0/16", "ipcidr", {"webserv1", "webserv2", "db1", "db2", "mail.example.org"}),
    ("10.0.2.0/24", "ipcidr", {"db1", "db2"}),
    ("10.0.0.5", "ipcidr", {"webserv1"}),
    ("10.0.0.0/32", "ipcidr", set()),
    ("127.0.0.0/8", "ipcidr", {"webserv1"}),
    ("0.0.0.0/0", "ipcidr", KNOWN),
    ("192.168.0.0/16", "ipcidr", {"WebServ3"}),
    ("10.0.3.1", "ipcidr", {"mail.example.org"}),
    ("10.0.3.0/24", "ipcidr", {"mail.example.org"}),
    ("2001:db8::/32", "ipcidr", {"db2", "db10.example.com"}),
    ("2001:db8::6", "ipcidr", {"db2"}),
    ("2001:0db8:0000::0006", "ipcidr", {"db2"}),
    ("::1", "ipcidr", {"webserv1"}),
    ("::/0", "ipcidr", {"webserv1", "db2", "db10.example.com"}),
    ("10.0.2.6", "ipcidr", {"db2"}),
    # ---- nodegroup
    ("webs", "nodegroup", WEB),
    ("dbs_list", "nodegroup", {"db1", "db2"}),
    ("both", "nodegroup", WEB | {"db1", "db2"}),
    ("ubuntu_webs", "nodegroup", {"webserv1"}),
    ("list_ops", "nodegroup", {"webserv1", "db1"}),
    ("regexy", "nodegroup", {"db1", "db2"}),
    ("mixed_plain", "nodegroup", {"db1", "webserv1"}),
    ("nested_list", "nodegroup", {"db1", "db2", "webserv1"}),
    ("deep", "nodegroup", WEB),
    ("single", "nodegroup", {"webserv1"}),
    # ---- compound: the oracle's agreeing examples
    ("webserv* and not G@os:Ubuntu", "compound", {"webserv2"}),
    ("( webserv* or db1 ) and G@os_family:Debian", "compound", {"webserv1", "db1"}),
    ("E@^db and not L@db1", "compound", {"db2", "db10.example.com"}),
    ("S@10.0.0.0/16 and P@os:(Ubuntu|CentOS)", "compound", {"webserv1", "webserv2", "db1", "db2"}),
    ("N@webs and not G@os:CentOS", "compound", {"webserv1"}),
    ("N@webs or N@dbs_list", "compound", WEB | {"db1", "db2"}),
    # ---- compound: grammar
    ("webserv1", "compound", {"webserv1"}),
    ("not db*", "compound", ALL - DBS),
    ("not G@os:Ubuntu", "compound", KNOWN - {"webserv1", "db1"}),
    ("not ( webserv* or db* )", "compound", {"WebServ3", "mail.example.org", "nocache"}),
    ("webserv* not webserv1", "compound", {"webserv2"}),
    ("webserv* and not webserv1", "compound", {"webserv2"}),
    ("db1 or db2 and G@os:CentOS", "compound", {"db1", "db2"}),
    ("( db1 or db2 ) and G@os:CentOS", "compound", {"db2"}),
    ("db1 or webserv1 and db1", "compound", {"db1"}),
    ("not db1 and not db2", "compound", ALL - {"db1", "db2"}),
    ("not db1 or db1", "compound", ALL),
    ("( ( db1 or db2 ) and ( G@os:Ubuntu or webserv1 ) )", "compound", {"db1"}),
    ("( ( ( db1 ) ) )", "compound", {"db1"}),
    ("( not ( db* ) ) and G@roles:web", "compound", WEB),
    ("L@db1,db2,nope", "compound", {"db1", "db2"}),
    ("L@db1,db2 and not E@db2$", "compound", {"db1"}),
    (r"E@db\d$ or E@web", "compound", {"db1", "db2"} | WEB),
    ("G@roles:web and G@os_family:RedHat", "compound", {"webserv2"}),
    ("G|@kernel|release|6.*", "compound", {"webserv1"}),
    ("G;@ec2;tags;env;prod", "compound", {"webserv1"}),
    ("P|@ec2|tags|env|st", "compound", {"webserv2"}),
    ("P@os:ubuntu or S@192.168.0.0/16", "compound", {"webserv1", "db1", "WebServ3"}),
    ("S@2001:db8::/32 and not L@db2", "compound", {"db10.example.com"}),
    ("N@or_group and G@os:CentOS", "compound", {"db2"}),
    ("G@os:CentOS and N@or_group", "compound", {"db2"}),
    ("N@deep", "compound", WEB),
    ("not N@webs", "compound", ALL - WEB),
    ("*", "compound", ALL),
    ("user@host", "compound", set()),
    # "(" must be its own token: "()" and "(db1" are glob literals, as in Salt.
    ("()", "compound", set()),
    ("(db1", "compound", set()),
    (["webserv*", "and", "G@os:Ubuntu"], "compound", {"webserv1"}),
    (["G@os:Ubuntu", "or", "L@db2"], "compound", {"webserv1", "db1", "db2"}),
    ("G@roles:backup or G@ec2:tags:env:prod", "compound", {"db1", "webserv1"}),
    ("WebServ3 or G@os:windows", "compound", {"WebServ3"}),
    ("db* and not E@.*example", "compound", {"db1", "db2"}),
]


@pytest.mark.parametrize(("tgt", "tgt_type", "expected"), CASES)
def test_match_minions(tgt: Any, tgt_type: str, expected: set[str]) -> None:
    assert match_minions(tgt, tgt_type, MINIONS, NODEGROUPS) == expected


@pytest.mark.parametrize(("tgt", "tgt_type", "expected"), CASES)
def test_minion_side_agrees_with_master(tgt: Any, tgt_type: str, expected: set[str]) -> None:
    # Each minion re-checks with its own grains; the union must equal the master view
    # (the uncached minion re-checks with an empty grain dict).
    seen = {
        mid
        for mid, grains in MINIONS.items()
        if match_self(tgt, tgt_type, mid, grains, NODEGROUPS)
    }
    if "nocache" in expected or "nocache" not in seen:
        assert seen == expected
    else:
        # Only "not G@..."-style targets can differ: the master treats unknown grains
        # as unknown (not matched), the minion knows its own (empty) grains.
        assert seen - {"nocache"} == expected


# (tgt, tgt_type, expected error fragment)
ERRORS: list[tuple[Any, str, str]] = [
    ("webserv1 or ( db1", "compound", "unbalanced"),
    ("( db1", "compound", "unbalanced"),
    ("(", "compound", "unbalanced"),
    ("db1 )", "compound", "unexpected ')'"),
    (")", "compound", "unexpected ')'"),
    ("( db1 ) )", "compound", "unexpected ')'"),
    ("( )", "compound", "empty parentheses"),
    ("and db1", "compound", "starts with binary operator"),
    ("or db1", "compound", "starts with binary operator"),
    ("db1 and", "compound", "ends after 'and'"),
    ("db1 or", "compound", "ends after 'or'"),
    ("not", "compound", "ends after 'not'"),
    ("db1 and or db2", "compound", "operator 'or'"),
    ("( and db1 )", "compound", "right after '('"),
    ("( or db1 )", "compound", "right after '('"),
    ("db1 db2", "compound", "missing 'and'/'or' before 'db2'"),
    ("not not db1", "compound", "'not not'"),
    ("", "compound", "empty expression"),
    ("   ", "compound", "empty expression"),
    ("E@(unclosed", "compound", "invalid regular expression"),
    ("P@os:(bad", "compound", "invalid regular expression"),
    (r"P@os:ubuntu\Z", "compound", "invalid regular expression"),
    ("S@10.0.0.1/24", "compound", "invalid IP address or CIDR"),
    ("S@not-an-ip", "compound", "invalid IP address or CIDR"),
    ("X@foo", "compound", "unknown matcher X@"),
    ("Z@foo and db1", "compound", "unknown matcher Z@"),
    ("L|@db1", "compound", "does not take a delimiter"),
    ("E;@db", "compound", "does not take a delimiter"),
    ("G@", "compound", "empty pattern"),
    ("L@", "compound", "empty pattern"),
    ("N@", "compound", "empty pattern"),
    ("G@os", "compound", "needs key:value"),
    ("I@role", "compound", "pillar target 'role' needs key:value"),
    ("J@role:(x", "compound", "invalid regular expression in pillar_pcre target"),
    ("I|@role:web", "compound", "needs key|value"),
    ("R@%cluster", "compound", "range targeting"),
    ("T@x", "compound", "resource"),
    ("M@x", "compound", "resource"),
    ("N@nope", "compound", "unknown nodegroup 'nope'"),
    ("N@cycle_a", "compound", "includes itself"),
    ("N@self", "compound", "includes itself"),
    ("N@unknown_ref", "compound", "unknown nodegroup 'nope'"),
    ("N@empty", "compound", "is empty"),
    ("N@bad_type", "compound", "string or a list"),
    ("cycle_a", "nodegroup", "includes itself"),
    ("nope", "nodegroup", "unknown nodegroup"),
    ("(bad", "pcre", "invalid regular expression"),
    ("*", "pcre", "invalid regular expression"),
    ("", "pcre", "empty pcre target"),
    ("", "glob", "empty glob target"),
    ("os", "grain", "needs key:value"),
    ("os:(x", "grain_pcre", "invalid regular expression"),
    ("os", "grain_pcre", "needs key:value"),
    ("10.0.0.1/24", "ipcidr", "invalid IP address or CIDR"),
    ("300.1.1.1", "ipcidr", "invalid IP address or CIDR"),
    ("role", "pillar", "needs key:value"),
    ("role:(x", "pillar_pcre", "invalid regular expression"),
    ("role:web", "pillar_exact", "not supported"),
    ("%cluster", "range", "not supported"),
    ("x", "bogus", "unknown target type"),
    (["a", "b"], "glob", "must be a string"),
]


@pytest.mark.parametrize(("tgt", "tgt_type", "fragment"), ERRORS)
def test_errors(tgt: Any, tgt_type: str, fragment: str) -> None:
    with pytest.raises(TargetError, match=None) as info:
        match_minions(tgt, tgt_type, MINIONS, NODEGROUPS)
    assert fragment in str(info.value)
    # The minion side rejects the same expressions.
    with pytest.raises(TargetError):
        match_self(tgt, tgt_type, "db1", MINIONS["db1"], NODEGROUPS)


def test_nodegroup_without_config() -> None:
    with pytest.raises(TargetError, match="no nodegroups configured"):
        match_minions("N@webs", "compound", MINIONS)
    with pytest.raises(TargetError, match="no nodegroups configured"):
        match_minions("webs", "nodegroup", MINIONS, None)


def test_unknown_grains_are_only_possible() -> None:
    b = match_bounds("not G@os:Ubuntu", "compound", MINIONS, NODEGROUPS)
    assert "nocache" not in b.definite
    assert "nocache" in b.possible
    assert b.possible - b.definite == {"nocache"}
    b = match_bounds("S@10.0.0.0/8", "compound", MINIONS)
    assert b.possible - b.definite == {"nocache"}
    # Id-only targets have no uncertainty.
    b = match_bounds("not db*", "compound", MINIONS)
    assert b.definite == b.possible == ALL - DBS


def test_fully_cached_table_has_equal_bounds() -> None:
    known = {k: v for k, v in MINIONS.items() if v is not None}
    for tgt, tgt_type, _ in CASES:
        b = match_bounds(tgt, tgt_type, known, NODEGROUPS)
        assert b.definite == b.possible, tgt


def test_custom_delimiter_for_grain_types() -> None:
    assert match_minions("kernel|release|6.*", "grain", MINIONS, delimiter="|") == {"webserv1"}
    assert match_minions("ec2/tags/env/st", "grain_pcre", MINIONS, delimiter="/") == {"webserv2"}
    with pytest.raises(TargetError):
        match_minions("os:x", "grain", MINIONS, delimiter="::")


def test_match_self_basics() -> None:
    grains = {"os": "Ubuntu", "ipv4": ["10.1.2.3"]}
    assert match_self("web*", "glob", "web1", grains)
    assert not match_self("db*", "glob", "web1", grains)
    assert match_self("os:ubuntu", "grain", "web1", grains)
    assert match_self("10.1.0.0/16", "ipcidr", "web1", grains)
    assert match_self("not G@os:CentOS", "compound", "web1", grains)
    assert match_self("N@webs", "compound", "webserv9", {}, NODEGROUPS)
    assert not match_self("os:ubuntu", "grain", "web1", None)
    assert match_self("not G@os:ubuntu", "compound", "web1", None)


def test_expand_nodegroup_shapes() -> None:
    assert expand_nodegroup("dbs_list", NODEGROUPS) == ["(", "L@db1,db2", ")"]
    assert expand_nodegroup("webs", NODEGROUPS) == ["(", "webserv*", ")"]
    assert expand_nodegroup("regexy", NODEGROUPS) == ["(", "E@^db\\d$", ")"]
    assert expand_nodegroup("both", NODEGROUPS) == [
        "(", "(", "webserv*", ")", "or", "(", "L@db1,db2", ")", ")",
    ]


def test_nodegroup_diamond_is_not_a_cycle() -> None:
    groups = {"a": "N@b or N@c", "b": "N@d", "c": "N@d", "d": "db1"}
    assert match_minions("a", "nodegroup", MINIONS, groups) == {"db1"}


def test_validate_target_without_nodegroups() -> None:
    validate_target("N@anything and G@os:x", "compound", check_nodegroups=False)
    with pytest.raises(TargetError):
        validate_target("N@anything and", "compound", check_nodegroups=False)
    with pytest.raises(TargetError):
        validate_target("N@anything", "compound")


@pytest.mark.parametrize(
    ("flag", "tgt_type"),
    [
        (None, "glob"), ("", "glob"), ("-E", "pcre"), ("--pcre", "pcre"), ("-L", "list"),
        ("-G", "grain"), ("--grain-pcre", "grain_pcre"), ("-P", "grain_pcre"),
        ("-C", "compound"), ("-S", "ipcidr"), ("-N", "nodegroup"), ("--nodegroup", "nodegroup"),
        ("-I", "pillar"), ("--pillar", "pillar"), ("-J", "pillar_pcre"),
        ("--pillar-pcre", "pillar_pcre"),
    ],
)
def test_cli_flags(flag: str | None, tgt_type: str) -> None:
    assert tgt_type_from_flag(flag) == tgt_type
    assert tgt_type in TARGET_TYPES


@pytest.mark.parametrize("flag", ["-R", "--range", "-X", "--bogus"])
def test_cli_flags_refused(flag: str) -> None:
    with pytest.raises(TargetError):
        tgt_type_from_flag(flag)


def test_cli_flag_table_maps_to_known_types() -> None:
    assert set(CLI_FLAGS.values()) == set(TARGET_TYPES) - {"glob"}


def test_case_count() -> None:
    # The brief asks for at least 150 table cases.
    assert len(CASES) + len(ERRORS) >= 150


# (requested tgt, tgt_type, allowed compound, within?) over MINIONS (one uncached minion)
WITHIN: list[tuple[Any, str, str, bool]] = [
    ("db1", "glob", "db*", True),
    ("*", "glob", "db*", False),
    ("db1,db2", "list", "db*", True),
    ("nothing*", "glob", "db1", True),  # empty target: inside anything
    ("G@os:Ubuntu", "compound", "G@os:Ubuntu", True),  # same term, even for nocache
    ("os:ubuntu", "grain", "G@os:Ubuntu", True),  # same term, other value case
    ("G@os:Ubuntu", "compound", "G@os:ubuntu or db*", True),
    ("G@os:Ubuntu and webserv*", "compound", "G@os:Ubuntu", True),
    ("G@os:Ubuntu", "compound", "G@os:Ubuntu and webserv*", False),
    ("G@roles:db", "compound", "db*", False),  # nocache might have roles:db
    ("G@roles:db and db*", "compound", "db*", True),
    ("G@os:Ubuntu", "compound", "*", True),
    ("G@os:Ubuntu", "compound", "not G@os:CentOS", False),  # independent unknowns
    ("S@10.0.0.0/16", "compound", "S@10.0.0.0/16", True),
    ("10.0.0.0/16", "ipcidr", "S@10.0.0.0/16 or db*", True),
    ("not G@os:Ubuntu", "compound", "not G@os:Ubuntu", True),
    ("nocache", "glob", "G@os:Ubuntu", False),
    ("nocache", "glob", "nocache or G@os:Ubuntu", True),
    ("webs", "nodegroup", "webserv*", True),
]


@pytest.mark.parametrize(("tgt", "tgt_type", "allowed", "inside"), WITHIN)
def test_target_within(tgt: Any, tgt_type: str, allowed: str, inside: bool) -> None:
    assert target_within(tgt, tgt_type, allowed, MINIONS, NODEGROUPS) is inside


def test_target_within_term_limit() -> None:
    many = " or ".join(f"G@k{i}:v" for i in range(11))
    assert not target_within(many, "compound", many, MINIONS)
    known = {k: v for k, v in MINIONS.items() if v is not None}
    assert target_within(many, "compound", many, known)
