"""Where a node keeps its files, derived from its opts.

One helper per location so the daemons and the CLIs (``raetsalt-key``) agree on the
layout without repeating path arithmetic.

Layout under ``pki_dir`` (master and minion alike)::

    <pki_dir>/            mode 0700 (created by FileKeep)
        road/             the node's road keep, a ``raetsalt.keep.FileKeep``:
                          its own estate and private keys (local/), the remote estates
                          (remote/) and, on the master, every minion key by state
                          (role/ for accepted/pending/rejected, denied/ for denied)

Sockets under ``sock_dir``: each node's yards live on one lane (``lane_name_for``), its
manor yard at ``manor_path``; every socket path must fit ``sun_path``
(``check_socket_path``); ``resolve_group`` turns ``sock_dir_group`` into a gid.

This module imports nothing of the package but its errors: every layer may use it.

The keep sits in a sub-directory rather than in ``pki_dir`` itself so ``pki_dir`` can
later hold other key material (signing keys, a master key chain for rotation) without
mixing file kinds inside the keep's own directories.
"""

from __future__ import annotations

import grp
import os
from collections.abc import Mapping
from typing import Any

from raetsalt.errors import ConfigError, LocalError

__all__ = ["KEEP_SUBDIR", "MAX_SOCKET_PATH", "check_socket_path", "keep_dir", "lane_name_for",
           "resolve_group", "sending_path", "yard_of_sending_path"]

KEEP_SUBDIR = "road"

MAX_SOCKET_PATH = 107
"""Longest socket path: ``struct sockaddr_un.sun_path`` is 108 bytes with its NUL."""


def keep_dir(opts: Mapping[str, Any]) -> str:
    """Directory of the node's road keep: ``<opts['pki_dir']>/road``.

    ``opts`` is a loaded config (``raetsalt.config``), whose ``pki_dir`` is already
    absolute (joined to ``root_dir``).  Nothing is created here.
    """
    return os.path.join(opts["pki_dir"], KEEP_SUBDIR)


def lane_name_for(node: str, node_id: str | None) -> str:
    """The lane a node's yards live on: ``master``, or ``minion-<hash of id>``.

    Minion ids may contain dots, which separate lane and yard in socket names, and may be
    long; a short hash keeps paths short and lets minions share a sock_dir, as Salt's
    ``minion_event_<hash>_pub.ipc`` does.
    """
    if node == "master":
        return "master"
    if node != "minion":
        raise LocalError(f"node must be 'minion' or 'master', not {node!r}")
    import hashlib  # on first use: the master's commands never need it

    digest = hashlib.sha256((node_id or "").encode("utf-8")).hexdigest()[:10]
    return f"minion-{digest}"


SOCKET_SUFFIX = ".uxd"
MANOR = "manor"
"""The yard name of a node's manor (its event bus and command router)."""
# Longest client yard name ("ev" + 8 hex), used to reject a sock_dir that is too long up
# front rather than at the first client (whose longest path is its sending socket's).
_CLIENT_YARD_EXAMPLE = "ev00000000"

SENDING_MARK = ".tx"
"""Put before ``SOCKET_SUFFIX`` in the path of the socket a yard sends from: a manor
answers from ``<lane>.manor.tx.uxd``, a client writes to its manor from
``<lane>.<yard>.tx.uxd`` (``raetsalt.drivers.uxd``).  No yard is called ``tx``."""


def yard_file_name(lane_name: str, yard_name: str) -> str:
    """The socket file name of a yard: ``<lane>.<yard>.uxd`` (raet's layout)."""
    return f"{lane_name}.{yard_name}{SOCKET_SUFFIX}"


def sending_path(path: str) -> str:
    """The path of the socket that the yard bound at ``path`` sends from."""
    root, ext = os.path.splitext(path)
    return f"{root}{SENDING_MARK}{ext}"


def yard_of_sending_path(path: str) -> str | None:
    """The yard path whose sending socket is ``path``, or None when ``path`` is not a
    sending socket's (the inverse of ``sending_path``, in the same directory)."""
    mark = SENDING_MARK + SOCKET_SUFFIX
    if not path.endswith(mark) or path.endswith("/" + mark) or path == mark:
        return None
    return path[: -len(mark)] + SOCKET_SUFFIX


def manor_path(sock_dir: str, node: str, node_id: str | None) -> str:
    """Socket path of the node's manor yard in ``sock_dir`` (``node`` is ``'master'`` or
    ``'minion'``); raises ConfigError when a client yard's path next to it would not fit
    ``sun_path``."""
    lane = lane_name_for(node, node_id)
    client = os.path.join(sock_dir, yard_file_name(lane, _CLIENT_YARD_EXAMPLE))
    check_socket_path(sending_path(client), sock_dir)
    return os.path.join(sock_dir, yard_file_name(lane, MANOR))


def check_socket_path(path: str, sock_dir: str | None = None) -> str:
    """Return ``path`` if it fits ``sun_path``, else raise ConfigError naming sock_dir."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        where = f"sock_dir {sock_dir!r} is too long: " if sock_dir is not None else ""
        raise ConfigError(
            f"{where}socket path {path!r} is {size} bytes, the limit is {MAX_SOCKET_PATH}"
        )
    return path


def resolve_group(group: str | int | None) -> int | None:
    """``sock_dir_group`` as a gid: a group name looked up, a gid kept, None kept."""
    if group is None or isinstance(group, int):
        return group
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        if group.isdigit():
            return int(group)
        raise ConfigError(f"sock_dir_group {group!r}: no such group") from None
