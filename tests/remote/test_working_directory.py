"""A daemon started from a directory an unprivileged user can write (``/tmp``) never
imports from it: the modules planted there (``raetsalt``, ``msgpack``, ``yaml``) would
run as the daemon's user (root) in the minion's Salt zygote, the master's Salt file
and pillar worker, or the job cache writer.  Each planted module leaves a marker file
when imported; after a Salt job, a pillar compile and returns written to the job cache,
there must be none."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemons.helpers import World, make_world

from raetsalt.config import load_node_config

pytest.importorskip("salt")
pytestmark = pytest.mark.integration

PLANTED = ("raetsalt/__init__.py", "msgpack.py", "yaml.py")


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def plant(directory: Path, markers: Path) -> None:
    for name in PLANTED:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tag = name.replace("/", "_")
        path.write_text(
            "import os\n"
            f"open(os.path.join({str(markers)!r}, '{tag}-%d' % os.getpid()), 'w').close()\n")


def test_daemons_started_from_a_planted_directory_import_nothing_from_it(world: World
                                                                         ) -> None:
    planted = world.root / "tmp"
    markers = world.root / "markers"
    markers.mkdir()
    plant(planted, markers)
    srv = world.root / "srv"
    (srv / "pillar").mkdir(parents=True)
    (srv / "pillar" / "top.sls").write_text("base:\n  '*':\n    - common\n")
    (srv / "pillar" / "common.sls").write_text("colour: blue\n")
    master_conf = world.master_dir(f"auto_accept: true\npillar_roots:\n  base: [{srv}/pillar]\n")
    master = world.start("master", master_conf, cwd=planted)
    master.expect("serving on")
    minion_conf = world.minion_dir("m1", "minion1")
    (minion_conf / "minion.d").mkdir()
    (minion_conf / "minion.d" / "salt.conf").write_text("execution_mode: salt\n")
    minion = world.start("minion", minion_conf, cwd=planted)
    minion.expect("connected to the master themaster", timeout=60)
    for _ in range(10):  # the pillar is compiled (in the worker) after the connection
        pillar = world.cli("salt", master_conf, "minion1", "pillar.get", "colour", "--out",
                           "json", "-t", "30", timeout=120)
        if json.loads(pillar.stdout or "{}").get("minion1"):  # "blue", masked
            break
    ping = world.cli("salt", master_conf, "minion1", "test.ping", "--out", "json")
    jobs = Path(load_node_config(master_conf, "master")["cachedir"]) / "jobs"
    for daemon in (master, minion):  # the job cache writer commits what is left
        daemon.popen.terminate()
        try:
            daemon.popen.wait(30)
        except subprocess.TimeoutExpired:
            daemon.popen.kill()
    assert sorted(p.name for p in markers.iterdir()) == []
    assert json.loads(pillar.stdout or "{}").get("minion1"), pillar.stdout
    assert json.loads(ping.stdout or "{}") == {"minion1": True}
    assert any(jobs.glob("*/minion1.json"))  # the writer child ran
