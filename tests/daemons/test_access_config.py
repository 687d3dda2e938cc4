"""The master checks its access options when it starts: a regex that does not compile or
a rule of the wrong shape stops it with one line (exit 78, like other config errors);
prefix-match surprises are logged as warnings and it serves."""

from __future__ import annotations

import subprocess
import sys

import pytest

from daemons.helpers import make_world
from raetsalt.cli.daemon import EXIT_CONFIG


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ("peer:\n  '*':\n    - test.ping\n", "peer['*']: invalid minion id regex '*'"),
        ("peer_run:\n  '.*':\n    - 'manage.(up'\n", "peer_run['.*'][0]: invalid function regex"),
        ("peer:\n  '.*':\n    - {'G@os': [test.ping]}\n", "invalid target expression"),
        ("publisher_acl:\n  fred:\n    - test.[\n", "publisher_acl['fred'][0]: invalid function"),
        ("external_auth:\n  pam:\n    fred:\n      - {'@runner': ['m.(']}\n",
         "external_auth['pam']['fred'][0]"),
    ],
)
def test_bad_access_config_stops_the_master_with_one_line(extra: str, fragment: str) -> None:
    with make_world() as world:
        confdir = world.master_dir(extra)
        done = subprocess.run([sys.executable, "-m", "raetsalt.cli.master", "-c", str(confdir)],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == EXIT_CONFIG
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"raetsalt-master: {confdir / 'master'}: ")
    assert fragment in lines[0]


def test_prefix_match_warnings_are_logged_and_the_master_serves() -> None:
    with make_world() as world:
        master = world.start("master", world.master_dir("peer:\n  web:\n    - test.ping\n"))
        line = master.expect("peer['web']: 'web' is a prefix match")
        assert "WARNING" in line
        master.expect("serving on")
        assert master.terminate() == 0


def test_lane_requests_from_outside_sock_dir_are_refused(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A yard bound outside sock_dir proves nothing about its sender (it could be a hard
    link swapped in after sending): publish/runner from there are refused."""
    import os
    import time

    from raetsalt import protocol as p
    from raetsalt.config import load_node_config
    from raetsalt.drivers.laneclient import CommandClient

    with make_world() as world:
        confdir = world.master_dir("")
        master = world.start("master", confdir)
        master.expect("serving on")
        sock_dir = load_node_config(confdir, "master")["sock_dir"]
        real_access = os.access
        # Pretend we may not write sock_dir: the client binds in a private /tmp dir.
        monkeypatch.setattr(os, "access", lambda path, mode: False if path == sock_dir
                            else real_access(path, mode))
        with CommandClient("master", sock_dir) as client:
            assert client._private_dir is not None
            req = client.request(p.SHARE_RUNNER, fun="manage.up", arg=[])
            deadline = time.monotonic() + 5
            answer = None
            while answer is None and time.monotonic() < deadline:
                for body in client.receive(1.0):
                    if body.get("req") == req:
                        answer = body
        assert answer is not None and p.share_of(answer) == p.SHARE_RUN_RET
        assert "requests from outside the master's sock_dir are refused" in answer["error"]
