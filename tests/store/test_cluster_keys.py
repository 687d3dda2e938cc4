"""Two real masters of one cluster (``cluster_id`` and ``cluster_store``, the test
PostgreSQL) and real minions: a key accepted on master A is accepted on master B without
a re-accept, whether the minion was already waiting on B (heard through LISTEN/NOTIFY)
or joins B later (the cluster's decision asked at the join); a key deleted on A ends the
minion's session on B."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemons.helpers import MINION_TUNING, Daemon, key_tool
from pg import Postgres

pytestmark = pytest.mark.integration


class Fleet:
    def __init__(self, root: Path, database: str) -> None:
        self.root = root
        self.database = database
        self.daemons: list[Daemon] = []
        self.ports: dict[str, int] = {}

    def master(self, name: str) -> Daemon:
        conf = self.root / name
        conf.mkdir()
        (conf / "master").write_text(
            f"root_dir: {conf}\ninterface: 127.0.0.1\nid: {name}\nraet_port: 0\n"
            f"raet_alive_period: 1.0\ncluster_id: fleet1\ncluster_store: '{self.database}'\n")
        daemon = Daemon("master", conf)
        self.daemons.append(daemon)
        line = daemon.expect("serving on 127.0.0.1:", timeout=30)
        match = re.search(r"serving on 127\.0\.0\.1:(\d+)", line)
        assert match is not None
        self.ports[name] = int(match.group(1))
        return daemon

    def minion(self, name: str, minion_id: str, master: str,
               same_keys_as: str | None = None) -> Daemon:
        conf = self.root / name
        conf.mkdir()
        (conf / "minion").write_text(
            f"id: {minion_id}\nroot_dir: {conf}\nraet_port: 0\n"
            f"master: 127.0.0.1:{self.ports[master]}\n{MINION_TUNING}")
        if same_keys_as is not None:  # the same minion (same keys), to another master
            source = next((self.root / same_keys_as).rglob("road/local"))
            target = conf / source.relative_to(self.root / same_keys_as)
            target.mkdir(parents=True)
            estate = json.loads((source / "estate.json").read_text())
            (target / "estate.json").write_text(json.dumps(estate))
            (target / "estate.json").chmod(0o600)
        daemon = Daemon("minion", conf)
        self.daemons.append(daemon)
        return daemon

    def listing(self, master: str) -> dict[str, list[str]]:
        done = key_tool(self.root / master, "-L", "--out", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def fleet(postgres: Postgres) -> Iterator[Fleet]:
    root = Path(tempfile.mkdtemp(prefix="rsc", dir="/tmp"))
    fleet = Fleet(root, postgres.create_database("cluster"))
    try:
        yield fleet
    finally:
        for daemon in fleet.daemons:
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_key_accepted_on_one_master_is_accepted_on_the_other(fleet: Fleet) -> None:
    a, b = fleet.master("ma"), fleet.master("mb")
    # m1 waits on both masters (the same keys), then an operator accepts it on A only.
    m1a = fleet.minion("m1a", "m1", "ma")
    m1a.expect("is pending on the master", timeout=15)
    m1b = fleet.minion("m1b", "m1", "mb", same_keys_as="m1a")
    m1b.expect("is pending on the master", timeout=15)
    done = key_tool(fleet.root / "ma", "-a", "m1", "-y")
    assert done.returncode == 0, done.stderr
    m1a.expect("connected to the master ma", timeout=15)
    m1b.expect("connected to the master mb", timeout=15)  # no key command on B
    b.expect("m1 (pending): accept by the cluster (on ma)", timeout=15)
    assert fleet.listing("mb")["minions"] == ["m1"]
    # m2 is accepted on A first and joins B afterwards: accepted at its first join.
    m2a = fleet.minion("m2a", "m2", "ma")
    m2a.expect("is pending on the master", timeout=15)
    assert key_tool(fleet.root / "ma", "-a", "m2", "-y").returncode == 0
    m2a.expect("connected to the master ma", timeout=15)
    m2b = fleet.minion("m2b", "m2", "mb", same_keys_as="m2a")
    m2b.expect("connected to the master mb", timeout=15)
    assert not any("pending" in line for line in m2b.drain())
    assert fleet.listing("mb")["minions"] == ["m1", "m2"]
    # A key deleted on A ends that minion's session on B.
    assert key_tool(fleet.root / "ma", "-d", "m1", "-y").returncode == 0
    b.expect("m1 (accepted): delete by the cluster (on ma)", timeout=15)
    assert "m1" not in fleet.listing("mb")["minions"]
    assert fleet.listing("mb")["minions"] == ["m2"]
    assert not any("by the cluster" in line for line in a.drain())  # its own decisions
