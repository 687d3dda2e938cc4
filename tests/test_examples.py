"""The runnable examples shipped beside the README tell their story and end cleanly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pg import server_bin

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.skipif(server_bin() is None, reason="PostgreSQL's server binaries are missing "
                    "(make test installs them)")
def test_two_masters_serve_one_fleet_and_survive_a_kill() -> None:
    done = subprocess.run([sys.executable, "-P", str(EXAMPLES / "two_masters.py")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    pings = out.split("test.ping -t 10\n")[1:]
    assert len(pings) == 3, out
    fleet = {"web1", "web2", "db1", "db2"}
    for answer in pings:  # each master answers for the whole fleet, before and after
        lines = answer.split("\n\n")[0].splitlines()
        assert {line[:-1] for line in lines if not line.startswith(" ")} == fleet, out
        assert lines.count("    True") == 4, out
    assert "# master m1 is killed (SIGKILL); its minions move to m2" in out
    assert out.count("Accepted Keys:\ndb1\ndb2\nweb1\nweb2\n") == 2  # the cluster's list
