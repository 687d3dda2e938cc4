"""Salt's scheduler and beacons on real daemons.

``salty`` runs Salt's loader, with a ``schedule:`` (test.ping every 2 s) and a
``diskusage`` beacon whose threshold (1 % of /) is always crossed.  The scheduled
returns reach the master's job cache under real jids (``jobs.list_jobs``,
``jobs.lookup_jid``); ``schedule.add``/``list``/``delete`` work from the CLI; the
beacon's events reach the master's bus as ``salt/beacon/salty/diskusage/...`` and a
reactor on that tag runs ``cmd.run`` on another minion (minion1, native).  Needs the
salt extra; without it the minion says so in one line naming the key.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from daemons.helpers import Daemon, World, make_world
from helpers.nosalt import started_without_salt

from raetsalt.config import load_node_config
from raetsalt.event import SaltEvent

pytestmark = pytest.mark.integration

SALTY = """\
mine_functions:
  test.echo: [from the mine]
schedule:
  pinger:
    function: test.ping
    seconds: 2
beacons:
  diskusage:
    - /: 1%
    - interval: 2
"""
REACT = ("disk_alarm:\n  local.cmd.run:\n    - tgt: minion1\n    - arg:\n"
         "      - touch {out}/disk-alarm-{{{{ data['id'] }}}}\n")


def _until(what: str, check: object, timeout: float, *logs: Daemon) -> object:
    deadline = time.monotonic() + timeout
    while True:
        found = check()  # type: ignore[operator]
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} never happened; logs:\n" + "\n".join(
            line for daemon in logs for line in daemon.drain()[-40:])
        time.sleep(0.2)  # polling what the daemons produce, not a fixed wait


def _accept(world: World, name: str) -> None:
    _until(f"{name} accepted", lambda: f"Key for minion {name} accepted." in world.cli(
        "key", world.root / "ma", "-a", name, "-y").stdout, 30)


def _json(world: World, *args: str, tool: str = "salt") -> object:
    done = world.cli(tool, world.root / "ma", *args, "--out", "json", timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_schedule_beacons_and_a_reaction(tmp_path: Path) -> None:
    pytest.importorskip("salt")
    with make_world() as world:
        out = world.root / "out"
        out.mkdir()
        (world.root / "react.sls").write_text(REACT.format(out=out))
        master = world.start("master", world.master_dir(
            f"reactor:\n  - 'salt/beacon/*/diskusage/*':\n    - {world.root}/react.sls\n"))
        master.expect("reactor listening on the master's bus", timeout=30)
        sock_dir = load_node_config(world.root / "ma", "master")["sock_dir"]
        bus = SaltEvent("master", sock_dir, listen=True)
        minion1 = world.start("minion", world.minion_dir("minion1", "minion1"))
        salty_dir = world.minion_dir("salty", "salty", SALTY)
        text = (salty_dir / "minion").read_text()
        (salty_dir / "minion").write_text(text.replace("execution_mode: native",
                                                       "execution_mode: salt"))
        salty = world.start("minion", salty_dir)
        _accept(world, "minion1")
        _accept(world, "salty")

        # The beacon: its event on the master's bus, under Salt's tag, with Salt's data.
        event = bus.get_event(wait=90, tag="salt/beacon/salty/diskusage/", full=True)
        assert event is not None, salty.drain()[-40:]
        assert event["data"]["id"] == "salty" and event["data"]["mount"] == "/"
        # ... and the reactor ran cmd.run on minion1 for it.
        _until("the beacon's reaction", (out / "disk-alarm-salty").exists, 60,
               master, minion1, salty)

        # The scheduled test.ping: returns in the master's job cache under real jids.
        def scheduled() -> list[str]:
            jobs = _json(world, "jobs.list_jobs", tool="run")
            assert isinstance(jobs, dict)
            return [jid for jid, job in jobs.items() if job["Function"] == "test.ping"
                    and job["Target"] == "salty"]

        jids = _until("a scheduled return", scheduled, 60, master, salty)
        assert isinstance(jids, list)
        looked = _json(world, "jobs.lookup_jid", jids[0], tool="run")
        assert looked == {"salty": True}

        # schedule.* from the CLI: Salt's module talks to the scheduler over the bus.
        listed = world.cli("salt", world.root / "ma", "salty", "schedule.list")
        assert listed.returncode == 0 and "pinger:" in listed.stdout, listed.stdout
        added = _json(world, "salty", "schedule.add", "job2", "function=test.echo",
                      "job_args=['hi']", "seconds=3600")
        assert added == {"salty": {"comment": "Added job: job2 to schedule.",
                                   "changes": {"job2": "added"}, "result": True}}
        listed = world.cli("salt", world.root / "ma", "salty", "schedule.list")
        assert "job2:" in listed.stdout and "pinger:" in listed.stdout, listed.stdout
        # Persisted as Salt does, beside the minion's config (read again at start).
        kept = load_node_config(salty_dir, "minion")["schedule"]
        assert kept["job2"]["function"] == "test.echo" and "pinger" in kept
        deleted = _json(world, "salty", "schedule.delete", "job2")
        assert deleted["salty"]["result"] is True, deleted  # type: ignore[index]
        listed = world.cli("salt", world.root / "ma", "salty", "schedule.list")
        assert "job2" not in listed.stdout, listed.stdout
        # mine_interval: the minion's own timer ran mine.update once it had its pillar.
        _until("the mine's first update", lambda: _json(
            world, "salty", "mine.get", "salty", "test.echo") == {
                "salty": {"salty": "from the mine"}}, 60, salty)
        beacons = world.cli("salt", world.root / "ma", "salty", "beacons.list")
        assert beacons.returncode == 0 and "diskusage:" in beacons.stdout, beacons.stdout
        # After a module refresh the scheduler has the new loader and still answers.
        assert _json(world, "salty", "saltutil.refresh_modules") == {"salty": True}
        listed = world.cli("salt", world.root / "ma", "salty", "schedule.list")
        assert "pinger:" in listed.stdout, listed.stdout
        bus.destroy()
        for daemon in (master, minion1, salty):
            assert not [line for line in daemon.drain() if "Traceback" in line], daemon.lines


def test_without_salt_schedule_and_beacons_are_one_line_each(tmp_path: Path) -> None:
    """A salt package that cannot be imported (auto mode): one line per key, naming the
    package, and the minion runs on with its native functions."""
    with make_world() as world:
        world.master_dir()
        conf = world.minion_dir("minion1", "minion1", SALTY)
        text = (conf / "minion").read_text()
        (conf / "minion").write_text(text.replace("execution_mode: native",
                                                  "execution_mode: auto"))
        minion = started_without_salt(tmp_path, lambda: world.start("minion", conf))
        for key in ("schedule", "beacons"):
            line = minion.expect(f"{key}: ignored", timeout=30)
            assert "pip install 'raetsalt[salt]'" in line, line
        assert not any("Traceback" in entry for entry in minion.drain())
