"""Master and minion configuration: YAML loading and validation against the schema.

``master_config(path)`` and ``minion_config(path)`` return a plain ``dict`` of options
("opts") with every key of the schema present, the way ``salt.config`` does, so scripts
written for Salt (``opts = ...minion_config(path)`` then ``MinionEvent(**opts)``) work.
The keys themselves, their types, defaults and docs are in ``raetsalt.config_schema``.

Loading order, as in Salt:

1. the main file (a missing file is not an error: the defaults are used, as Salt does);
2. ``default_include`` (``master.d/*.conf`` / ``minion.d/*.conf`` beside the main file),
   files in sorted order;
3. the files named by ``include`` (globs relative to the including file's directory).

A top-level key set by an included file replaces the main file's value.  When several
included files set the same mapping or list key, their values are merged (mappings
recursively, lists concatenated), again as Salt does.

Files are read with Salt's YAML rules (``raetsalt.saltyaml``: ``017`` is 17, dates stay
text, a duplicate key is an error).  Every key of every file is checked against
``SCHEMA``: a wrong type or a bad value raises ``ConfigError`` whose message starts with
the file it came from, for example
``conf/minion: key 'raet_port' must be an integer from 0 to 65535, got 'abc'``.
Keys no option of this node takes are gathered over all the files: those Salt knows
(``raetsalt.config_salt_keys``), module settings (``mysql.host``) and the other node's
options are ignored by raetsalt's own code, and ``load_node_config`` reports them in one
warning line; the values of Salt's keys and module settings are kept in
``opts['__salt']`` for Salt's loader (the minion's job processes, the master's Salt
workers: ``disable_modules``, ``providers``, ``ext_pillar``...).  Any other key is
unknown, and all of them make one ``ConfigError`` with suggestions.

Paths (``PATH_KEYS``) that are relative are joined to ``root_dir``; ``root_dir`` itself,
when relative, is taken relative to the directory of the main config file.

The regular expressions inside ``peer``, ``peer_run`` and ``publisher_acl`` are only
checked for shape here; ``raetsalt.acl`` compiles them when the master starts.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from raetsalt import saltyaml
from raetsalt.config_salt_keys import SALT_KEYS
from raetsalt.config_schema import (
    BY_NAME,
    DEFAULT_MASTER_PORT,
    DEFAULT_MINION_RAET_PORT,
    DERIVED_KEYS,
    LOG_LEVELS,
    NODES,
    PATH_KEYS,
    ROOTS_KEYS,
    SALTENV_RE,
    SCHEMA,
    SUPPORTED_TRANSPORTS,
    Option,
    Opts,
    SpecMismatch,
    check_node,
    default_opts,
    id_problem,
    options_for,
)
from raetsalt.errors import ConfigError

__all__ = [
    "DEFAULT_MASTER_PORT",
    "DEFAULT_MINION_RAET_PORT",
    "DERIVED_KEYS",
    "LOG_LEVELS",
    "NODES",
    "Option",
    "PATH_KEYS",
    "ROOTS_KEYS",
    "SALTENV_RE",
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


# --------------------------------------------------------------------------- YAML reading


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
        data = saltyaml.load(text)
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


@dataclass(slots=True)
class _Leftovers:
    """Keys no raetsalt option of this node takes, gathered over every file so that each
    kind is reported once: ``ignored`` ones (Salt's keys, module settings such as
    ``mysql.host``, the other node's raetsalt options) and ``unknown`` ones."""

    ignored: list[tuple[str, str]] = field(default_factory=list)  # (file, key)
    unknown: list[tuple[str, str]] = field(default_factory=list)
    salt: dict[str, Any] = field(default_factory=dict)
    """The values of the ignored keys Salt reads (its keys, module settings): Salt's
    loader gets them (``opts['__salt']``), the later file winning."""


def _validate_file(path: str, raw: Mapping[Any, Any], node: str, left: _Leftovers) -> Opts:
    """Check every key of one file against the schema; return the checked values."""
    checked: Opts = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise ConfigError(f"{path}: option names must be strings, got {_show(key)}")
        if key in DERIVED_KEYS:
            raise ConfigError(f"{path}: key '{key}' is set by raetsalt and cannot be configured")
        opt = BY_NAME.get(key)
        if opt is None and "." in key.strip("."):
            checked[key] = value  # a module's setting (``sqlite3.database``): for returners
            continue
        if opt is None or node not in opt.defaults:
            salts = key in SALT_KEYS or "." in key.strip(".")
            (left.ignored if opt is not None or salts else left.unknown).append((path, key))
            if salts:
                left.salt[key] = value
            continue
        try:
            checked[key] = opt.spec.check(value)
        except SpecMismatch as exc:
            message = f"{path}: key '{key}' must be {opt.spec.describe}, got {_show(value)}"
            if exc.detail:
                message += f" ({exc.detail})"
            raise ConfigError(message) from None
    return checked


_MAX_LISTED = 20

MAX_MASTERS = 64
"""A minion lists at most this many masters."""


def _listed(keys: list[tuple[str, str]], main: str, describe: Callable[[str], str]) -> str:
    """``'a', 'b' in other.conf, ...`` with each key described (at most ``_MAX_LISTED``);
    a file is named only when it is not the one the message starts with."""
    shown = []
    for path, key in keys[:_MAX_LISTED]:
        where = "" if path == main else f" in {path}"
        shown.append(f"{_show(key)}{where}{describe(key)}")
    if len(keys) > _MAX_LISTED:
        shown.append(f"and {len(keys) - _MAX_LISTED} more")
    return ", ".join(shown)


def _suggestion(key: str, node: str) -> str:
    candidates = [o.name for o in options_for(node)] + sorted(SALT_KEYS)
    import difflib

    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _report_leftovers(left: _Leftovers, main: str, node: str,
                      warnings: list[str] | None) -> None:
    """Raise one ConfigError naming every unknown key; add one warning line naming every
    ignored one."""
    if left.unknown:
        first = left.unknown[0][0]
        word = "key" if len(left.unknown) == 1 else "keys"
        raise ConfigError(f"{first}: unknown {word} "
                          + _listed(left.unknown, first, lambda k: _suggestion(k, node)))
    if left.ignored and warnings is not None:
        first = left.ignored[0][0]
        other = "minion" if node == "master" else "master"

        def describe(key: str) -> str:
            return f" (a raetsalt {other} option)" if key in BY_NAME else ""

        warnings.append(f"{first}: ignoring {len(left.ignored)} key(s) raetsalt does not use "
                        f"in a {node} config: {_listed(left.ignored, first, describe)}")


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
        import ipaddress

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
    left: _Leftovers,
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
            values = _validate_file(path, _read_yaml(path), node, left)
            nested = values.pop("include", [])
            _merge_into(into.values, values)
            into.source.update({key: path for key in values})
            _load_includes(path, nested, node, into, seen, left, strict=True)


# --------------------------------------------------------------------------- public loaders


def _load(path: str | os.PathLike[str], node: str, warnings: list[str] | None = None) -> Opts:
    path = os.fspath(path)
    opts = default_opts(node)
    source: dict[str, str] = {}
    left = _Leftovers()
    if os.path.exists(path):
        main = _validate_file(path, _read_yaml(path), node, left)
        opts.update(main)
        source.update({key: path for key in main})
    # else: like Salt, a missing file means "all defaults" (includes beside it still apply).

    included = _Loaded()
    seen = {os.path.realpath(path)}
    _load_includes(path, [opts["default_include"]], node, included, seen, left, strict=False)
    _load_includes(path, opts["include"], node, included, seen, left, strict=True)
    _report_leftovers(left, path, node, warnings)
    opts.update(included.values)
    source.update(included.source)

    opts["conf_file"] = path
    opts["conf_dir"] = os.path.dirname(os.path.abspath(path))
    opts["__role"] = node
    opts["__salt"] = dict(left.salt)
    _finish(opts, node, path, source)
    return opts


def _resolve_roots(root: str, roots: Mapping[str, list[str]]) -> dict[str, list[str]]:
    return {env: [os.path.normpath(os.path.join(root, d)) for d in dirs]
            for env, dirs in roots.items()}


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
        listed = opts["master"] if isinstance(opts["master"], list) else [opts["master"]]
        if not listed:
            raise ConfigError(f"{origin('master')}: key 'master' lists no master")
        if len(listed) > MAX_MASTERS:
            raise ConfigError(f"{origin('master')}: key 'master' lists {len(listed)} "
                              f"masters (at most {MAX_MASTERS})")
        masters: list[tuple[str, int]] = []
        for entry in listed:
            try:
                masters.append(parse_master_address(entry, opts["master_port"]))
            except ValueError as exc:
                raise ConfigError(
                    f"{origin('master')}: key 'master' must be 'host', 'host:port' or "
                    f"'[ipv6]:port' (or a list of them), got {_show(entry)} ({exc})"
                ) from None
        if len(set(masters)) != len(masters):
            raise ConfigError(f"{origin('master')}: key 'master' lists a master twice")
        opts["master"], opts["master_port"] = masters[0]
        opts["__masters"] = [f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in masters]
        if opts["raet_port"] and opts["raet_port"] == opts["raet_alt_port"]:
            raise ConfigError(
                f"{origin('raet_alt_port')}: key 'raet_alt_port' must differ from "
                f"raet_port ({opts['raet_port']})"
            )

    if opts["id"] is None:
        opts["id"] = _default_id(node)


def _default_id(node: str) -> str:
    # Imported here, as the grains below: a config with an id needs neither, and they
    # are a noticeable part of a command's start-up (raetsalt-key's).
    import socket

    if node == "master":
        return f"{socket.gethostname() or 'localhost'}_master"
    from raetsalt.execution.grains import fqdn as host_fqdn

    # Salt prefers the FQDN; when the resolver only knows "localhost" the plain host
    # name is more useful than an id every unconfigured minion would share.
    fqdn = host_fqdn()
    if not fqdn or fqdn.startswith("localhost") or id_problem(fqdn):
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


def load_node_config(
    confdir: str | os.PathLike[str], node: str, warnings: list[str] | None = None
) -> Opts:
    """Load ``<confdir>/<node>`` plus ``<confdir>/<node>.d/*.conf`` for a daemon.

    Unlike the two functions above, a missing or non-directory ``confdir`` is a
    ``ConfigError``: a daemon started with a mistyped ``-c`` must not run on defaults.
    A missing file inside an existing directory still means defaults.  ``warnings``, when
    given, receives the one line naming the keys that were ignored (Salt's keys raetsalt
    does not use), for the caller to log.
    """
    check_node(node)
    confdir = os.fspath(confdir)
    if not os.path.exists(confdir):
        raise ConfigError(f"{confdir}: config directory does not exist")
    if not os.path.isdir(confdir):
        raise ConfigError(f"{confdir}: is not a directory (give the config directory, not a file)")
    return _load(os.path.join(confdir, node), node, warnings)


# --------------------------------------------------------------------------- example files

_EXAMPLE_HEADER = """\
# raetsalt {node} configuration (YAML).
#
# Every option raetsalt knows is listed below with its default.  A commented
# '#key: value' line shows the default; an uncommented line is a setting this
# example changes.  Keys Salt knows that raetsalt does not use (file_roots,
# worker_threads, ...) are ignored with one warning line; unknown keys and wrong
# types are errors that name this file.
#
# Also read: {node}.d/*.conf beside this file (see default_include), in sorted
# order; a key set there replaces the value here.
#
# This example works as-is on loopback, run as root: root_dir is / (the
# default), so keys go to /etc/raetsalt/pki/{node}, the job cache to
# /var/cache/raetsalt/{node}, sockets to /var/run/raetsalt/{node} and the log
# to /var/log/raetsalt/{node}.  To try it as another user, set root_dir to a
# directory of yours that nobody else can write (e.g. ~/raetsalt): the daemons
# refuse private directories (and parents) that another user owns or may
# write, as OpenSSH's StrictModes does, so never a shared /tmp/raetsalt.
#
# This file is generated from the schema in raetsalt/config_schema.py:
#   python -m raetsalt.config {node} > conf/{node}

"""

# The settings the shipped examples change from the defaults.
EXAMPLE_SETTINGS: dict[str, dict[str, Any]] = {
    "master": {"interface": "127.0.0.1"},
    "minion": {
        "id": "minion1",
        "master": "127.0.0.1",
    },
}


def _yaml_line(key: str, value: Any) -> str:
    text: str = yaml.safe_dump({key: value}, default_flow_style=True, width=1000)
    return text.strip()[1:-1]


def example_config(node: str) -> str:
    """Text of the example config file of ``node`` (what ``conf/<node>`` holds)."""
    import textwrap

    check_node(node)
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
