"""Config loading: defaults, includes, path resolution, every error kind, example files."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from raetsalt import config
from raetsalt.config import (
    SCHEMA,
    example_config,
    load_node_config,
    master_config,
    minion_config,
    options_for,
    parse_master_address,
)
from raetsalt.errors import ConfigError
from raetsalt.execution import grains

REPO = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def error_of(loader: Callable[[Any], dict[str, Any]], path: Any) -> str:
    with pytest.raises(ConfigError) as info:
        loader(path)
    return str(info.value)


# ------------------------------------------------------------------ defaults


def test_minion_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grains, "fqdn", lambda: "web1.example.com")
    opts = minion_config(write(tmp_path / "minion", ""))
    assert opts["id"] == "web1.example.com"
    assert opts["transport"] == "raet"
    assert opts["raet_port"] == 4510
    assert opts["master"] == "salt"
    assert opts["master_port"] == 4506
    assert opts["interface"] is None  # no listener: the address towards the master
    assert opts["pki_dir"] == "/etc/raetsalt/pki/minion"
    assert opts["sock_dir"] == "/var/run/raetsalt/minion"
    assert opts["module_dirs"] == []
    assert opts["__role"] == "minion"
    assert opts["conf_file"] == str(tmp_path / "minion")
    # every schema key of the node is present
    assert {o.name for o in options_for("minion")} <= set(opts)
    assert "peer" not in opts


def test_master_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "box")
    opts = master_config(write(tmp_path / "master", "# nothing set\n"))
    assert opts["id"] == "box_master"
    assert opts["raet_port"] == 4506
    assert opts["timeout"] == 5
    assert opts["keep_jobs"] == 24
    assert opts["token_expire"] == 43200
    assert opts["master_job_cache"] == "local_cache"
    assert opts["peer"] == {} and opts["peer_run"] == {}
    assert opts["auto_accept"] is False and opts["open_mode"] is False
    assert opts["cachedir"] == "/var/cache/raetsalt/master"
    assert "master_port" not in opts


def test_fqdn_localhost_falls_back_to_hostname(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grains, "fqdn", lambda: "localhost.localdomain")
    monkeypatch.setattr(socket, "gethostname", lambda: "node7")
    assert minion_config(write(tmp_path / "minion", ""))["id"] == "node7"


def test_defaults_are_not_shared_between_calls(tmp_path: Path) -> None:
    path = write(tmp_path / "master", "")
    first = master_config(path)
    first["peer"]["x"] = ["y"]
    assert master_config(path)["peer"] == {}


def test_missing_file_gives_defaults_like_salt(tmp_path: Path) -> None:
    opts = minion_config(tmp_path / "absent")
    assert opts["raet_port"] == 4510
    assert opts["conf_file"] == str(tmp_path / "absent")


def test_numeric_id_becomes_string(tmp_path: Path) -> None:
    assert minion_config(write(tmp_path / "minion", "id: 123\n"))["id"] == "123"


def test_ipv6_changes_default_interface(tmp_path: Path) -> None:
    opts = master_config(write(tmp_path / "master", "ipv6: true\n"))
    assert opts["interface"] == "::"
    opts = master_config(write(tmp_path / "master", "ipv6: true\ninterface: '::1'\n"))
    assert opts["interface"] == "::1"


def test_null_for_mapping_and_list_means_empty(tmp_path: Path) -> None:
    opts = master_config(write(tmp_path / "master", "peer:\n  # none yet\nnodegroups:\n"))
    assert opts["peer"] == {} and opts["nodegroups"] == {}


def test_values_are_kept(tmp_path: Path) -> None:
    text = """
peer:
  '.*\\.example\\.com':
    - test.*
publisher_acl:
  fred:
    - test.*
    - 'web*':
      - pkg.*
publisher_acl_blacklist:
  users: [root]
external_auth:
  pam:
    fred: [test.*]
nodegroups:
  web: 'web* or G@role:web'
  db: [db1, db2]
raet_alive_period: 5
"""
    opts = master_config(write(tmp_path / "master", text))
    assert opts["peer"] == {r".*\.example\.com": ["test.*"]}
    assert opts["publisher_acl"]["fred"][1] == {"web*": ["pkg.*"]}
    assert opts["nodegroups"]["db"] == ["db1", "db2"]
    assert opts["raet_alive_period"] == 5.0 and isinstance(opts["raet_alive_period"], float)


# ------------------------------------------------------------------ paths


def test_relative_paths_join_root_dir(tmp_path: Path) -> None:
    text = "root_dir: /srv/rs\npki_dir: keys\nsock_dir: /abs/sock\nmodule_dirs: [mods, /opt/m]\n"
    opts = minion_config(write(tmp_path / "minion", text))
    assert opts["root_dir"] == "/srv/rs"
    assert opts["pki_dir"] == "/srv/rs/keys"
    # absolute paths stay as written (Salt would re-root them)
    assert opts["sock_dir"] == "/abs/sock"
    assert opts["cachedir"] == "/srv/rs/var/cache/raetsalt/minion"
    assert opts["log_file"] == "/srv/rs/var/log/raetsalt/minion"
    assert opts["module_dirs"] == ["/srv/rs/mods", "/opt/m"]


def test_relative_root_dir_is_relative_to_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir("/")
    opts = master_config(write(tmp_path / "etc" / "master", "root_dir: ../run\n"))
    assert opts["root_dir"] == str(tmp_path / "run")
    assert opts["pki_dir"] == str(tmp_path / "run/etc/raetsalt/pki/master")


def test_autosign_file_resolved_and_none_kept(tmp_path: Path) -> None:
    opts = master_config(write(tmp_path / "master", "root_dir: /r\nautosign_file: autosign.conf\n"))
    assert opts["autosign_file"] == "/r/autosign.conf"
    assert opts["autoreject_file"] is None


# ------------------------------------------------------------------ master address


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("salt", ("salt", 4506)),
        ("salt.example.com:4600", ("salt.example.com", 4600)),
        ("10.0.0.1", ("10.0.0.1", 4506)),
        ("10.0.0.1:1", ("10.0.0.1", 1)),
        ("::1", ("::1", 4506)),
        ("[::1]", ("::1", 4506)),
        ("[fe80::1]:4700", ("fe80::1", 4700)),
    ],
)
def test_parse_master_address(value: str, expected: tuple[str, int]) -> None:
    assert parse_master_address(value, 4506) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "host:",
        "host:0",
        "host:65536",
        "host:abc",
        "[::1",
        "[::1]x",
        "[10.0.0.1]:5",
        "::g",
        "bad host",
        "a:b:c",
        "-lead",
    ],
)
def test_parse_master_address_rejects(value: str) -> None:
    with pytest.raises(ValueError):
        parse_master_address(value)


def test_master_host_port_overrides_master_port(tmp_path: Path) -> None:
    opts = minion_config(write(tmp_path / "minion", "master: '[::1]:4700'\nmaster_port: 4600\n"))
    assert (opts["master"], opts["master_port"]) == ("::1", 4700)
    opts = minion_config(write(tmp_path / "minion", "master: m.example\nmaster_port: 4600\n"))
    assert (opts["master"], opts["master_port"]) == ("m.example", 4600)


def test_a_list_of_masters(tmp_path: Path) -> None:
    opts = minion_config(write(tmp_path / "minion", "master: [m1.example, '[::1]:4700', "
                               "'10.0.0.3:4507']\nmaster_port: 4600\nmaster_type: failover\n"))
    assert (opts["master"], opts["master_port"]) == ("m1.example", 4600)  # Salt's modules
    assert opts["__masters"] == ["m1.example:4600", "[::1]:4700", "10.0.0.3:4507"]
    assert opts["master_type"] == "failover"
    assert minion_config(write(tmp_path / "minion", "master: m1\n"))["__masters"] == ["m1:4506"]
    for text, why in (("master: []\n", "lists no master"),
                      ("master: [a, 'a:4506']\n", "lists a master twice"),
                      (f"master: [{', '.join(f'm{i}' for i in range(65))}]\n", "at most 64"),
                      ("master: [a, 'b:0']\n", "(or a list of them), got 'b:0'"),
                      ("master: [a, b]\nmaster_type: distributed\n", "not served"),
                      ("__masters: [x]\n", "__masters")):
        assert why in error_of(minion_config, write(tmp_path / "minion", text)), text


def test_bad_master_address_names_file_and_key(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", "master: 'salt:99999'\n")
    message = error_of(minion_config, path)
    assert message.startswith(f"{path}: key 'master' must be")
    assert "'salt:99999'" in message and "65535" in message


# ------------------------------------------------------------------ errors


def test_yaml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", "id: a\nmaster: [unclosed\n")
    message = error_of(minion_config, path)
    assert message.startswith(f"{path}: YAML error at line ")
    assert "\n" not in message


def test_nesting_that_would_crash_the_yaml_parser_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "master", "nodegroups: " + "[" * 40000 + "\n")
    assert error_of(master_config, path) == (
        f"{path}: YAML error: nested more than 1000 levels deep")


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", "id: a\nid: b\n")
    assert re.fullmatch(
        rf"{re.escape(str(path))}: YAML error at line 2, column 1: duplicate key 'id'",
        error_of(minion_config, path),
    )


@pytest.mark.parametrize(
    ("text", "word"), [("- a\n- b\n", "a list"), ("just text\n", "a string"), ("42\n", "a number")]
)
def test_not_a_mapping(tmp_path: Path, text: str, word: str) -> None:
    path = write(tmp_path / "master", text)
    assert error_of(master_config, path) == (
        f"{path}: must be a mapping of option names to values, got {word}"
    )


def test_unknown_key_with_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", "raet_prot: 4510\n")
    assert (
        error_of(minion_config, path)
        == f"{path}: unknown key 'raet_prot' (did you mean 'raet_port'?)"
    )


def test_unknown_key_without_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", "zzzzzz: 1\n")
    assert error_of(minion_config, path) == f"{path}: unknown key 'zzzzzz'"


def test_salt_keys_load_with_one_warning_line(tmp_path: Path) -> None:
    # A real Salt master config: 14 common Salt keys were once fatal, one per run.
    salt_master = (
        "file_roots: {base: [/srv/salt]}\npillar_roots: {base: [/srv/pillar]}\n"
        "worker_threads: 5\nhash_type: sha256\nstate_top: top.sls\nret_port: 4506\n"
        "publish_port: 4505\nfileserver_backend: [roots]\next_pillar: []\nreactor: []\n"
        "master_sign_pubkey: false\nfile_recv: false\ngather_job_timeout: 10\n"
        "cli_summary: false\nenable_gpu_grains: true\ntimeout: 7\n"
    )
    path = write(tmp_path / "master", salt_master)
    write(tmp_path / "master.d" / "mods.conf", "mysql.host: db\nminion_id_caching: true\n")
    warnings: list[str] = []
    opts = load_node_config(tmp_path, "master", warnings)
    # file_roots, pillar_roots, hash_type, state_top are raetsalt's (the Salt bridge)
    assert opts["timeout"] == 7 and opts["state_top"] == "top.sls"
    assert "worker_threads" not in opts
    assert len(warnings) == 1
    line = warnings[0]
    # ret_port is raetsalt's (Salt's local request channel, salt_local_clients)
    assert line.startswith(f"{path}: ignoring 10 key(s) raetsalt does not use in a master "
                           "config: 'worker_threads', 'publish_port',")
    # A module's setting is kept for the modules that read it (Salt's returners).
    assert "mysql.host" not in line and opts["mysql.host"] == "db"
    assert "\n" not in line
    # the Salt-compatible loaders accept the file without a word
    assert master_config(path)["timeout"] == 7


def test_minion_salt_keys_and_master_options_are_ignored(tmp_path: Path) -> None:
    write(tmp_path / "minion", "master_finger: 'ab:cd'\nfile_client: local\n"
                               "startup_states: highstate\nmine_functions: {}\n"
                               "mine_interval: 5\nmine_enabled: true\n"
                               "hash_type: sha256\nscheduler_before_connect: true\npeer: {}\n")
    warnings: list[str] = []
    load_node_config(tmp_path, "minion", warnings)
    assert warnings[0].endswith("'startup_states', 'scheduler_before_connect', 'peer' "
                                "(a raetsalt master option)")
    # file_client, master_finger, hash_type and the mine's keys are minion options
    assert "ignoring 3 key(s)" in warnings[0]


def test_salts_keys_are_kept_for_salts_loader(tmp_path: Path) -> None:
    """Keys raetsalt ignores but Salt reads (its keys, module settings, the ones Salt
    reads with opts.get) are kept in ``__salt`` for Salt's loader, a later file
    winning (``peer``, a master key of both, too: Salt's minion would hold it)."""
    write(tmp_path / "minion", "disable_modules: [aptpkg]\nproviders: {pkg: yumpkg}\n"
                               "pillar_raise_on_missing: true\nbeacons_before_connect: true\n"
                               "module_executors: [direct_call]\nproxy: {}\n"
                               "use_superseded: [module.run]\nmysql.host: db\npeer: {}\n")
    write(tmp_path / "minion.d" / "later.conf", "disable_modules: [cmdmod]\n")
    opts = load_node_config(tmp_path, "minion", [])
    assert opts["__salt"] == {
        "disable_modules": ["cmdmod"], "providers": {"pkg": "yumpkg"},
        "pillar_raise_on_missing": True, "beacons_before_connect": True,
        "module_executors": ["direct_call"],
        "proxy": {}, "use_superseded": ["module.run"], "peer": {}}
    assert opts["mysql.host"] == "db"  # a module's setting stays in the opts themselves
    write(tmp_path / "minion", "__salt: {}\n")
    with pytest.raises(ConfigError, match="set by raetsalt"):
        load_node_config(tmp_path, "minion")


def test_all_unknown_keys_in_one_error(tmp_path: Path) -> None:
    path = write(tmp_path / "master", "file_rots: {}\nworker_thread: 2\nzzzzzz: 1\n"
                                      "file_roots: {}\n")
    write(tmp_path / "master.d" / "x.conf", "publsh_port: 1\n")
    message = error_of(lambda p: load_node_config(p, "master"), tmp_path)
    assert message == (
        f"{path}: unknown keys 'file_rots' (did you mean 'file_roots'?), 'worker_thread' "
        f"(did you mean 'worker_threads'?), 'zzzzzz', 'publsh_port' in "
        f"{tmp_path / 'master.d' / 'x.conf'} (did you mean 'publish_port'?)"
    )


def test_unknown_keys_message_is_bounded(tmp_path: Path) -> None:
    text = "".join(f"bogus_{i}_{'x' * 200}: 1\n" for i in range(5000))
    message = error_of(minion_config, write(tmp_path / "minion", text))
    assert message.endswith("and 4980 more") and len(message) < 2500 and "\n" not in message


@pytest.mark.parametrize("bad", ["web 1", "web\t1", "a~b", "-x", "a..b", "é"])
def test_ids_the_road_cannot_carry_are_config_errors(tmp_path: Path, bad: str) -> None:
    path = write(tmp_path / "minion", f"id: {json.dumps(bad)}\n")
    assert error_of(minion_config, path).startswith(f"{path}: key 'id' must be a valid id")


def test_derived_key_cannot_be_set(tmp_path: Path) -> None:
    path = write(tmp_path / "master", "conf_file: /x\n")
    assert "is set by raetsalt" in error_of(master_config, path)


def test_wrong_type_message_exact(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", "raet_port: abc\n")
    assert error_of(minion_config, path) == (
        f"{path}: key 'raet_port' must be an integer from 0 to 65535, got 'abc'"
    )


@pytest.mark.parametrize(
    ("node", "text", "fragment"),
    [
        (
            "minion",
            "raet_port: true",
            "key 'raet_port' must be an integer from 0 to 65535, got True",
        ),
        ("minion", "raet_port: 70000", "got 70000"),
        ("minion", "master_port: 0", "key 'master_port' must be an integer from 1 to 65535"),
        ("master", "auto_accept: 'yes please'", "key 'auto_accept' must be true or false"),
        ("master", "peer: [a]", "key 'peer' must be a mapping of names or regexes"),
        ("master", "peer: {'.*': test.ping}", "the rules of '.*' are not a list"),
        ("master", "publisher_acl_blacklist: {groups: [x]}", "unknown entry 'groups'"),
        ("master", "external_auth: {pam: [fred]}", "backend 'pam' must map to a mapping of users"),
        ("master", "nodegroups: {web: 5}", "group 'web' must map to a target string or list"),
        ("minion", "module_dirs: /opt/mods", "key 'module_dirs' must be a list of strings"),
        ("minion", "grains: [a]", "key 'grains' must be a mapping"),
        ("minion", "log_level: loud", "key 'log_level' must be one of 'all'"),
        ("minion", "interface: localhost", "key 'interface' must be an IPv4 or IPv6 address"),
        ("minion", "id: 'a/b'", "key 'id' must be a valid id string, got 'a/b'"),
        ("minion", "id: ''", "(it is empty)"),
        ("minion", "raet_alive_period: -1", "key 'raet_alive_period' must be a number >= 0"),
        ("minion", "raet_alive_period: .inf", "(it is not a finite number)"),
        ("master", "eauth_lockout_time: .inf", "(it is not a finite number)"),
        ("master", "eauth_fail_delay: .nan", "(it is not a finite number)"),
        ("master", "command_socket_max_per_uid: 0", "must be an integer from 1 to 100000"),
        ("master", "timeout: 0", "key 'timeout' must be an integer >= 1"),
        ("master", "master_job_cache: redis", "key 'master_job_cache' must be one of"),
        ("minion", "user: ''", "key 'user' must be a non-empty string or null"),
        ("minion", "raet_alt_port: 4510", "key 'raet_alt_port' must differ from raet_port"),
        ("minion", "include: 5", "key 'include' must be a string or a list of strings"),
    ],
)
def test_wrong_values(tmp_path: Path, node: str, text: str, fragment: str) -> None:
    path = write(tmp_path / node, text + "\n")
    loader = master_config if node == "master" else minion_config
    message = error_of(loader, path)
    assert message.startswith(f"{path}: ")
    assert fragment in message


@pytest.mark.parametrize("value", ["zeromq", "tcp", "RAET"])
def test_unsupported_transport(tmp_path: Path, value: str) -> None:
    path = write(tmp_path / "master", f"transport: {value}\n")
    assert error_of(master_config, path) == (
        f"{path}: key 'transport' must be 'raet', got '{value}' (raetsalt only speaks RAET)"
    )


def test_long_values_are_shortened_in_messages(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", f"raet_port: '{'x' * 200}'\n")
    message = error_of(minion_config, path)
    assert message.endswith("...") and len(message) < len(str(path)) + 150


def test_config_path_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "minion").mkdir()
    assert error_of(minion_config, tmp_path / "minion") == (
        f"{tmp_path / 'minion'}: is a directory, not a config file"
    )


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "minion"
    path.write_bytes(b"id: \xff\xfe\n")
    assert error_of(minion_config, path).startswith(f"{path}: not UTF-8 text")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", "id: a\n")
    path.chmod(0)
    assert error_of(minion_config, path).startswith(f"{path}: cannot read: ")


def test_errors_name_the_file_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "conf" / "minion", "raet_port: abc\n")
    monkeypatch.chdir(tmp_path)
    assert error_of(minion_config, "conf/minion") == (
        "conf/minion: key 'raet_port' must be an integer from 0 to 65535, got 'abc'"
    )


# ------------------------------------------------------------------ load_node_config / includes


def test_load_node_config_missing_dir(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(missing))}: config directory does not exist$"
    ):
        load_node_config(missing, "master")


def test_load_node_config_file_instead_of_dir(tmp_path: Path) -> None:
    path = write(tmp_path / "master", "")
    with pytest.raises(ConfigError, match="is not a directory"):
        load_node_config(path, "master")


def test_load_node_config_bad_node(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_node_config(tmp_path, "syndic")


def test_load_node_config_reads_file_and_dot_d(tmp_path: Path) -> None:
    write(tmp_path / "master", "timeout: 7\npeer:\n  a: [x]\n")
    write(tmp_path / "master.d" / "20-b.conf", "peer:\n  c: [z]\nkeep_jobs: 2\n")
    write(tmp_path / "master.d" / "10-a.conf", "peer:\n  b: [y]\nkeep_jobs: 1\n")
    write(tmp_path / "master.d" / "ignored.txt", "this is: [not read\n")
    opts = load_node_config(tmp_path, "master")
    assert opts["timeout"] == 7
    # .d files are read in sorted order; the later one wins for scalars
    assert opts["keep_jobs"] == 2
    # included files merge with each other and replace the main file's key (Salt)
    assert opts["peer"] == {"b": ["y"], "c": ["z"]}


def test_dot_d_without_main_file(tmp_path: Path) -> None:
    write(tmp_path / "minion.d" / "id.conf", "id: fromdotd\n")
    assert load_node_config(tmp_path, "minion")["id"] == "fromdotd"


def test_error_in_dot_d_names_that_file(tmp_path: Path) -> None:
    write(tmp_path / "minion", "id: a\n")
    bad = write(tmp_path / "minion.d" / "x.conf", "raet_port: [1]\n")
    with pytest.raises(ConfigError) as info:
        load_node_config(tmp_path, "minion")
    assert str(info.value).startswith(f"{bad}: key 'raet_port'")


def test_bad_master_from_dot_d_names_that_file(tmp_path: Path) -> None:
    write(tmp_path / "minion", "id: a\n")
    bad = write(tmp_path / "minion.d" / "m.conf", "master: 'x:y'\n")
    with pytest.raises(ConfigError) as info:
        load_node_config(tmp_path, "minion")
    assert str(info.value).startswith(f"{bad}: key 'master'")


def test_include_globs_and_nesting(tmp_path: Path) -> None:
    write(tmp_path / "minion", "include:\n  - extra.conf\n  - site/*.conf\n  - empty/*.conf\n")
    write(tmp_path / "extra.conf", "grains: {a: 1}\ninclude: deeper.conf\n")
    write(tmp_path / "deeper.conf", "grains: {b: 2}\n")
    write(tmp_path / "site" / "x.conf", "log_level: debug\n")
    opts = minion_config(tmp_path / "minion")
    assert opts["grains"] == {"a": 1, "b": 2}
    assert opts["log_level"] == "debug"


def test_include_cycle_terminates(tmp_path: Path) -> None:
    write(tmp_path / "minion", "include: a.conf\n")
    write(tmp_path / "a.conf", "include: b.conf\nid: a\n")
    write(tmp_path / "b.conf", "include: [a.conf, minion]\nlog_level: info\n")
    opts = minion_config(tmp_path / "minion")
    assert (opts["id"], opts["log_level"]) == ("a", "info")


def test_include_missing_plain_file_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "minion", "include: nothere.conf\n")
    assert error_of(minion_config, path) == (
        f"{path}: key 'include' names 'nothere.conf', which does not exist"
    )


def test_default_include_can_be_changed(tmp_path: Path) -> None:
    write(tmp_path / "master", "default_include: conf.d/*.yaml\n")
    write(tmp_path / "conf.d" / "a.yaml", "timeout: 9\n")
    write(tmp_path / "master.d" / "a.conf", "timeout: 3\n")
    assert load_node_config(tmp_path, "master")["timeout"] == 9


# ------------------------------------------------------------------ schema and example files


def test_schema_rows_are_well_formed() -> None:
    names = [o.name for o in SCHEMA]
    assert len(names) == len(set(names))
    for opt in SCHEMA:
        assert opt.nodes and opt.nodes <= {"master", "minion"}
        assert opt.doc.strip() and opt.section
        for node, default in opt.defaults.items():
            if default is not None or opt.name in ("id",):
                continue
            # a None default must be accepted by the key's own check
            assert opt.spec.check(default) is None, (opt.name, node)


@pytest.mark.parametrize("node", ["master", "minion"])
def test_every_default_passes_its_own_check(node: str) -> None:
    for opt in options_for(node):
        opt.spec.check(opt.defaults[node])


@pytest.mark.parametrize("node", ["master", "minion"])
def test_example_file_is_generated_from_schema(node: str) -> None:
    shipped = (REPO / "conf" / node).read_text(encoding="utf-8")
    assert shipped == example_config(node), (
        f"regenerate: python -m raetsalt.config {node} > conf/{node}"
    )


@pytest.mark.parametrize("node", ["master", "minion"])
def test_example_file_documents_every_key(node: str) -> None:
    text = (REPO / "conf" / node).read_text(encoding="utf-8")
    for opt in options_for(node):
        assert re.search(rf"^#?{re.escape(opt.name)}:", text, re.M), opt.name
    # nothing of the other node is documented as a setting
    for opt in SCHEMA:
        if node not in opt.nodes:
            assert not re.search(rf"^#?{re.escape(opt.name)}:", text, re.M), opt.name


@pytest.mark.parametrize("node", ["master", "minion"])
def test_commented_defaults_parse_back_to_the_defaults(node: str) -> None:
    text = (REPO / "conf" / node).read_text(encoding="utf-8")
    defaults = config.default_opts(node)
    for line in text.splitlines():
        match = re.match(r"^#([a-z_]+): (.*)$", line)
        if match and match.group(1) in defaults:
            assert yaml.safe_load(f"v: {match.group(2)}")["v"] == defaults[match.group(1)], line


def test_example_files_load_and_work_on_loopback() -> None:
    master = load_node_config(REPO / "conf", "master")
    minion = load_node_config(REPO / "conf", "minion")
    assert (master["interface"], master["raet_port"]) == ("127.0.0.1", 4506)
    assert minion["id"] == "minion1"
    # No listener: the minion binds the address towards its master (road_binding).
    assert (minion["interface"], minion["raet_port"]) == (None, 4510)
    assert (minion["master"], minion["master_port"]) == ("127.0.0.1", master["raet_port"])
    for opts in (master, minion):  # private default paths, never a shared /tmp
        assert opts["root_dir"] == "/"
        for key in ("pki_dir", "cachedir", "sock_dir", "log_file", "pidfile"):
            assert opts[key].startswith(("/etc/raetsalt/", "/var/")), key
            assert not opts[key].startswith("/tmp"), key
    assert master["sock_dir"] != minion["sock_dir"]
    assert master["pki_dir"] != minion["pki_dir"]


def test_example_main_rejects_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert config._main(["syndic"]) == 2
    assert config._main(["minion"]) == 0
    assert capsys.readouterr().out == example_config("minion")


def test_example_snippets_are_valid_settings(tmp_path: Path) -> None:
    for opt in SCHEMA:
        if not opt.example:
            continue
        node = "master" if "master" in opt.nodes else "minion"
        path = write(tmp_path / node, "\n".join(opt.example) + "\n")
        loader = master_config if node == "master" else minion_config
        opts = loader(path) if opt.name != "include" else None
        if opts is not None:
            assert opts[opt.name] == yaml.safe_load(path.read_text())[opt.name]
