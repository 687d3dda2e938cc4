"""The daemon's private directories must be its own (as OpenSSH's ``StrictModes``).

``root_dir``, ``pki_dir``, ``sock_dir``, ``cachedir`` and the log file's directory hold
the keys, the command socket and the job cache.  If another local user created one of
them (or a parent) first, as anyone can under ``/tmp``, that user could swap the keys,
plant an accepted role or put its own socket where the CLI connects.  So each of them
and every parent up to ``/`` must belong to the daemon's user (or root, or the
configured ``user``); a parent may be writable by group or others only with the sticky
bit (``/tmp`` itself is fine: nobody can rename or remove what another user made
there), the directories themselves never.  A symbolic link on the way must belong to
the same users, and where it leads is checked the same way.  Parts that do not exist
yet are not checked: the daemon creates them, so they are its own.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Collection, Mapping
from typing import Any

PRIVATE_KEYS = ("root_dir", "pki_dir", "sock_dir", "cachedir")
"""The directories checked (plus the log file's directory)."""

_MAX_LINKS = 16


def owners(opts: Mapping[str, Any]) -> set[int]:
    """Who may own the private directories: root, the daemon's user, ``user``."""
    allowed = {0, os.geteuid()}
    if isinstance(opts.get("user"), str):
        try:
            allowed.add(pwd.getpwnam(opts["user"]).pw_uid)
        except KeyError:
            pass
    return allowed


def _owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def unsafe_part(path: str, allowed: Collection[int], _links: int = 0) -> str | None:
    """Why the directory ``path`` is not private to ``allowed``, naming the part that is
    not, or None when it is (module docstring)."""
    path = os.path.abspath(path)
    parts = [p for p in path.split(os.sep) if p]
    prefix = os.sep
    for index in range(len(parts) + 1):
        if index:
            prefix = os.path.join(prefix, parts[index - 1])
        last = index == len(parts)
        try:
            info = os.lstat(prefix)
        except FileNotFoundError:
            return None  # the daemon creates the rest itself
        except OSError as exc:
            return f"{prefix} cannot be checked: {exc.strerror or exc}"
        if info.st_uid not in allowed:
            return f"{prefix} belongs to {_owner_name(info.st_uid)}"
        if stat.S_ISLNK(info.st_mode):
            if _links >= _MAX_LINKS:
                return f"{prefix}: too many symbolic links"
            target = os.path.join(os.path.dirname(prefix), os.readlink(prefix))
            rest = os.path.join(target, *parts[index:])
            return unsafe_part(rest, allowed, _links + 1)
        writable = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and (last or not info.st_mode & stat.S_ISVTX):
            who = "group and others" if writable == stat.S_IWGRP | stat.S_IWOTH else (
                "its group" if writable == stat.S_IWGRP else "others")
            return f"{prefix} is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def check_private_dirs(opts: Mapping[str, Any]) -> str | None:
    """The first problem with the daemon's private directories, as one line naming the
    option and the path, or None."""
    allowed = owners(opts)
    checked = [(key, opts.get(key)) for key in PRIVATE_KEYS]
    if isinstance(opts.get("log_file"), str) and "://" not in opts["log_file"]:
        checked.append(("log_file's directory", os.path.dirname(str(opts["log_file"]))))
    for key, path in checked:
        if not isinstance(path, str) or not path:
            continue
        problem = unsafe_part(path, allowed)
        if problem is not None:
            return (f"{key} {path}: {problem}; it and its parents must belong to "
                    f"{', '.join(sorted({_owner_name(u) for u in allowed}))} and not be "
                    f"writable by others (StrictModes)")
    return None
