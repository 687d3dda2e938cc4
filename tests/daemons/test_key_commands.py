"""raetsalt-key against a running master: its decisions are commands over the master's
lane and take effect at once (docs/keys.md, "What raetsalt-key does")."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import World, key_tool, make_world, ping

pytestmark = pytest.mark.integration


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def _listing(confdir: Path) -> dict[str, list[str]]:
    done = key_tool(confdir, "-L", "--out", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_deleted_pending_key_stays_deleted(world: World) -> None:
    """A ghost minion: its key was written back by the running master within
    0.4 s of ``-d``, three times in a row."""
    confdir = world.root / "ma"
    master = world.start("master", world.master_dir())
    master.expect("serving on")
    ghost = world.start("minion", world.minion_dir("g", "ghost"))
    ghost.expect("is pending on the master", timeout=10)
    assert ghost.terminate() == 0
    assert _listing(confdir)["minions_pre"] == ["ghost"]
    done = key_tool(confdir, "-d", "ghost", "-y")
    assert done.returncode == 0 and "Key for minion ghost deleted." in done.stdout
    # An observation window three times the old re-write delay, looking at the files.
    keep = world.master_keep()
    until = time.monotonic() + 1.5
    while time.monotonic() < until:
        assert keep.load_role("ghost") is None
        time.sleep(0.1)
    assert _listing(confdir)["minions_pre"] == []


def test_an_accepted_minion_whose_key_is_deleted_re_authenticates(world: World) -> None:
    confdir = world.root / "ma"
    master = world.start("master", world.master_dir())
    master.expect("serving on")
    minion = world.start("minion", world.minion_dir("m1", "minion1"))
    minion.expect("is pending on the master", timeout=10)
    assert key_tool(confdir, "-a", "minion1", "-y").returncode == 0
    # The tool's command reaches the running master, which applies it (no polling of
    # the keep anywhere), and the minion's next join is accepted.
    master.expect("key of minion minion1 (pending): accept by the operator")
    minion.expect("connected to the master themaster", timeout=10)
    assert ping(world)
    # -d: the session ends at once (no job reaches it), then Salt's re-auth: pending.
    assert key_tool(confdir, "-d", "minion1", "-y").returncode == 0
    master.expect("key removed by the operator; session dropped")
    assert not ping(world, timeout="2")
    minion.expect("is pending on the master", timeout=10)
    assert _listing(confdir)["minions_pre"] == ["minion1"]
    # The operator accepts it again: back without a restart.
    assert key_tool(confdir, "-a", "minion1", "-y").returncode == 0
    minion.expect("connected to the master themaster", timeout=5)
    assert ping(world)


def test_a_rejected_running_minion_is_cut_off_and_exits_77(world: World) -> None:
    confdir = world.root / "ma"
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    minion = world.start("minion", world.minion_dir("m1", "minion1"))
    minion.expect("connected to the master themaster", timeout=10)
    done = key_tool(confdir, "-r", "minion1", "--include-accepted", "-y")
    assert done.returncode == 0 and "Key for minion minion1 rejected." in done.stdout
    assert minion.popen.wait(15) == 77
    assert _listing(confdir)["minions_rejected"] == ["minion1"]
