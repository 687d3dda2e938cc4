"""A minion listing several masters, on real daemons: ``master_type: failover`` holds
one session and moves to the next master when the held one is killed (its presence
fails), and back with ``master_failback``; in a cluster (``cluster_id``, the test
PostgreSQL) each minion holds the master its id's rendezvous hash picks, moves to its next
choice when that master is killed, and is accepted there without a re-accept."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.ports import port_in, retry_in_use
from pg import Postgres

from daemons.helpers import MINION_TUNING, Daemon, key_tool, udp_sockets
from raetsalt.services.masters import rendezvous_order

pytestmark = pytest.mark.integration


class Masters:
    """Several masters and their minions under one temporary root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.daemons: dict[str, Daemon] = {}
        self.ports: dict[str, int] = {}

    def master(self, name: str, extra: str = "") -> Daemon:
        conf = self.root / name
        conf.mkdir(exist_ok=True)
        port = self.ports.get(name, 0)
        (conf / "master").write_text(
            f"root_dir: {conf}\ninterface: 127.0.0.1\nid: {name}\nraet_port: {port}\n"
            f"raet_alive_period: 1.0\n{extra}")

        def spawn() -> Daemon:
            return Daemon("master", conf)

        daemon = retry_in_use(spawn, Daemon.bind_failed)
        self.daemons[name] = daemon
        self.ports[name] = port_in(daemon.expect("serving on 127.0.0.1:", timeout=30))
        return daemon

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def minion(self, minion_id: str, masters: list[str], extra: str) -> Daemon:
        conf = self.root / minion_id
        conf.mkdir()
        listed = ", ".join(f"'{self.address(m)}'" for m in masters)
        (conf / "minion").write_text(
            f"id: {minion_id}\nroot_dir: {conf}\nraet_port: 0\n"
            f"master: [{listed}]\n{MINION_TUNING}{extra}")
        daemon = Daemon("minion", conf)
        self.daemons[minion_id] = daemon
        return daemon

    def kill(self, name: str) -> None:
        daemon = self.daemons.pop(name)
        daemon.stop()  # SIGKILL

    def ping(self, master: str, target: str, timeout: int = 10) -> dict[str, object]:
        import subprocess
        import sys
        done = subprocess.run(
            [sys.executable, "-m", "raetsalt.cli.salt", "-c", str(self.root / master),
             target, "test.ping", "--out", "json", "--static", "-t", str(timeout)],
            capture_output=True, text=True, timeout=60)
        if done.stdout.startswith("No minions matched"):  # a master that never saw it
            return {}
        return json.loads(done.stdout or "{}")  # type: ignore[no-any-return]


@pytest.fixture
def masters() -> Iterator[Masters]:
    root = Path(tempfile.mkdtemp(prefix="rsm", dir="/tmp"))
    fleet = Masters(root)
    try:
        yield fleet
    finally:
        for daemon in fleet.daemons.values():
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_failover_moves_to_the_next_master_and_fails_back(masters: Masters) -> None:
    masters.master("ma", "auto_accept: true\n")
    masters.master("mb", "auto_accept: true\n")
    minion = masters.minion("m1", ["ma", "mb"], "master_type: failover\n"
                            "master_failback: true\nmaster_failback_interval: 2\n")
    minion.expect("connected to the master ma", timeout=30)
    assert masters.ping("ma", "m1") == {"m1": True}
    # one session only: mb's jobs do not reach it (on a loaded machine the minion may
    # have tried mb while ma was slow to answer, but it holds ma's session only)
    assert masters.ping("mb", "m1", timeout=3).get("m1") is not True

    masters.kill("ma")
    minion.expect(f"master {masters.address('ma')} lost: moving to {masters.address('mb')}",
                  timeout=60)
    minion.expect("connected to the master mb", timeout=60)
    assert masters.ping("mb", "m1") == {"m1": True}  # a job published after the loss

    masters.master("ma", "auto_accept: true\n")  # back, on its port
    minion.expect(f"the first master {masters.address('ma')} is back: failing back",
                  timeout=60)
    minion.expect("connected to the master ma", timeout=60)
    assert masters.ping("ma", "m1") == {"m1": True}
    # its session on mb ended: mb's jobs no longer reach it
    assert masters.ping("mb", "m1").get("m1") is not True


def test_a_cluster_minion_holds_its_rendezvous_master_and_moves_on_loss(
        masters: Masters, postgres: Postgres) -> None:
    store = postgres.create_database("several")
    cluster = f"cluster_id: fleet1\ncluster_store: '{store}'\n"
    for name in ("ma", "mb", "mc"):
        masters.master(name, cluster)
    names = {masters.address(n): n for n in ("ma", "mb", "mc")}
    ids = ["m1", "m2", "m3", "m4"]
    first = {i: names[rendezvous_order(i, list(names))[0]] for i in ids}
    second = {i: names[rendezvous_order(i, list(names))[1]] for i in ids}
    minions = {i: masters.minion(i, ["ma", "mb", "mc"], "cluster_id: fleet1\n") for i in ids}
    for i in ids:  # accepted once, on the master it chose
        minions[i].expect("is pending on the master", timeout=30)
        done = key_tool(masters.root / first[i], "-a", i, "-y")
        assert done.returncode == 0, done.stderr
        minions[i].expect(f"connected to the master {first[i]}", timeout=30)
    for name in ("ma", "mb", "mc"):
        held = sorted(i for i in ids if first[i] == name)
        if held:
            answers = masters.ping(name, "*")
            assert {k for k, v in answers.items() if v is True} == set(held), answers
    victim = first["m1"]
    masters.kill(victim)
    moved = [i for i in ids if first[i] == victim]
    for i in moved:
        minions[i].expect(f"connected to the master {second[i]}", timeout=60)
        assert not any("pending" in line for line in minions[i].drain()[-5:])
    for i in moved:  # a job published after the loss, from a surviving master
        assert masters.ping(second[i], i) == {i: True}
    for i in set(ids) - set(moved):  # the others did not move
        assert not any("moving to" in line for line in minions[i].drain())


def test_master_type_str_serves_every_listed_master_at_once(masters: Masters) -> None:
    masters.master("ma", "auto_accept: true\n")
    masters.master("mb", "auto_accept: true\n")
    minion = masters.minion("m1", ["ma", "mb"], "")  # master_type: str (Salt's default)
    port = port_in(minion.expect("serving on", timeout=30))
    for name in ("ma", "mb"):
        masters.daemons[name].expect("minion m1 connected", timeout=30)
    minion.expect("connected to the master m", timeout=30)
    # each master's job returns to that master's waiting client
    assert masters.ping("ma", "m1") == {"m1": True}
    assert masters.ping("mb", "m1") == {"m1": True}
    # Two masters, one socket: bound on the address towards them (not 0.0.0.0), not
    # connected, and what comes from anywhere else is dropped (counted, in the log)
    # before any parsing.
    assert udp_sockets(port) == [(f"127.0.0.1:{port}", "0.0.0.0:0")]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
        stranger.bind(("127.0.0.2", 0))
        stranger.sendto(b"hello from elsewhere", ("127.0.0.1", port))
        minion.expect(f"dropped a datagram from 127.0.0.2:{stranger.getsockname()[1]} "
                      "(foreign_source", timeout=30)
    assert masters.ping("ma", "m1") == {"m1": True}
    masters.kill("ma")
    assert masters.ping("mb", "m1") == {"m1": True}
