"""The reactor on real daemons: Salt's documented examples.

A minion's first join is pending; its ``salt/auth`` event makes the reactor accept its
key (``wheel.key.accept``); the minion connects and its ``salt/minion/<id>/start`` makes
the reactor publish jobs to it (``local.cmd.run``, and ``local.state.apply`` on a minion
running Salt's loader: Salt's highstate-on-start example).  A broken reactor file is
logged once, with its file and tag, however often its tag fires.  Needs the salt extra
(the reactor renders with Salt's renderers); without it the master says so in one line.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from daemons.helpers import Daemon, World, make_world
from helpers.nosalt import one_line_without_salt

from raetsalt.config import load_node_config
from raetsalt.event import SaltEvent

pytestmark = pytest.mark.integration

START = """\
touch_on_start:
  local.cmd.run:
    - tgt: {{ data['id'] }}
    - args:
      - cmd: touch {out}/started-{{ data['id'] }}
{% if data['id'] == 'salty' %}
highstate_run:
  local.state.apply:
    - tgt: {{ data['id'] }}
{% endif %}
"""
AUTH = """\
{% if data['act'] == 'pend' and data['id'].startswith('minion') %}
accept_new_minion:
  wheel.key.accept:
    - args:
      - match: {{ data['id'] }}
{% endif %}
"""
BROKEN = "oops:\n  local.cmd.run:\n    - tgt: {{ data['id'] \n"
MARK = ("mark:\n  local.cmd.run:\n    - tgt: minion1\n    - arg:\n"
        "      - touch {out}/mark-{{ data['n'] }}\n")
STATES = {
    "top.sls": "base:\n  'salty':\n    - marker\n",
    "marker.sls": "{out}/highstate-{{{{ grains['id'] }}}}:\n  file.managed:\n"
                  "    - contents: applied by the reactor\n",
}


def _wait_for(path: Path, timeout: float = 60.0, *logs: Daemon, written: bool = False
              ) -> None:
    """Until ``path`` exists (and, if ``written``, has some text: Salt's file.managed
    creates a file, then writes it)."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and (not written or path.read_text())):
        assert time.monotonic() < deadline, f"{path.name} never appeared; logs:\n" + "\n".join(
            line for daemon in logs for line in daemon.drain()[-40:])
        time.sleep(0.05)  # polling the file the reaction makes, not a fixed wait


def _write(world: World) -> tuple[Path, Path]:
    out, srv = world.root / "out", world.root / "srv"
    out.mkdir()
    for sub in ("reactor", "salt"):
        (srv / sub).mkdir(parents=True)
    (srv / "reactor" / "start.sls").write_text(START.replace("{out}", str(out)))
    (srv / "reactor" / "auth.sls").write_text(AUTH)
    (srv / "reactor" / "broken.sls").write_text(BROKEN)
    (srv / "reactor" / "mark.sls").write_text(MARK.replace("{out}", str(out)))
    for name, text in STATES.items():
        (srv / "salt" / name).write_text(text.format(out=out))
    return out, srv


def _master_config(srv: Path) -> str:
    return textwrap.dedent(f"""\
        file_roots:
          base: [{srv}/salt]
        reactor_worker_threads: 1
        reactor:
          - 'salt/auth':
            - {srv}/reactor/auth.sls
          - 'salt/minion/*/start':
            - {srv}/reactor/start.sls
          - 'custom/broken':
            - {srv}/reactor/broken.sls
          - 'custom/*':
            - {srv}/reactor/mark.sls
        """)


def test_auth_start_and_highstate_reactions() -> None:
    pytest.importorskip("salt")
    with make_world() as world:
        out, srv = _write(world)
        master = world.start("master", world.master_dir(_master_config(srv)))
        master.expect("reactor listening on the master's bus", timeout=30)
        minion = world.start("minion", world.minion_dir("minion1", "minion1"))
        # Pending, then accepted by the reactor (wheel.key.accept), then connected...
        minion.expect("connected to the master themaster", timeout=60)
        # ...and its start event ran cmd.run on it (local.cmd.run).
        _wait_for(out / "started-minion1")
        salty_dir = world.minion_dir("salty", "salty")
        text = (salty_dir / "minion").read_text()
        (salty_dir / "minion").write_text(text.replace("execution_mode: native",
                                                       "execution_mode: salt"))
        salty = world.start("minion", salty_dir)
        # salty is not accepted by the reactor (auth.sls: minion* only): accept by hand.
        keep_deadline = time.monotonic() + 30
        while True:
            done = world.cli("key", world.root / "ma", "-a", "salty", "-y")
            if "Key for minion salty accepted." in done.stdout:
                break
            assert time.monotonic() < keep_deadline, done.stdout + done.stderr
            time.sleep(0.1)
        # Salt's documented example: minion start -> state.apply (Salt's highstate).
        _wait_for(out / "highstate-salty", 120, master, salty, written=True)
        assert (out / "highstate-salty").read_text().strip() == "applied by the reactor"
        _wait_for(out / "started-salty")

        # A broken file: logged once with its file and tag, however often it fires; the
        # reactor goes on (one worker thread: events are handled in order).
        sock_dir = load_node_config(world.root / "ma", "master")["sock_dir"]
        bus = SaltEvent("master", sock_dir)
        for n in range(3):
            assert bus.fire_event({"id": "minion1", "n": n}, "custom/broken")
        assert bus.fire_event({"n": "last"}, "custom/done")
        bus.destroy()
        _wait_for(out / "mark-last")
        lines = [line for line in master.drain() if "broken.sls" in line]
        assert len(lines) == 1, lines
        assert "for tag custom/broken" in lines[0]
        assert not [line for line in master.lines if "Traceback" in line], master.lines
        # custom/broken also matched custom/*: each of its files ran once per event.
        for n in range(3):
            assert (out / f"mark-{n}").exists()
        assert master.terminate() == 0


COUNT = """\
count_start:
  local.cmd.run:
    - tgt: {{ data['id'] }}
    - args:
      - cmd: echo start >> {out}/starts-{{ data['id'] }}
"""
DONE = "done:\n  local.cmd.run:\n    - tgt: early\n    - arg:\n      - touch {out}/done\n"


def test_a_minion_there_before_the_masters_reactor_has_its_start_reacted_to_once() -> None:
    """The minion waits for the master, so it joins the moment the master's road opens,
    while the reactor's process still loads Salt's renderers: the bus holds the start
    event for the reactor, which reacts to it once."""
    pytest.importorskip("salt")
    with make_world() as world:
        out = world.root / "out"
        out.mkdir()
        (world.root / "count.sls").write_text(COUNT.replace("{out}", str(out)))
        (world.root / "done.sls").write_text(DONE.replace("{out}", str(out)))
        minion = world.start("minion", world.minion_dir("early", "early"))
        master = world.start("master", world.master_dir(textwrap.dedent(f"""\
            auto_accept: True
            reactor_worker_threads: 1
            reactor:
              - 'salt/minion/*/start':
                - {world.root}/count.sls
              - 'custom/done':
                - {world.root}/done.sls
            """)))
        minion.expect("connected to the master themaster", timeout=60)
        _wait_for(out / "starts-early", 60, master, minion)
        # A second reaction would have been queued before this one (one worker thread).
        sock_dir = load_node_config(world.root / "ma", "master")["sock_dir"]
        bus = SaltEvent("master", sock_dir)
        assert bus.fire_event({}, "custom/done")
        bus.destroy()
        _wait_for(out / "done", 60, master, minion)
        assert (out / "starts-early").read_text() == "start\n"
        assert master.terminate() == 0


def test_without_salt_the_reactor_is_one_clear_line(tmp_path: Path) -> None:
    with make_world() as world:
        conf = world.master_dir("reactor:\n  - 'salt/minion/*/start': /srv/r/start.sls\n")
        line = one_line_without_salt(tmp_path, lambda: world.start("master", conf),
                                     "reactor: ignored")
        assert "'reactor' key" in line
