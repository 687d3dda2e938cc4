"""``sock_dir_group`` means what raetsalt/config_schema.py documents: null keeps the bus to the
daemon's user (0700/0600), a group name opens it to that group (0750/0660)."""

from __future__ import annotations

import grp
import os
import stat

import pytest

from raetsalt.config import SCHEMA, master_config
from raetsalt.event import BusHost


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _host_from_config(short_dir: str, group_line: str) -> BusHost:
    sock_dir = os.path.join(short_dir, "s")
    conf = os.path.join(short_dir, "master")
    with open(conf, "w") as handle:
        handle.write(f"root_dir: {short_dir}\nsock_dir: {sock_dir}\n{group_line}")
    opts = master_config(conf)
    return BusHost(node="master", sock_dir=opts["sock_dir"], group=opts["sock_dir_group"])


def test_documentation_states_both_modes() -> None:
    option = next(o for o in SCHEMA if o.name == "sock_dir_group")
    assert "0750" in option.doc and "0700" in option.doc
    assert "null: only the daemon's user" in option.doc


def test_null_group_is_owner_only(short_dir: str) -> None:
    host = _host_from_config(short_dir, "sock_dir_group: null\n")
    try:
        assert _mode(os.path.dirname(host.path)) == 0o700
        assert _mode(host.path) == 0o600
    finally:
        host.close()


def test_named_group_opens_dir_and_socket_to_it(short_dir: str) -> None:
    # Our own primary group is one we may always chown to.
    gid = os.getegid()
    try:
        name = grp.getgrgid(gid).gr_name
    except KeyError:
        pytest.skip("primary group has no name")
    host = _host_from_config(short_dir, f"sock_dir_group: {name}\n")
    try:
        sock_dir = os.path.dirname(host.path)
        assert _mode(sock_dir) == 0o750 and os.stat(sock_dir).st_gid == gid
        assert _mode(host.path) == 0o660 and os.stat(host.path).st_gid == gid
    finally:
        host.close()
