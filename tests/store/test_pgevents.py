"""The built-in ``pgjsonb`` event_return returner against the test PostgreSQL: rows in
Salt's ``salt_events``, a row the database refuses left out alone, and on a real master
the server stopped across a master restart with no event lost."""

from __future__ import annotations

import time

import psycopg
import pytest
from daemons.helpers import make_world
from pg import Postgres

from raetsalt.config import load_node_config
from raetsalt.daemon.eventreturn import event_returners
from raetsalt.event import SaltEvent
from raetsalt.store.pgevents import PgEventReturn


def _tags(database: str) -> list[str]:
    with psycopg.connect(database) as conn:
        try:
            return [t for (t,) in conn.execute("SELECT tag FROM salt_events ORDER BY id")]
        except psycopg.errors.UndefinedTable:
            return []


def test_rows_in_salt_events_and_a_refused_row_left_out(
        postgres: Postgres, caplog: pytest.LogCaptureFixture) -> None:
    database = postgres.create_database("evret")
    opts = {"id": "m1", "cluster_store": database, "event_return": ["pgjsonb"]}
    returner = event_returners(opts)["pgjsonb"]
    assert isinstance(returner, PgEventReturn)
    returner([{"tag": "a/1", "data": {"n": 1, "nested": {"x": [1, 2]}}},
              {"tag": "a/2", "data": {"n": 2}}])
    # jsonb cannot hold U+0000: U+FFFD in data; a tag holding one is left out alone,
    # counted and logged
    returner([{"tag": "b/1", "data": {"n": 3, "s": "x\x00y"}},
              {"tag": "b/\x00bad", "data": {}}, {"tag": "b/2", "data": {"n": 4}}])
    returner.close()
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT tag, data, master_id, alter_time IS NOT NULL "
                            "FROM salt_events ORDER BY id").fetchall()
    assert rows == [("a/1", {"n": 1, "nested": {"x": [1, 2]}}, "m1", True),
                    ("a/2", {"n": 2}, "m1", True), ("b/1", {"n": 3, "s": "x\ufffdy"}, "m1", True),
                    ("b/2", {"n": 4}, "m1", True)]
    assert returner.stats["rejected"] == 1
    assert sum("refused the event 'b/\\x00bad'" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.integration
def test_the_server_stopped_across_a_master_restart_loses_no_event(
        postgres: Postgres) -> None:
    database = postgres.create_database("evret_outage")
    with make_world() as world:
        conf = world.master_dir(f"event_return: pgjsonb\ncluster_store: '{database}'\n"
                                "event_return_whitelist: ['er/*']\n")
        sock_dir = load_node_config(conf, "master")["sock_dir"]
        master = world.start("master", conf)
        master.expect("event_return listening on the master's bus", timeout=30)
        bus = SaltEvent("master", sock_dir)
        for n in range(100):
            assert bus.fire_event({"n": n}, f"er/{n}")
        bus.destroy()
        postgres.stop()
        try:
            bus = SaltEvent("master", sock_dir)
            for n in range(100, 200):
                assert bus.fire_event({"n": n}, f"er/{n}")
            bus.destroy()
            master.expect("event_return: returner pgjsonb failed", timeout=30)
            assert master.terminate() == 0  # restarted while the server is stopped
            master = world.start("master", conf)
            master.expect("event_return listening on the master's bus", timeout=30)
            bus = SaltEvent("master", sock_dir)
            for n in range(200, 300):
                assert bus.fire_event({"n": n}, f"er/{n}")
            bus.destroy()
        finally:
            postgres.start()
        deadline = time.monotonic() + 60
        tags = _tags(database)
        while len(set(tags)) < 300 and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the database for the rows
            tags = _tags(database)
        assert sorted(set(tags), key=lambda t: int(t[3:])) == [f"er/{n}" for n in range(300)]
        assert master.terminate() == 0
