"""Master and minion configuration: one schema table, YAML loading, validation.

``master_config(path)`` and ``minion_config(path)`` return a plain ``dict`` of options
("opts") with every key of the schema present, the way ``salt.config`` does, so scripts
written for Salt (``opts = ...minion_config(path)`` then ``MinionEvent(**opts)``) work.

Loading order, as in Salt:

1. the main file (a missing file is not an error: the defaults are used, as Salt does);
2. ``default_include`` (``master.d/*.conf`` / ``minion.d/*.conf`` beside the main file),
   files in sorted order;
3. the files named by ``include`` (globs relative to the including file's directory).

A top-level key set by an included file replaces the main file's value.  When several
included files set the same mapping or list key, their values are merged (mappings
recursively, lists concatenated), again as Salt does.

Every key of every file is checked against ``SCHEMA``: an unknown key, a wrong type or a
bad value raises ``ConfigError`` whose message starts with the file it came from, for
example ``conf/minion: key 'raet_port' must be an integer from 0 to 65535, got 'abc'``.

Paths (``PATH_KEYS``) that are relative are joined to ``root_dir``; ``root_dir`` itself,
when relative, is taken relative to the directory of the main config file.

The regular expressions inside ``peer``, ``peer_run`` and ``publisher_acl`` are only
checked for shape here; ``raetsalt.acl`` compiles them when the master starts.
"""

from __future__ import annotations

import difflib
import glob
import ipaddress
import math
import os
import re
import socket
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from raetsalt.errors import ConfigError

__all__ = [
    "DEFAULT_MASTER_PORT",
    "DEFAULT_MINION_RAET_PORT",
    "DERIVED_KEYS",
    "NODES",
    "Option",
    "PATH_KEYS",
    "SCHEMA",
    "SUPPORTED_TRANSPORTS",
    "default_opts",
    "example_config",
    "load_node_config",
    "master_config",
    "minion_config",
    "options_for",
    "parse_master_address",
]

Opts = dict[str, Any]

NODES: tuple[str, ...] = ("master", "minion")
SUPPORTED_TRANSPORTS: tuple[str, ...] = ("raet",)
DEFAULT_MASTER_PORT = 4506
DEFAULT_MINION_RAET_PORT = 4510

# Keys the loader sets itself; a config file may not set them.
DERIVED_KEYS: frozenset[str] = frozenset({"conf_file", "conf_dir", "__role"})

# Salt's log levels, least to most severe, plus ``quiet``.
LOG_LEVELS: tuple[str, ...] = (
    "all",
    "garbage",
    "trace",
    "debug",
    "profile",
    "info",
    "warning",
    "error",
    "critical",
    "quiet",
)
EVENT_MATCH_TYPES: tuple[str, ...] = ("startswith", "endswith", "find", "regex", "fnmatch")


# --------------------------------------------------------------------------- value specs


class _Mismatch(Exception):
    """A value does not fit its spec; ``detail`` optionally says more than the spec text."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Spec:
    """What a key accepts.  ``describe`` completes "key 'x' must be ..."."""

    describe: str
    check: Callable[[Any], Any]


def _is_int(value: Any) -> bool:
    # bool is a subclass of int; ``raet_port: yes`` must not pass as 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _string(*, nonempty: bool = False, nullable: bool = False) -> Spec:
    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise _Mismatch()
        if nonempty and not value.strip():
            raise _Mismatch("an empty string is not allowed")
        return value

    describe = "a non-empty string" if nonempty else "a string"
    if nullable:
        describe += " or null"
    return Spec(describe, check)


def _integer(lo: int | None = None, hi: int | None = None) -> Spec:
    def check(value: Any) -> Any:
        if not _is_int(value):
            raise _Mismatch()
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise _Mismatch()
        return value

    if lo is not None and hi is not None:
        describe = f"an integer from {lo} to {hi}"
    elif lo is not None:
        describe = f"an integer >= {lo}"
    else:
        describe = "an integer"
    return Spec(describe, check)


def _number(lo: float = 0.0) -> Spec:
    def check(value: Any) -> Any:
        if not (_is_int(value) or isinstance(value, float)) or value < lo:
            raise _Mismatch()
        if not math.isfinite(value):  # YAML's .inf and .nan
            raise _Mismatch("it is not a finite number")
        return float(value)

    return Spec(f"a number >= {lo:g}", check)


def _boolean() -> Spec:
    def check(value: Any) -> Any:
        if not isinstance(value, bool):
            raise _Mismatch()
        return value

    return Spec("true or false", check)


def _choice(values: tuple[str, ...], *, why: str = "", nullable: bool = False) -> Spec:
    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if value not in values:
            raise _Mismatch(why)
        return value

    shown = ", ".join(repr(v) for v in values)
    describe = shown if len(values) == 1 else f"one of {shown}"
    if nullable:
        describe += " or null"
    return Spec(describe, check)


def _string_list() -> Spec:
    def check(value: Any) -> Any:
        # ``key:`` followed only by comments parses as null; read it as "empty".
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _Mismatch()
        return list(value)

    return Spec("a list of strings", check)


def _string_or_list() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise _Mismatch()

    return Spec("a string or a list of strings", check)


def _mapping() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _Mismatch()
        return value

    return Spec("a mapping", check)


def _rule_mapping() -> Spec:
    """``peer``/``peer_run``/``publisher_acl``: name or regex -> list of rules."""

    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _Mismatch()
        for name, rules in value.items():
            if not isinstance(name, str):
                raise _Mismatch(f"entry {name!r} is not a string")
            if not isinstance(rules, list):
                raise _Mismatch(f"the rules of {name!r} are not a list")
        return value

    return Spec("a mapping of names or regexes to lists of rules", check)


def _external_auth() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _Mismatch()
        for backend, users in value.items():
            if not isinstance(backend, str) or not isinstance(users, dict):
                raise _Mismatch(f"backend {backend!r} must map to a mapping of users")
            for user, rules in users.items():
                if isinstance(user, str) and user.startswith("^"):
                    continue  # a backend setting (^filename...), checked at master start
                if not isinstance(rules, list):
                    raise _Mismatch(f"the rules of {backend}:{user} are not a list")
        return value

    return Spec("a mapping of auth backends to mappings of users", check)


def _blacklist() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _Mismatch()
        for name, items in value.items():
            if name not in ("users", "modules"):
                raise _Mismatch(f"unknown entry {name!r} (allowed: 'users', 'modules')")
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise _Mismatch(f"{name!r} must be a list of strings")
        return value

    return Spec("a mapping with 'users' and/or 'modules' lists", check)


def _nodegroups() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _Mismatch()
        for name, target in value.items():
            ok = isinstance(target, str) or (
                isinstance(target, list) and all(isinstance(t, str) for t in target)
            )
            if not isinstance(name, str) or not ok:
                raise _Mismatch(f"group {name!r} must map to a target string or list")
        return value

    return Spec("a mapping of group names to compound targets", check)


def _ip_address() -> Spec:
    def check(value: Any) -> Any:
        if not isinstance(value, str):
            raise _Mismatch()
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise _Mismatch("it is not an IP address") from None
        return value

    return Spec("an IPv4 or IPv6 address", check)


def _minion_id() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return None
        # Salt turns a numeric id (``id: 123``) into its string form.
        if _is_int(value) or isinstance(value, float):
            value = str(value)
        if not isinstance(value, str):
            raise _Mismatch()
        problem = _id_problem(value)
        if problem:
            raise _Mismatch(problem)
        return value

    return Spec("a valid id string", check)


def _id_problem(value: str) -> str:
    # The id names files under pki_dir and the estate on the road, so it must be a
    # single safe path component (Salt's valid_id forbids the same characters).
    if not value.strip():
        return "it is empty"
    if any(c in value for c in "/\\\0"):
        return "it contains '/', '\\' or a NUL"
    if value in (".", ".."):
        return "it is '.' or '..'"
    if value != value.strip():
        return "it has leading or trailing white space"
    return ""


# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True, slots=True)
class Option:
    """One row of the schema.

    ``defaults`` maps each node the key is valid for to its default.  ``default_doc``
    replaces the printed default when the real one is computed (``id``).  ``path``
    keys are resolved against ``root_dir``.  ``example`` lines are printed, commented
    out, under the key in the example files.
    """

    name: str
    spec: Spec
    defaults: Mapping[str, Any]
    doc: str
    section: str
    path: bool = False
    default_doc: Mapping[str, str] = field(default_factory=dict)
    example: tuple[str, ...] = field(default_factory=tuple)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self.defaults)


def _both(value: Any) -> dict[str, Any]:
    return {"master": value, "minion": value}


_PORT = _integer(0, 65535)

SCHEMA: tuple[Option, ...] = (
    # ---------------------------------------------------------------- identity
    Option(
        "id",
        _minion_id(),
        _both(None),
        "The node id.  For a minion it is the name its key is filed under on the "
        "master and what targets match; for the master it names its estate.  When "
        "unset a minion uses the host's fully qualified domain name (as Salt does) "
        "and the master uses '<hostname>_master' (as Salt's RAET master did).",
        "Identity and transport",
        default_doc={"minion": "the host's FQDN", "master": "'<hostname>_master'"},
    ),
    Option(
        "transport",
        _choice(SUPPORTED_TRANSPORTS, why="raetsalt only speaks RAET"),
        _both("raet"),
        "Transport between master and minions.  Only 'raet' is supported.",
        "Identity and transport",
    ),
    Option(
        "user",
        _string(nonempty=True, nullable=True),
        _both(None),
        "User the daemon switches to after start-up.  null keeps the user that started it.",
        "Identity and transport",
    ),
    # ---------------------------------------------------------------- network
    Option(
        "interface",
        _ip_address(),
        _both("0.0.0.0"),
        "Local address the road (UDP) socket binds to.  With ipv6 true the default becomes '::'.",
        "Network (RAET road)",
    ),
    Option(
        "ipv6",
        _boolean(),
        _both(False),
        "Use IPv6: bind to '::' when interface is left at its default, and "
        "prefer IPv6 addresses when resolving the master's host name.",
        "Network (RAET road)",
    ),
    Option(
        "raet_port",
        _PORT,
        {"master": DEFAULT_MASTER_PORT, "minion": DEFAULT_MINION_RAET_PORT},
        "UDP port of this node's road estate (Salt's RAET-era defaults: 4506 on "
        "the master, 4510 on a minion).  0 lets the system pick one (tests).",
        "Network (RAET road)",
    ),
    Option(
        "raet_alt_port",
        _PORT,
        {"minion": 4511},
        "UDP port of the caller estate that raetsalt-call uses when no minion daemon is running.",
        "Network (RAET road)",
    ),
    Option(
        "master",
        _string(nonempty=True),
        {"minion": "salt"},
        "Where the master's road is: a host name or address, 'host:port', or "
        "'[ipv6]:port'.  A port given here overrides master_port.  After loading, "
        "opts['master'] holds the host alone and opts['master_port'] the port, "
        "as in Salt.",
        "Network (RAET road)",
    ),
    Option(
        "master_port",
        _integer(1, 65535),
        {"minion": DEFAULT_MASTER_PORT},
        "UDP port of the master's road when master does not name one.",
        "Network (RAET road)",
    ),
    Option(
        "max_datagram_size",
        _integer(576, 65507),
        _both(1024),
        "Largest UDP datagram sent or accepted, in bytes.  RAET's 1024 keeps every "
        "packet under the IPv6 minimum MTU; both ends must agree.",
        "Network (RAET road)",
    ),
    Option(
        "raet_road_bufcnt",
        _integer(1, 10000),
        _both(2),
        "Socket send/receive buffers are sized to at least this many maximum-size "
        "datagrams (RAET's bufcnt).",
        "Network (RAET road)",
    ),
    Option(
        "raet_alive_period",
        _number(0.0),
        _both(3.0),
        "Seconds between alive (keep-alive/presence) probes to each joined "
        "remote; also keeps NAT mappings open.  0 turns probing off.",
        "Presence and reconnection",
    ),
    Option(
        "raet_reap_interim",
        _number(0.0),
        {"master": 3600.0},
        "Seconds a remote may stay silent before the master reaps it (stops "
        "probing it and reports it as reaped).  0 never reaps.",
        "Presence and reconnection",
    ),
    Option(
        "presence_events",
        _boolean(),
        {"master": False},
        "Fire salt/presence/present and salt/presence/change events.",
        "Presence and reconnection",
    ),
    Option(
        "random_reauth_delay",
        _number(0.0),
        {"minion": 10.0},
        "Upper bound, in seconds, of the random delay before a minion re-joins "
        "after losing the master, so that a restarted master is not flooded.",
        "Presence and reconnection",
    ),
    Option(
        "acceptance_wait_time",
        _number(0.0),
        {"minion": 10.0},
        "Seconds a minion waits before retrying while its key is pending.",
        "Presence and reconnection",
    ),
    Option(
        "acceptance_wait_time_max",
        _number(0.0),
        {"minion": 0.0},
        "Ceiling for the doubling retry wait while pending; 0 means the wait does not grow.",
        "Presence and reconnection",
    ),
    Option(
        "rejected_retry",
        _boolean(),
        {"minion": False},
        "When the master rejects this minion's key: false exits (code 77, as Salt "
        "does); true keeps retrying as if pending.",
        "Presence and reconnection",
    ),
    # ---------------------------------------------------------------- paths
    Option(
        "root_dir",
        _string(nonempty=True),
        _both("/"),
        "Directory the relative paths below are joined to.  A relative root_dir "
        "is taken relative to the directory of this config file (Salt uses the "
        "working directory).",
        "Paths",
    ),
    Option(
        "pki_dir",
        _string(nonempty=True),
        {"master": "etc/raetsalt/pki/master", "minion": "etc/raetsalt/pki/minion"},
        "Key store: this node's keys and, on the master, the accepted, pending, "
        "rejected and denied minion keys.",
        "Paths",
        path=True,
    ),
    Option(
        "cachedir",
        _string(nonempty=True),
        {"master": "var/cache/raetsalt/master", "minion": "var/cache/raetsalt/minion"},
        "Cache directory (job cache under <cachedir>/jobs on the master, remote "
        "estate state, minion data).",
        "Paths",
        path=True,
    ),
    Option(
        "sock_dir",
        _string(nonempty=True),
        {"master": "var/run/raetsalt/master", "minion": "var/run/raetsalt/minion"},
        "Directory of the local yard (Unix datagram) sockets: the event bus and "
        "local clients.  Keep it short: a socket path must fit in 107 bytes.",
        "Paths",
        path=True,
    ),
    Option(
        "sock_dir_group",
        _string(nonempty=True, nullable=True),
        _both(None),
        "Group whose members may use the event bus and local clients without "
        "being root: sock_dir gets mode 0750 and this group, the bus socket 0660.  "
        "null: only the daemon's user (sock_dir 0700, sockets 0600).",
        "Paths",
    ),
    Option(
        "pidfile",
        _string(nonempty=True),
        {"master": "var/run/raetsalt-master.pid", "minion": "var/run/raetsalt-minion.pid"},
        "File the daemon writes its process id to.",
        "Paths",
        path=True,
    ),
    Option(
        "module_dirs",
        _string_list(),
        {"minion": []},
        "Extra directories searched for execution modules; relative entries are "
        "joined to root_dir.",
        "Paths",
    ),
    # ---------------------------------------------------------------- includes
    Option(
        "default_include",
        _string(nonempty=True),
        {"master": "master.d/*.conf", "minion": "minion.d/*.conf"},
        "Glob of extra config files, relative to this file's directory, read after "
        "this file in sorted order.",
        "Includes",
    ),
    Option(
        "include",
        _string_or_list(),
        _both([]),
        "Further config files or globs (relative to the including file's "
        "directory) read after default_include.  A plain path that does not exist "
        "is an error; a glob may match nothing.",
        "Includes",
        example=("include:", "  - extra.conf", "  - site.d/*.conf"),
    ),
    # ---------------------------------------------------------------- logging
    Option(
        "log_file",
        _string(nonempty=True),
        {"master": "var/log/raetsalt/master", "minion": "var/log/raetsalt/minion"},
        "Log file.",
        "Logging",
        path=True,
    ),
    Option(
        "log_level",
        _choice(LOG_LEVELS),
        _both("warning"),
        "Level of messages written to the console.",
        "Logging",
    ),
    Option(
        "log_level_logfile",
        _choice(LOG_LEVELS, nullable=True),
        _both(None),
        "Level of messages written to log_file; null means the same as log_level.",
        "Logging",
    ),
    # ---------------------------------------------------------------- events
    Option(
        "event_match_type",
        _choice(EVENT_MATCH_TYPES),
        _both("startswith"),
        "Default way get_event matches a tag when the caller gives no match_type.",
        "Event bus",
    ),
    Option(
        "max_event_size",
        _integer(1024),
        _both(1048576),
        "Largest event payload, in bytes; larger data is trimmed.",
        "Event bus",
    ),
    # ---------------------------------------------------------------- keys
    Option(
        "auto_accept",
        _boolean(),
        {"master": False},
        "Accept every new minion key at once.  Only for closed test networks.",
        "Minion keys",
    ),
    Option(
        "open_mode",
        _boolean(),
        {"master": False},
        "Accept every minion, even one whose key changed (overwrites the stored "
        "key).  Only for closed test networks.",
        "Minion keys",
    ),
    Option(
        "autosign_file",
        _string(nonempty=True, nullable=True),
        {"master": None},
        "File of minion ids (globs or anchored regexes, one per line) whose new "
        "keys are accepted automatically.  Ignored when group- or world-writable "
        "unless permissive_pki_access is true.",
        "Minion keys",
        path=True,
    ),
    Option(
        "autoreject_file",
        _string(nonempty=True, nullable=True),
        {"master": None},
        "Like autosign_file, but matching ids are rejected; checked first.",
        "Minion keys",
        path=True,
    ),
    Option(
        "permissive_pki_access",
        _boolean(),
        {"master": False},
        "Allow group-writable autosign/autoreject files.",
        "Minion keys",
    ),
    Option(
        "auth_events",
        _boolean(),
        {"master": True},
        "Fire a salt/auth event for every key decision.",
        "Minion keys",
    ),
    # ---------------------------------------------------------------- jobs
    Option(
        "timeout",
        _integer(1),
        {"master": 5},
        "Seconds the raetsalt CLI waits for returns when -t is not given.",
        "Jobs",
    ),
    Option(
        "master_job_cache",
        _choice(("local_cache",)),
        {"master": "local_cache"},
        "Job cache backend.  Only Salt's 'local_cache' exists: jobs are stored "
        "under <cachedir>/jobs.",
        "Jobs",
    ),
    Option(
        "keep_jobs",
        _integer(0),
        {"master": 24},
        "Hours a job and its returns stay in the job cache; 0 keeps them forever.",
        "Jobs",
    ),
    Option(
        "nodegroups",
        _nodegroups(),
        {"master": {}},
        "Named compound targets for -N.",
        "Jobs",
        example=("nodegroups:", "  web: 'web* or G@role:web'", "  db: [db1, db2]"),
    ),
    Option(
        "grains",
        _mapping(),
        {"minion": {}},
        "Static grains of this minion, merged over the detected ones.",
        "Jobs",
        example=("grains:", "  roles: [web]", "  datacenter: east"),
    ),
    # ---------------------------------------------------------------- access control
    Option(
        "peer",
        _rule_mapping(),
        {"master": {}},
        "Which minions may publish which functions to other minions (publish.*): "
        "minion-id regex -> list of function regexes or {target: [functions]} "
        "(Salt's peer; regexes match at the start only, add $ for exact).  Empty: "
        "no peer publishing.  Checked when the master starts.",
        "Access control",
        example=("peer:", "  '.*\\.example\\.com':", "    - test.*"),
    ),
    Option(
        "peer_run",
        _rule_mapping(),
        {"master": {}},
        "Which minions may run which runners on the master (publish.runner): "
        "minion-id regex -> list of runner regexes.",
        "Access control",
        example=("peer_run:", "  'web.*':", "    - manage.up"),
    ),
    Option(
        "publisher_acl",
        _rule_mapping(),
        {"master": {}},
        "What local non-root users may run through the raetsalt CLI: user (or "
        "regex) -> list of functions or {target: [functions]}; '@runner' or "
        "'@<module>' entries for raetsalt-run.  When set, the master opens a "
        "command socket <sock_dir>_cmd/master.sock for those users.",
        "Access control",
        example=("publisher_acl:", "  fred:", "    - test.*", "    - 'web*':", "      - pkg.*"),
    ),
    Option(
        "publisher_acl_blacklist",
        _blacklist(),
        {"master": {}},
        "Users and modules (regexes) that publisher_acl and external_auth never allow.",
        "Access control",
        example=("publisher_acl_blacklist:", "  users: [root]", "  modules: [cmd.*]"),
    ),
    Option(
        "external_auth",
        _external_auth(),
        {"master": {}},
        "External authentication (raetsalt -a file|pam): backend -> user -> rules, "
        "as in Salt; the file backend takes ^filename, ^filetype (text, htpasswd, "
        "htdigest), ^hashtype...",
        "Access control",
        example=("external_auth:", "  pam:", "    fred:", "      - test.*"),
    ),
    Option(
        "token_expire",
        _integer(1),
        {"master": 43200},
        "Seconds an eauth token stays valid.",
        "Access control",
    ),
    Option(
        "keep_acl_in_token",
        _boolean(),
        {"master": False},
        "Store the user's allowed functions in the token at login instead of "
        "looking them up on every call.",
        "Access control",
    ),
    # ------------------------------------------------- road reassembly limits (issue 10 F3)
    Option(
        "raet_reassembly_per_remote",
        _integer(1024 * 1024),
        _both(32 * 1024 * 1024),
        "Bytes one remote estate may make this node hold in messages it has not "
        "delivered yet (partial ones, or complete ones waiting for an earlier one).  "
        "Each message reserves its announced size plus an eighth; below the 16 MiB "
        "message limit, larger messages from one remote cannot be received.  Beyond "
        "it frames are refused (the sender retries) and counted as reassembly_limit.",
        "Limits (road reassembly)",
    ),
    Option(
        "raet_reassembly_total",
        _integer(1024 * 1024),
        _both(256 * 1024 * 1024),
        "The same cap for all remote estates together.",
        "Limits (road reassembly)",
    ),
    Option(
        "raet_reassembly_timeout",
        _number(1.0),
        _both(30.0),
        "Seconds a partial message may go without a new piece before it is "
        "discarded (counted as reassembly_timeout); its sender's message then fails.",
        "Limits (road reassembly)",
    ),
)

# --------------------------------------------------------------------------- Salt bridge
# Keys of the Salt bridge (issue 14: Salt's loader, file server and pillar over RAET;
# raetsalt.saltbridge).  Kept in one block so the schema/loader split can move it whole.

SALTENV_RE = re.compile(r"(?!\.+\Z)[A-Za-z0-9_.@+-]{1,64}\Z")
"""A saltenv (file_roots/pillar_roots key) as raetsalt accepts it, from a config file or
a minion's request: no '/', not only dots, at most 64 characters."""
ROOTS_KEYS: tuple[str, ...] = ("file_roots", "pillar_roots")
"""Mappings of saltenv -> directories; relative directories are joined to root_dir."""


def _roots() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _Mismatch()
        for env, dirs in value.items():
            if not isinstance(env, str) or not SALTENV_RE.match(env):
                raise _Mismatch(f"saltenv {env!r} must match {SALTENV_RE.pattern}")
            if not isinstance(dirs, list) or not all(isinstance(d, str) and d for d in dirs):
                raise _Mismatch(f"saltenv {env!r} must map to a list of directories")
        return value

    return Spec("a mapping of saltenvs to lists of directories", check)


def _resolve_roots(root: str, roots: Mapping[str, list[str]]) -> dict[str, list[str]]:
    return {env: [os.path.normpath(os.path.join(root, d)) for d in dirs]
            for env, dirs in roots.items()}


_SALT_SECTION = "Salt modules, states, files and pillar"
SALTBRIDGE_OPTIONS: tuple[Option, ...] = (
    Option(
        "execution_mode",
        _choice(("auto", "native", "salt")),
        {"minion": "auto"},
        "Which functions the minion runs: 'auto' runs raetsalt's built-in functions "
        "natively and everything else through Salt's loader when the salt package is "
        "importable (Salt's grains too); 'native' never uses Salt (module_dirs hold "
        "raetsalt-style modules); 'salt' runs every function Salt has through Salt's "
        "loader (only publish.*, event.* and the job-control saltutil functions stay "
        "raetsalt's) and refuses to start without salt.",
        _SALT_SECTION,
    ),
    Option(
        "file_client",
        _choice(("remote", "local")),
        {"minion": "remote"},
        "Where Salt's file client and pillar come from: 'remote' asks the master over "
        "the road (salt:// from its file_roots, pillar compiled there); 'local' uses "
        "this minion's own file_roots and pillar_roots (masterless states).",
        _SALT_SECTION,
    ),
    Option(
        "file_roots",
        _roots(),
        _both({"base": ["srv/salt"]}),
        "Salt's file_roots: saltenv -> directories served as salt:// (on the master; on "
        "a minion only with file_client: local).  Only files inside these directories "
        "are served: '..' and symlinks that lead out are refused.",
        _SALT_SECTION,
        example=("file_roots:", "  base: [/srv/salt]", "  dev: [/srv/salt-dev]"),
    ),
    Option(
        "pillar_roots",
        _roots(),
        _both({"base": ["srv/pillar"]}),
        "Salt's pillar_roots: saltenv -> directories with top.sls and pillar sls "
        "files, compiled on the master for each minion (with Salt's renderers when "
        "salt is importable there, else YAML only).",
        _SALT_SECTION,
        example=("pillar_roots:", "  base: [/srv/pillar]"),
    ),
    Option(
        "state_top",
        _string(nonempty=True),
        {"master": "top.sls"},
        "The top file of the states, relative to each saltenv's file_roots.",
        _SALT_SECTION,
    ),
    Option(
        "renderer",
        _string(nonempty=True),
        {"master": "jinja|yaml"},
        "Salt's default render pipe for sls files (sent to minions with the states).",
        _SALT_SECTION,
    ),
    Option(
        "hash_type",
        _choice(("md5", "sha1", "sha224", "sha256", "sha384", "sha512")),
        {"master": "sha256"},
        "Hash of the files the master serves; minions compare it with their cache.",
        _SALT_SECTION,
    ),
    Option(
        "file_buffer_size",
        _integer(4096, 1048576),
        {"master": 65536},
        "Largest piece of a file sent in one road message (Salt's key; Salt's master "
        "default is 1 MiB).  A minion fetches a file piece by piece, so other messages "
        "to it are never queued behind more than one piece.",
        _SALT_SECTION,
    ),
)
SCHEMA = SCHEMA + SALTBRIDGE_OPTIONS

# ---------------------------------------------------------------- security limits
# Limits against local users starving the command socket and guessing eauth passwords
# (issue #10 F4/F5; read by raetsalt.drivers.cmdsock.Limits and
# raetsalt.auth.limits.LoginPolicy).  Kept as one block apart from the table above.
SCHEMA += (
    Option(
        "command_socket_max_connections",
        _integer(1, 100000),
        {"master": 64},
        "Connections the command socket (local users other than root) holds at once, "
        "all users together.  When it is full, a user with fewer connections takes the "
        "oldest one of the user holding the most.",
        "Security limits",
    ),
    Option(
        "command_socket_max_per_uid",
        _integer(1, 100000),
        {"master": 8},
        "Connections one local user (uid) may hold on the command socket; more are "
        "closed at once.",
        "Security limits",
    ),
    Option(
        "command_socket_frame_timeout",
        _number(0.1),
        {"master": 5.0},
        "Seconds a command-socket client has to send its first request after "
        "connecting, and to finish any request it has begun; slower connections are "
        "closed.",
        "Security limits",
    ),
    Option(
        "command_socket_idle_timeout",
        _number(1.0),
        {"master": 60.0},
        "Seconds a command-socket connection may stay open with nothing in flight (no "
        "returns or answers still due to it).",
        "Security limits",
    ),
    Option(
        "eauth_fail_delay",
        _number(0.0),
        {"master": 1.0},
        "Seconds the answer to a failed external_auth login is held back; it doubles "
        "with every further failure in a row of the same user name or calling uid.  "
        "Other users and the master are not slowed.  0 turns the delay off.",
        "Security limits",
    ),
    Option(
        "eauth_fail_delay_max",
        _number(0.0),
        {"master": 16.0},
        "Longest hold-back of a failed login's answer, in seconds (keep it well under "
        "the 30 s the raetsalt CLI waits for a login's answer).",
        "Security limits",
    ),
    Option(
        "eauth_lockout_after",
        _integer(0),
        {"master": 5},
        "Failed logins in a row after which a user name, or a calling uid, is locked "
        "out for eauth_lockout_time (every login refused unchecked).  0: never.",
        "Security limits",
    ),
    Option(
        "eauth_lockout_time",
        _number(1.0),
        {"master": 600.0},
        "Seconds a lockout lasts; failures are forgotten this long after the last one.",
        "Security limits",
    ),
)

_BY_NAME: dict[str, Option] = {opt.name: opt for opt in SCHEMA}
PATH_KEYS: tuple[str, ...] = tuple(opt.name for opt in SCHEMA if opt.path)


def options_for(node: str) -> tuple[Option, ...]:
    """The schema rows valid on ``node`` ('master' or 'minion'), in table order."""
    _check_node(node)
    return tuple(opt for opt in SCHEMA if node in opt.defaults)


def default_opts(node: str) -> Opts:
    """The defaults of ``node`` as an opts dict, before paths and ``id`` are filled in."""
    _check_node(node)
    # Copy containers so that callers mutating opts cannot change the table.
    return {opt.name: _copy(opt.defaults[node]) for opt in SCHEMA if node in opt.defaults}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _check_node(node: str) -> None:
    if node not in NODES:
        raise ValueError(f"node must be 'master' or 'minion', got {node!r}")


# --------------------------------------------------------------------------- YAML reading


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys in a mapping (Salt's loader does too)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a scalar", key_node.start_mark
            ) from None
        if key in result:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(path: str) -> dict[Any, Any]:
    """Read one config file into a dict; an empty file is an empty dict."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{path}: YAML error{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: YAML error: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: must be a mapping of option names to values, got {_type_word(data)}"
        )
    return data


def _type_word(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------- validation


def _validate_file(path: str, raw: Mapping[Any, Any], node: str) -> Opts:
    """Check every key of one file against the schema; return the checked values."""
    other = "minion" if node == "master" else "master"
    checked: Opts = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ConfigError(f"{path}: option names must be strings, got {_show(key)}")
        if key in DERIVED_KEYS:
            raise ConfigError(f"{path}: key '{key}' is set by raetsalt and cannot be configured")
        opt = _BY_NAME.get(key)
        if opt is None or node not in opt.defaults:
            raise ConfigError(_unknown_key_message(path, key, node, other, opt))
        try:
            checked[key] = opt.spec.check(value)
        except _Mismatch as exc:
            message = f"{path}: key '{key}' must be {opt.spec.describe}, got {_show(value)}"
            if exc.detail:
                message += f" ({exc.detail})"
            raise ConfigError(message) from None
    return checked


def _unknown_key_message(path: str, key: str, node: str, other: str, opt: Option | None) -> str:
    if opt is not None:
        return f"{path}: key '{key}' is a {other} option; it has no meaning in a {node} config"
    message = f"{path}: unknown key '{key}'"
    close = difflib.get_close_matches(key, [o.name for o in options_for(node)], n=1, cutoff=0.6)
    if close:
        message += f" (did you mean '{close[0]}'?)"
    return message


def parse_master_address(value: str, default_port: int = DEFAULT_MASTER_PORT) -> tuple[str, int]:
    """Split a minion's ``master`` value into ``(host, port)``.

    Accepts ``host``, ``host:port``, ``a.b.c.d``, ``a.b.c.d:port``, a bare IPv6 address
    (``::1``, no port possible) and ``[ipv6]`` or ``[ipv6]:port``.  The host is not
    resolved.  Raises ``ValueError`` with a reason.
    """
    text = value.strip()
    if not text:
        raise ValueError("it is empty")
    port_text: str | None = None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("'[' without a closing ']'")
        host, rest = text[1:end], text[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"unexpected text after ']': {rest!r}")
            port_text = rest[1:]
        if not _is_ipv6(host):
            raise ValueError(f"{host!r} in brackets is not an IPv6 address")
    elif text.count(":") > 1:
        # Several colons without brackets can only be a bare IPv6 address.
        if not _is_ipv6(text):
            raise ValueError("not an IPv6 address; write '[address]:port' to give a port")
        host = text
    else:
        host, sep, rest = text.partition(":")
        if sep:
            port_text = rest
        if not _HOSTNAME.match(host):
            raise ValueError(f"{host!r} is not a valid host name or address")
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port {port_text!r} is not a number from 1 to 65535")
    return host, int(port_text)


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")


# --------------------------------------------------------------------------- merging


def _merge_into(base: Opts, extra: Mapping[str, Any]) -> None:
    # Salt's dictupdate.update(merge_lists=True): mappings merge recursively and lists
    # concatenate; anything else is replaced.
    for key, value in extra.items():
        old = base.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            merged = dict(old)
            _merge_into(merged, value)
            base[key] = merged
        elif isinstance(old, list) and isinstance(value, list):
            base[key] = old + [v for v in value if v not in old]  # duplicates dropped
        else:
            base[key] = value


@dataclass(slots=True)
class _Loaded:
    values: Opts = field(default_factory=dict)
    # key -> file that last set it, so later checks can name the right file
    source: dict[str, str] = field(default_factory=dict)


def _include_paths(including_file: str, pattern: str, *, strict: bool) -> list[str]:
    base = os.path.dirname(including_file)
    full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
    if glob.has_magic(full):
        return sorted(p for p in glob.glob(full) if os.path.isfile(p))
    if os.path.isfile(full):
        return [full]
    if strict:
        raise ConfigError(
            f"{including_file}: key 'include' names '{pattern}', which does not exist"
        )
    return []


def _load_includes(
    including_file: str,
    patterns: Iterable[str],
    node: str,
    into: _Loaded,
    seen: set[str],
    *,
    strict: bool,
) -> None:
    for pattern in patterns:
        for path in _include_paths(including_file, pattern, strict=strict):
            real = os.path.realpath(path)
            if real in seen:
                # An include cycle (or the same file twice) adds nothing new.
                continue
            seen.add(real)
            values = _validate_file(path, _read_yaml(path), node)
            nested = values.pop("include", [])
            _merge_into(into.values, values)
            into.source.update({key: path for key in values})
            _load_includes(path, nested, node, into, seen, strict=True)


# --------------------------------------------------------------------------- public loaders


def _load(path: str | os.PathLike[str], node: str) -> Opts:
    path = os.fspath(path)
    opts = default_opts(node)
    source: dict[str, str] = {}
    if os.path.exists(path):
        main = _validate_file(path, _read_yaml(path), node)
        opts.update(main)
        source.update({key: path for key in main})
    # else: like Salt, a missing file means "all defaults" (includes beside it still apply).

    included = _Loaded()
    seen = {os.path.realpath(path)}
    _load_includes(path, [opts["default_include"]], node, included, seen, strict=False)
    _load_includes(path, opts["include"], node, included, seen, strict=True)
    opts.update(included.values)
    source.update(included.source)

    opts["conf_file"] = path
    opts["conf_dir"] = os.path.dirname(os.path.abspath(path))
    opts["__role"] = node
    _finish(opts, node, path, source)
    return opts


def _finish(opts: Opts, node: str, path: str, source: Mapping[str, str]) -> None:
    """Cross-key checks and computed values, after all files are merged."""

    def origin(key: str) -> str:
        return source.get(key, path)

    root = opts["root_dir"]
    if not os.path.isabs(root):
        root = os.path.join(os.path.dirname(os.path.abspath(origin("root_dir"))), root)
    opts["root_dir"] = root = os.path.normpath(root)
    for key in PATH_KEYS:
        if key in opts and opts[key] is not None:
            opts[key] = os.path.normpath(os.path.join(root, opts[key]))
    if "module_dirs" in opts:
        opts["module_dirs"] = [os.path.normpath(os.path.join(root, d)) for d in opts["module_dirs"]]
    for key in ROOTS_KEYS:
        opts[key] = _resolve_roots(root, opts[key])

    if opts["ipv6"] and opts["interface"] == "0.0.0.0":
        opts["interface"] = "::"

    if node == "minion":
        try:
            host, port = parse_master_address(opts["master"], opts["master_port"])
        except ValueError as exc:
            raise ConfigError(
                f"{origin('master')}: key 'master' must be 'host', 'host:port' or "
                f"'[ipv6]:port', got {_show(opts['master'])} ({exc})"
            ) from None
        opts["master"], opts["master_port"] = host, port
        if opts["raet_port"] and opts["raet_port"] == opts["raet_alt_port"]:
            raise ConfigError(
                f"{origin('raet_alt_port')}: key 'raet_alt_port' must differ from "
                f"raet_port ({opts['raet_port']})"
            )

    if opts["id"] is None:
        opts["id"] = _default_id(node)


def _default_id(node: str) -> str:
    if node == "master":
        return f"{socket.gethostname() or 'localhost'}_master"
    # Salt prefers the FQDN; when the resolver only knows "localhost" the plain host
    # name is more useful than an id every unconfigured minion would share.
    fqdn = socket.getfqdn()
    if not fqdn or fqdn.startswith("localhost") or _id_problem(fqdn):
        fqdn = socket.gethostname() or "localhost"
    return fqdn


def master_config(path: str | os.PathLike[str]) -> Opts:
    """Load a master config file (and its includes) into an opts dict with defaults.

    A file that does not exist yields the defaults, as in Salt.
    """
    return _load(path, "master")


def minion_config(path: str | os.PathLike[str]) -> Opts:
    """Load a minion config file (and its includes) into an opts dict with defaults.

    A file that does not exist yields the defaults, as in Salt.  ``opts['master']`` and
    ``opts['master_port']`` come back split (a ``host:port`` master is divided).
    """
    return _load(path, "minion")


def load_node_config(confdir: str | os.PathLike[str], node: str) -> Opts:
    """Load ``<confdir>/<node>`` plus ``<confdir>/<node>.d/*.conf`` for a daemon.

    Unlike the two functions above, a missing or non-directory ``confdir`` is a
    ``ConfigError``: a daemon started with a mistyped ``-c`` must not run on defaults.
    A missing file inside an existing directory still means defaults.
    """
    _check_node(node)
    confdir = os.fspath(confdir)
    if not os.path.exists(confdir):
        raise ConfigError(f"{confdir}: config directory does not exist")
    if not os.path.isdir(confdir):
        raise ConfigError(f"{confdir}: is not a directory (give the config directory, not a file)")
    return _load(os.path.join(confdir, node), node)


# --------------------------------------------------------------------------- example files

_EXAMPLE_HEADER = """\
# raetsalt {node} configuration (YAML).
#
# Every option raetsalt knows is listed below with its default.  A commented
# '#key: value' line shows the default; an uncommented line is a setting this
# example changes.  Unknown keys and wrong types are errors that name this file.
#
# Also read: {node}.d/*.conf beside this file (see default_include), in sorted
# order; a key set there replaces the value here.
#
# This example works as-is on loopback, as a non-root user: root_dir is
# /tmp/raetsalt, so keys, caches, sockets and logs go under it.  For a real
# install set root_dir to / (the default) or remove it.  On a shared machine
# pick a private root_dir instead of /tmp/raetsalt.
#
# This file is generated from the schema in raetsalt/config.py:
#   python -m raetsalt.config {node} > conf/{node}

"""

# The settings the shipped examples change from the defaults.
EXAMPLE_SETTINGS: dict[str, dict[str, Any]] = {
    "master": {"root_dir": "/tmp/raetsalt", "interface": "127.0.0.1"},
    "minion": {
        "id": "minion1",
        "root_dir": "/tmp/raetsalt",
        "interface": "127.0.0.1",
        "master": "127.0.0.1",
    },
}


def _yaml_line(key: str, value: Any) -> str:
    return yaml.safe_dump({key: value}, default_flow_style=True, width=1000).strip()[1:-1]


def example_config(node: str) -> str:
    """Text of the example config file of ``node`` (what ``conf/<node>`` holds)."""
    _check_node(node)
    settings = EXAMPLE_SETTINGS[node]
    out = [_EXAMPLE_HEADER.format(node=node)]
    section = ""
    for opt in options_for(node):
        if opt.section != section:
            section = opt.section
            out.append(f"##### {section} {'#' * max(3, 70 - len(section))}\n\n")
        computed = opt.default_doc.get(node, "")
        default = computed or _yaml_line(opt.name, opt.defaults[node]).split(": ", 1)[1]
        lines = textwrap.wrap(opt.doc, 76)
        lines.append(f"type: {opt.spec.describe}")
        lines.append(f"default: {default}")
        if opt.path:
            lines.append("relative to root_dir")
        out.append("\n".join("# " + line for line in lines) + "\n")
        if opt.name in settings:
            out.append(_yaml_line(opt.name, settings[opt.name]) + "\n")
        elif computed:
            out.append(f"#{opt.name}:\n")
        else:
            out.append("#" + _yaml_line(opt.name, opt.defaults[node]) + "\n")
        if opt.example:
            out.append("# For example:\n")
            out.append("".join(f"#   {line}\n" for line in opt.example))
        out.append("\n")
    return "".join(out).rstrip("\n") + "\n"


def _main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in NODES:
        print("usage: python -m raetsalt.config master|minion", file=sys.stderr)
        return 2
    sys.stdout.write(example_config(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
