"""Keys on Salt's local request channel: who gets one, and what a key lets its holder do
(root's and the master's user's publish unrestricted; a publisher_acl user's publishes as
that user, whom the master holds to its rules)."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from raetsalt.saltbridge.localreq import RequestServer, acl_users, write_keys


def test_publisher_acl_names_and_patterns_pick_system_users() -> None:
    everyone = {entry.pw_name for entry in pwd.getpwall()}
    assert "nobody" in everyone and "daemon" in everyone
    got = acl_users({"nobody": ["test.ping"], "daem.*": [".*"], "(": ["x"],
                     "no-such-user-here": ["test.*"]})
    assert "nobody" in got and "daemon" in got
    assert "no-such-user-here" not in got and got == sorted(got)
    assert acl_users(None) == [] and acl_users(["nobody"]) == []


def _server(keys: dict[str, str]) -> RequestServer:
    server = RequestServer.__new__(RequestServer)  # the key checks alone, no sockets
    server.keys = keys
    server.unrestricted = frozenset({"root", "salt"})
    return server


def test_a_key_says_whose_it_is_and_an_acl_users_key_publishes_as_that_user() -> None:
    server = _server({"root": "r" * 80, "salt": "s" * 80, "nobody": "n" * 80})
    assert server._credentials({"key": "r" * 80}) == {}
    assert server._credentials({"key": "s" * 80}) == {}
    assert server._credentials({"key": "n" * 80}) == {"as_user": "nobody"}
    for bad in ("x" * 80, "", None, 7, "n" * 79):
        assert server._credentials({"key": bad}) is None


def test_keys_are_the_users_own_and_private(tmp_path: Path) -> None:
    keys = write_keys(str(tmp_path), ["root", "nobody", "nobody"])
    assert set(keys) == {"root", "nobody"} and keys["root"] != keys["nobody"]
    info = os.stat(tmp_path / ".nobody_key")
    assert stat.S_IMODE(info.st_mode) == 0o400
    if os.geteuid() == 0:
        assert info.st_uid == pwd.getpwnam("nobody").pw_uid
    assert (tmp_path / ".nobody_key").read_text() == keys["nobody"]
