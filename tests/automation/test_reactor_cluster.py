"""Two real masters of one cluster (``cluster_id``, ``cluster_store`` on the test
PostgreSQL) with the same reactor: an event both of them see reacts once in the cluster
(each reaction is claimed in the store with a unique insert); with the store stopped
each master reacts by itself and says so.  A minion serving both masters at once (hot
multi-master) starts: each master fires its ``salt/minion/<id>/start``, the same event
(the time the minion started, from its hello), and the reaction runs once.  Needs the
salt extra (Salt's renderers)."""

from __future__ import annotations

import textwrap
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from daemons.helpers import MINION_TUNING, Daemon, World, make_world
from daemons.relay import Relay
from helpers.ports import port_in
from pg import Postgres

from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent, SaltEvent

pytestmark = pytest.mark.integration

REACTION = """\
note_it:
  caller.cmd.run:
    - args:
      - cmd: echo {{ data['n'] }} >> {out}
      - python_shell: true
"""
EVENTS = 20


def _master(world: World, name: str, database: str, sls: Path, extra: str = ""
            ) -> tuple[Daemon, str]:
    """A master of the cluster whose reactor sends ``fleet/*`` to ``sls`` (and ``extra``
    reactor entries, then further config)."""
    conf = world.root / name
    conf.mkdir()
    (conf / "master").write_text(textwrap.dedent(f"""\
        root_dir: {conf}
        interface: 127.0.0.1
        id: {name}
        raet_port: 0
        cluster_id: fleet1
        cluster_store: '{database}'
        reactor_worker_threads: 1
        reactor:
          - 'fleet/*':
            - {sls}
        """) + extra)
    daemon = Daemon("master", conf)  # its own port (raet_port 0), not World's master's
    world.daemons.append(daemon)
    daemon.expect_each(["reactions claimed in the cluster store (cluster fleet1)",
                        "reactor listening on the master's bus"], timeout=60)
    return daemon, load_node_config(conf, "master")["sock_dir"]


def _fire_on_both(sock_dirs: list[str], tag: str, data: dict[str, object]) -> None:
    for sock_dir in sock_dirs:
        bus = SaltEvent("master", sock_dir)
        assert bus.fire_event(dict(data), tag)
        bus.destroy()


def _wait_lines(path: Path, want: set[str], logs: list[Daemon]) -> list[str]:
    deadline = time.monotonic() + 90
    while True:
        lines = path.read_text().split() if path.exists() else []
        if want <= set(lines):
            return lines
        assert time.monotonic() < deadline, f"{want - set(lines)} missing; logs:\n" + \
            "\n".join(line for d in logs for line in d.drain()[-20:])
        time.sleep(0.05)  # polling the file the reactions write


def test_an_event_two_masters_see_reacts_once_in_the_cluster(postgres: Postgres) -> None:
    database = postgres.create_database("reactclaims")
    with make_world() as world:
        out = world.root / "reactions"
        sls = world.root / "note.sls"
        sls.write_text(REACTION.replace("{out}", str(out)))
        m1, sock1 = _master(world, "m1", database, sls)
        m2, sock2 = _master(world, "m2", database, sls)
        for n in range(EVENTS):
            _fire_on_both([sock1, sock2], "fleet/changed", {"n": n, "id": "web1"})
        # Events only one master sees (different data) react on it: when both marks
        # are there, each master has reacted to (or left) every event before them.
        _fire_on_both([sock1], "fleet/mark", {"n": "mark-m1"})
        _fire_on_both([sock2], "fleet/mark", {"n": "mark-m2"})
        lines = _wait_lines(out, {"mark-m1", "mark-m2"}, [m1, m2])
        counts = Counter(lines)
        assert counts == Counter({str(n): 1 for n in range(EVENTS)}
                                 | {"mark-m1": 1, "mark-m2": 1}), (
            counts, m1.drain()[-10:], m2.drain()[-10:])

        postgres.stop()
        try:
            _fire_on_both([sock1, sock2], "fleet/changed", {"n": "store-down"})
            for daemon in (m1, m2):
                daemon.expect("cannot be reached", timeout=60)
            lines = _wait_lines(out, {"store-down"}, [m1, m2])
            deadline = time.monotonic() + 60
            while Counter(lines)["store-down"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # polling the file the reactions write
                lines = out.read_text().split()
            assert Counter(lines)["store-down"] == 2  # each master reacted by itself
        finally:
            postgres.start()
        for daemon in (m1, m2):
            assert daemon.terminate() == 0


START = """\
note_start:
  caller.cmd.run:
    - args:
      - cmd: echo start-{{ data['id'] }} >> {out}
      - python_shell: true
"""


def _start_event(bus: MasterEvent, minion: str, logs: list[Daemon]) -> dict[str, object]:
    tag = f"salt/minion/{minion}/start"
    deadline = time.monotonic() + 60
    while (remaining := deadline - time.monotonic()) > 0:
        event = bus.get_event(wait=remaining, tag=tag, full=True)
        if event is not None:
            return event["data"]  # type: ignore[no-any-return]
    raise AssertionError(f"no {tag} within 60 s; logs:\n" + "\n".join(
        line for d in logs for line in d.drain()[-20:]))


def test_a_minion_serving_two_masters_at_once_starts_one_reaction(
        postgres: Postgres) -> None:
    database = postgres.create_database("startclaims")
    with make_world() as world:
        out = world.root / "reactions"
        note, start = world.root / "note.sls", world.root / "start.sls"
        note.write_text(REACTION.replace("{out}", str(out)))
        start.write_text(START.replace("{out}", str(out)))
        extra = f"  - 'salt/minion/*/start':\n    - {start}\nauto_accept: true\n"
        (m1, sock1), (m2, sock2) = (_master(world, name, database, note, extra)
                                    for name in ("m1", "m2"))
        ports = [port_in(line) for d in (m1, m2)
                 if (line := d.peek(("serving on 127.0.0.1:",))) is not None]
        assert len(ports) == 2, [d.drain()[-10:] for d in (m1, m2)]
        # The minion reaches m2 through a relay that drops everything until the minion
        # has started on m1: m2 hears of it later, as a master that comes up late would.
        late = threading.Event()
        relay = Relay(ports[1], lambda _direction, _data: late.is_set())
        conf = world.root / "web1"
        conf.mkdir()
        (conf / "minion").write_text(  # master_type: str, Salt's default
            f"id: web1\nroot_dir: {conf}\nraet_port: 0\n"
            f"master: ['127.0.0.1:{ports[0]}', '127.0.0.1:{relay.port}']\n"
            f"{MINION_TUNING}")
        buses = [MasterEvent(sock1), MasterEvent(sock2)]
        try:
            minion = world.start("minion", conf)
            logs = [minion, m1, m2]
            first = _start_event(buses[0], "web1", logs)
            late.set()
            second = _start_event(buses[1], "web1", logs)
        finally:
            for bus in buses:
                bus.destroy()
            relay.close()
        # Marks fired on each master after its start event react after it there
        # (one worker thread): when both are written, the start has reacted (or been
        # left to the other master) on each.
        _fire_on_both([sock1], "fleet/mark", {"n": "mark-m1"})
        _fire_on_both([sock2], "fleet/mark", {"n": "mark-m2"})
        lines = _wait_lines(out, {"mark-m1", "mark-m2"}, logs)
        assert Counter(lines)["start-web1"] == 1, (lines, [d.drain()[-10:] for d in logs])
        # The same event on both masters: when the minion started, not when each master
        # heard of it.
        assert first == second, (first, second)
