"""The daemons' pidfile, log files and error messages: a pid
left behind by a killed daemon never blocks a restart, whoever has that pid now; a
running daemon is still refused a twin; log files are not world-readable; a huge
invalid id is not echoed in full."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raetsalt.cli.daemon import claim_pidfile, release_pidfile
from raetsalt.config import load_node_config

from .helpers import World, make_world

pytestmark = pytest.mark.integration


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def pidfile_of(confdir: Path) -> Path:
    return Path(load_node_config(confdir, "master")["pidfile"])


def test_a_pid_now_used_by_an_unrelated_process_does_not_block_start(world: World) -> None:
    confdir = world.master_dir()
    pidfile = pidfile_of(confdir)
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        pidfile.write_text(f"{stranger.pid}\n")  # e.g. after a reboot, or pid reuse
        master = world.start("master", confdir)
        master.expect("serving on")
        assert pidfile.read_text() == f"{master.popen.pid}\n"
    finally:
        stranger.kill()
        stranger.wait()


def test_the_zombie_of_a_killed_master_does_not_block_a_restart(world: World) -> None:
    confdir = world.master_dir()
    first = world.start("master", confdir)
    first.expect("serving on")
    first.popen.kill()  # SIGKILL, and nobody reaps it yet: a zombie with its pid
    assert os.waitid(os.P_PID, first.popen.pid, os.WEXITED | os.WNOWAIT) is not None
    assert pidfile_of(confdir).read_text() == f"{first.popen.pid}\n"
    second = world.start("master", confdir)
    second.expect("serving on")
    assert pidfile_of(confdir).read_text() == f"{second.popen.pid}\n"


def test_a_running_master_still_refuses_a_twin(world: World) -> None:
    confdir = world.master_dir()
    first = world.start("master", confdir)
    first.expect("serving on")
    twin = world.start("master", confdir)
    twin.expect(f"already running as pid {first.popen.pid}")
    assert twin.popen.wait(10) == 1
    assert first.popen.poll() is None
    assert pidfile_of(confdir).read_text() == f"{first.popen.pid}\n"


def test_claim_and_release(tmp_path: Path) -> None:
    path = str(tmp_path / "run" / "d.pid")
    fd = claim_pidfile(path)
    assert Path(path).read_text() == f"{os.getpid()}\n"
    with pytest.raises(RuntimeError, match=f"already running as pid {os.getpid()}"):
        # flock is per open file: a second open in this process conflicts like another
        claim_pidfile(path)
    release_pidfile(path, fd)
    assert not os.path.exists(path)
    release_pidfile(path, claim_pidfile(path))


@pytest.mark.parametrize("node", ["master", "minion"])
def test_log_files_are_not_world_readable(world: World, node: str) -> None:
    confdir = world.master_dir() if node == "master" else world.minion_dir("m1", "minion1")
    log_file = Path(load_node_config(confdir, node)["log_file"])
    daemon = world.start(node, confdir)
    daemon.expect("serving on")
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    daemon.terminate()
    log_file.chmod(0o666)  # an old file, or one a careless admin opened up
    again = world.start(node, confdir)
    again.expect("serving on")
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o640
    log_file.rename(log_file.with_suffix(".1"))  # logrotate moves it away...
    again.terminate()  # ...the handler reopens a new file for the last lines
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600


def test_a_10k_character_id_is_not_echoed_in_full(tmp_path: Path) -> None:
    (tmp_path / "minion").write_text(f"id: {'a' * 10_000}\nroot_dir: {tmp_path}\n"
                                     "master: 127.0.0.1:1\n")
    done = subprocess.run([sys.executable, "-m", "raetsalt.cli.minion", "-c", str(tmp_path),
                           "-l", "info"], capture_output=True, text=True, timeout=30)
    # a config error now (the road cannot carry it), cut short in the one line
    assert done.returncode == 78
    assert "(it is longer than 128 characters)" in done.stderr
    assert len(done.stderr) < 1000, done.stderr[:300]  # 10 kB per message before
