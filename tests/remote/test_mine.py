"""Salt's mine over RAET, end to end: db1 (Salt's loader only) stores
``network.ip_addrs`` by itself at start (``mine_functions``); web1 (``auto``) renders a
state whose jinja template reads it with ``mine.get``; n1 (native modules) stores and
reads with raetsalt's native ``mine`` module; the master's ``mine_get`` rules refuse db1
loudly.  Salt's own ``mine`` module is the oracle for the shapes (it is what db1 and
web1 run)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemons.helpers import Daemon, World, make_world
from helpers.waiting import wait_for

from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent
from remote.cluster import json_docs, started_cluster, wait_event

pytest.importorskip("salt")
pytestmark = pytest.mark.integration

MASTER = """\
auto_accept: true
file_roots:
  base: [{srv}]
mine_get:
  'web1$':
    - network\\.ip_addrs$
    - grains\\.get$
  'n1$':
    - grains\\.get$
    - whoami$
  'db1$':
    - test\\.
"""
LB = """\
{out}/backends:
  file.managed:
    - contents: |
        {{%- for minion, addrs in salt['mine.get']('db*', 'network.ip_addrs') | dictsort %}}
        server {{{{ minion }}}} {{{{ addrs | join(',') }}}}
        {{%- endfor %}}
"""


@dataclass
class Mine:
    world: World
    master_conf: Path
    confs: dict[str, Path]
    out: Path
    cachedir: Path
    master: Daemon

    def salt(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.world.cli("salt", self.master_conf, "-t", "30", *args, timeout=90.0)

    def json(self, *args: str) -> dict[str, Any]:
        done = self.salt(*args, "--out", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json_docs(done.stdout)


@pytest.fixture(scope="module")
def mine() -> Iterator[Mine]:
    with make_world() as world:
        srv, out = world.root / "srv", world.root / "out"
        srv.mkdir()
        out.mkdir()
        (srv / "lb.sls").write_text(LB.format(out=out))
        minion_d = {
            "db1": "execution_mode: salt\nmine_functions:\n  network.ip_addrs: []\n",
            "web1": "execution_mode: auto\n",
            "n1": "execution_mode: native\nmine_functions:\n"
                  "  whoami: [mine_function: grains.get, id]\n",
        }
        with started_cluster(world, MASTER.format(srv=srv),
                             {"db1": "roles: [db]", "web1": "roles: [web]",
                              "n1": "roles: [n]"}, minion_d) as up:
            cachedir = Path(load_node_config(up.master_conf, "master")["cachedir"])
            yield Mine(world, up.master_conf, up.confs, out, cachedir, up.master)


def test_mine_functions_are_sent_at_start(mine: Mine) -> None:
    # The first mine.update runs by itself once the minion has its pillar.
    for minion in ("db1", "n1"):
        wait_for(lambda m=minion: (mine.cachedir / "minions" / "mine" / f"{m}.p").exists(),
                 timeout=60.0)
    addrs = mine.json("web1", "mine.get", "db1", "network.ip_addrs")["web1"]
    assert list(addrs) == ["db1"] and all(isinstance(a, str) for a in addrs["db1"])
    assert mine.json("n1", "mine.get", "n*", "whoami")["n1"] == {"n1": "n1"}


def test_mine_get_runner(mine: Mine) -> None:
    addrs = mine.json("web1", "mine.get", "db1", "network.ip_addrs")["web1"]
    done = mine.world.cli("run", mine.master_conf, "mine.get", "d*", "network.ip_addrs",
                          "--out", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == addrs


def test_mine_get_in_a_template_on_another_minion(mine: Mine) -> None:
    addrs = mine.json("web1", "mine.get", "db1", "network.ip_addrs")["web1"]["db1"]
    done = mine.salt("web1", "state.apply", "lb")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (mine.out / "backends").read_text() == f"server db1 {','.join(addrs)}\n"


def test_send_get_shapes_delete_and_flush(mine: Mine) -> None:
    # Salt's module on web1 (auto mode sends mine.* to Salt's loader).
    assert mine.json("web1", "mine.send", "grains.get", "id")["web1"] is True
    assert mine.json("web1", "mine.send", "roles", "mine_function=grains.get",
                     "roles")["web1"] is True
    both = mine.json("web1", "mine.get", "*", "grains.get,network.ip_addrs")["web1"]
    assert both["grains.get"] == {"web1": "web1"} and "db1" in both["network.ip_addrs"]
    assert mine.json("web1", "mine.get", "web1", "grains.get")["web1"] == {"web1": "web1"}
    assert mine.json("web1", "mine.delete", "grains.get")["web1"] is True
    assert mine.json("web1", "mine.get", "*", "grains.get")["web1"] == {}
    # raetsalt's native module on n1: the same loads, the same answers.
    assert mine.json("n1", "mine.send", "grains.get", "id")["n1"] is True
    assert mine.json("n1", "mine.get", "n1", "grains.get")["n1"] == {"n1": "n1"}
    assert mine.json("n1", "mine.update")["n1"] is True
    assert mine.json("n1", "mine.flush")["n1"] is True
    assert mine.json("n1", "mine.get", "n1", "whoami,grains.get")["n1"] == {}


def test_denied_mine_get_says_why(mine: Mine) -> None:
    bus = MasterEvent(load_node_config(mine.master_conf, "master")["sock_dir"])
    try:
        done = mine.salt("db1", "mine.get", "*", "network.ip_addrs")
        assert done.returncode == 1
        assert ("mine.get of 'network.ip_addrs' from '*' (glob) denied: the master's "
                "mine_get rules do not allow db1 to read 'network.ip_addrs'") in done.stdout
        event = wait_event(bus, "raetsalt/mine_get/db1/denied")
        assert event["data"]["fun"] == ["network.ip_addrs"]
        native = mine.salt("n1", "mine.get", "*", "network.ip_addrs")
        assert native.returncode == 1 and "denied" in native.stdout
    finally:
        bus.destroy()
    assert "denied" in mine.master.expect("mine_get 'db1'", timeout=10.0)
