"""raetsalt-master and raetsalt-minion as real processes on loopback.

Every node gets its own root_dir under a short temp dir, written the way conf/master and
conf/minion are (root_dir, interface, id, master).  The tests wait on the daemons' log
lines (stderr, ``-l info``), on keep files and on bus events -- never on a fixed sleep.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bus.helpers import Proc
from bus.test_blog_scripts import EMIT_FORWARD, EMIT_MINION, LISTEN_MASTER, LISTEN_MINION
from helpers.waiting import wait_for

from raetsalt.config import load_node_config
from raetsalt.keep.records import Acceptance
from raetsalt.keep.store import FileKeep

from .helpers import World, make_world

pytestmark = pytest.mark.integration


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def _roles(keep: FileKeep) -> dict[str, Acceptance]:
    return {record.role: record.acceptance for record in keep.list_roles()}


def _key(confdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the operator's tool, ``raetsalt-key -c CONFDIR ...``, as another process."""
    tool = Path(sys.executable).with_name("raetsalt-key")
    command = [str(tool), "-c", str(confdir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def _key_listing(confdir: Path) -> dict[str, list[str]]:
    done = _key(confdir, "-L", "--out", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_pending_minions_accepted_one_by_one_and_a_twin_is_denied(world: World) -> None:
    master = world.start("master", world.master_dir())
    master.expect("serving on 127.0.0.1")
    m1 = world.start("minion", world.minion_dir("m1", "minion1"))
    m2 = world.start("minion", world.minion_dir("m2", "minion2"))
    for minion in (m1, m2):
        minion.expect("is pending on the master")
    master.expect_each(["minion1: key pending", "minion2: key pending"])
    keep = world.master_keep()
    confdir = world.root / "ma"
    # The master writes its keep in the background: on disk within moments.
    wait_for(
        lambda: _roles(keep) == {"minion1": Acceptance.PENDING, "minion2": Acceptance.PENDING}
    )
    assert _key_listing(confdir)["minions_pre"] == ["minion1", "minion2"]

    # raetsalt-key -a minion1 -y, from another process: takes effect without any restart.
    done = _key(confdir, "-a", "minion1", "-y")
    assert done.returncode == 0 and "Key for minion minion1 accepted." in done.stdout
    m1.expect("connected to the master themaster")
    master.expect("minion minion1 connected")
    assert not any("connected" in line for line in m2.drain())
    assert _roles(keep)["minion2"] is Acceptance.PENDING

    # Retrying while pending is logged once per state change, not per attempt.
    assert sum("pending" in line for line in m2.drain()) == 1
    assert sum("minion2: key pending" in line for line in master.drain()) == 1

    assert _key(confdir, "-a", "minion2", "-y").returncode == 0
    m2.expect("connected to the master")

    # Same id as minion2, new keys: Salt's "denied".  The twin never met this master, so
    # the reject is unsigned and proves nothing: it says so once and keeps trying (an
    # exit on it would let anyone at the master's address stop a minion).
    twin = world.start("minion", world.minion_dir("m3", "minion2"))
    twin.expect("ignoring an unsigned join reject", timeout=10)
    assert twin.popen.poll() is None
    twin.terminate()
    wait_for(lambda: list(keep.list_denied()) == ["minion2"])
    assert _roles(keep)["minion2"] is Acceptance.ACCEPTED
    master.expect("minion2: key denied")
    listing = _key_listing(confdir)
    assert listing["minions"] == ["minion1", "minion2"] and listing["minions_denied"] == ["minion2"]

    # -d removes a key (here only minion1's; minion2 and its denied twin stay listed).
    # minion1 is running: its session ends at once and it authenticates again, so it
    # comes back as unaccepted (Salt's re-auth).
    done = _key(confdir, "-d", "minion1", "-y")
    assert done.returncode == 0 and "Key for minion minion1 deleted." in done.stdout
    assert _key_listing(confdir)["minions"] == ["minion2"]
    m1.expect("is pending on the master", timeout=10.0)
    listing = wait_for(lambda: (found := _key_listing(confdir))["minions_pre"] and found)
    assert listing["minions_pre"] == ["minion1"] and listing["minions"] == ["minion2"]

    for daemon in (m1, m2, master):
        assert daemon.terminate() == 0


def _received(proc: Proc, timeout: float = 5.0) -> dict[str, Any]:
    line = proc.readline(timeout)
    assert line is not None, "the listener printed nothing"
    return ast.literal_eval(line)


def test_auto_accept_bus_scripts_and_master_restart(world: World) -> None:
    master_conf = world.master_dir("auto_accept: true\n")
    master = world.start("master", master_conf)
    master.expect("serving on")
    dirs = {name: world.minion_dir(name, name) for name in ("minion1", "minion2")}
    minions = {name: world.start("minion", conf) for name, conf in dirs.items()}
    for minion in minions.values():
        minion.expect("connected to the master themaster")
    assert not any("pending" in line for m in minions.values() for line in m.drain())
    # (the keep is written in the background: the records follow the sessions)
    wait_for(lambda: len(_roles(world.master_keep())) == 2)
    assert set(_roles(world.master_keep()).values()) == {Acceptance.ACCEPTED}

    master_sock_dir = load_node_config(master_conf, "master")["sock_dir"]
    env1 = {"RAETSALT_CONFIG_DIR": str(dirs["minion1"])}

    # The blog's minion bus scripts against the running minion1.
    listener = world.script("lmin.py", LISTEN_MINION.format(tag="mytag"), env1)
    listener.expect("Listening for events tagged 'mytag' on Salt Minion bus.")
    emitter = world.script(
        "emin.py", EMIT_MINION.format(tag="mytag", message="on the minion"), env1
    )
    assert emitter.wait(20) == 0
    got = _received(listener)
    assert got["data"] == {"message": "on the minion"} and got["id"] == "minion1"

    # The master bus, and a 5-event fire_master batch from minion1's bus arriving there.
    mlisten = world.script("lmas.py", LISTEN_MASTER.format(sock_dir=master_sock_dir, tag="mytag"))
    mlisten.expect("Listening for events tagged 'mytag' on Salt Master bus.")
    forward = world.script("fwd.py", EMIT_FORWARD, env1)
    assert forward.wait(20) == 0
    messages = [_received(mlisten)["message"] for _ in range(5)]
    assert messages == [f"a dr{v}p in the bucket" for v in "aeiou"]

    # Idle CPU of a connected minion over a short window.
    pid = minions["minion2"].popen.pid
    before, started = _cpu_seconds(pid), time.monotonic()
    time.sleep(1.5)  # a measurement window, not synchronisation
    cpu = (_cpu_seconds(pid) - before) / (time.monotonic() - started)
    assert cpu < 0.02, f"idle minion used {cpu:.1%} CPU"

    # SIGKILL the master, start it again: both minions come back by themselves.
    master.popen.kill()
    master.popen.wait()
    master = world.start("master", master_conf)
    master.expect_each([f"minion {name} connected" for name in minions], timeout=30.0)
    # ...and fire_master flows again through the new master process.
    mlisten2 = world.script("lmas2.py", LISTEN_MASTER.format(sock_dir=master_sock_dir, tag="mytag"))
    mlisten2.expect("Listening for events tagged 'mytag' on Salt Master bus.")
    assert world.script("fwd2.py", EMIT_FORWARD, env1).wait(20) == 0
    assert _received(mlisten2)["message"] == "a drap in the bucket"

    for daemon in (*minions.values(), master):
        assert daemon.terminate() == 0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(node: str, confdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"raetsalt.cli.{node}", "-c", str(confdir)],
        capture_output=True,
        text=True,
        timeout=20,
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("id: [unclosed\n", "YAML error at line 2"),
        ("raet_port: lots\n", "key 'raet_port' must be an integer"),
        ("transport: zeromq\n", "key 'transport' must be 'raet'"),
        ("id: web 1\n", "key 'id' must be a valid id string, got 'web 1'"),
        ("file_rots: {}\nbogus: 1\nfile_roots: {}\n",
         "unknown keys 'file_rots' (did you mean 'file_roots'?), 'bogus'"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_file_and_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / "master").write_text(text)
    result = _run("master", tmp_path)
    assert result.returncode == 78
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"raetsalt-master: {tmp_path / 'master'}: ")
    assert problem in lines[0]


def test_salt_keys_start_the_daemon_with_one_warning_line(world: World) -> None:
    confdir = world.master_dir(extra="worker_threads: 5\nreactor: []\npublish_port: 4505\n"
                                     "con_cache: false\n")
    master = world.start("master", confdir)
    line = master.expect("ignoring 3 key(s)")
    assert line.startswith("[WARNING ]") and line.endswith(
        "raetsalt does not use in a master config: 'worker_threads', 'publish_port', "
        "'con_cache'")
    master.expect("starting")
    assert master.terminate() == 0
    assert sum("ignoring" in entry for entry in master.drain()) == 1


def test_a_missing_config_dir_is_a_clear_message(tmp_path: Path) -> None:
    result = _run("minion", tmp_path / "nope")
    assert result.returncode == 78
    assert result.stderr.strip() == (
        f"raetsalt-minion: {tmp_path / 'nope'}: config directory does not exist"
    )


def test_daemonize_writes_the_pidfile_and_sigterm_removes_it(world: World) -> None:
    confdir = world.master_dir()
    pidfile = world.root / "master.pid"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "raetsalt.cli.master",
            "-c",
            str(confdir),
            "-d",
            "-l",
            "info",
            "--pid-file",
            str(pidfile),
        ],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 0, result.stderr
    log_file = Path(load_node_config(confdir, "master")["log_file"])
    pid = wait_for(lambda: _pid_in(pidfile))
    stopped = False
    try:
        wait_for(lambda: log_file.exists() and "serving on" in log_file.read_text())
        assert os.getsid(pid) != os.getsid(0)  # detached into its own session
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not pidfile.exists())
        stopped = True
        assert "stopped on SIGTERM (exit 0)" in log_file.read_text()
    finally:
        if not stopped:  # a failed assertion left it running (its pidfile still names it)
            os.kill(pid, signal.SIGKILL)


def _pid_in(path: Path) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


def test_a_master_that_never_started_is_named_not_a_permission_problem(world: World) -> None:
    """Its sock_dir does not exist yet: the clients say the master is not running (not
    that this user may not use it), with exit code 2."""
    confdir = world.master_dir()
    for tool, args in (("salt", ["*", "test.ping"]), ("run", ["manage.up"])):
        done = world.cli(tool, confdir, *args)
        assert done.returncode == 2, done.stderr
        assert "the raetsalt-master daemon is not running" in done.stderr, done.stderr
        assert "cannot use" not in done.stderr and "command socket" not in done.stderr
