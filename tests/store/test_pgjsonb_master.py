"""A real master with ``master_job_cache: pgjsonb`` and real minions, against the test
PostgreSQL (tests/pg.py): returns land in Salt's tables, the runners read them, and the
database stopped under load loses no return the clients got while the master keeps
answering."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from daemons.helpers import World, make_world
from helpers.rounds import Rounds
from pg import Postgres
from remote.cluster import Started, json_docs, started_cluster

pytestmark = pytest.mark.integration

MINIONS = {"minion1": "os: Debian", "minion2": "os: Ubuntu", "minion3": "os: CentOS"}


def _count(database: str, sql: str) -> int:
    with psycopg.connect(database) as conn:
        try:
            row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
        except psycopg.errors.UndefinedTable:  # the master has not created it yet
            return 0
    assert row is not None
    return int(row[0])


def _wait_rows(database: str, sql: str, expected: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    found = _count(database, sql)
    while found < expected and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the database, not synchronising on time
        found = _count(database, sql)
    return found


@pytest.fixture
def pg_master(postgres: Postgres) -> Iterator[tuple[World, Started, str]]:
    database = postgres.create_database("masterjobs")
    extra = (f"auto_accept: true\nmaster_job_cache: pgjsonb\ncluster_store: '{database}'\n")
    with make_world() as world, started_cluster(world, extra, MINIONS) as up:
        yield world, up, database


def _ping(world: World, up: Started) -> dict[str, Any]:
    done = world.cli("salt", up.master_conf, "*", "test.ping", "--out", "json", "-t", "20")
    return json_docs(done.stdout) if done.returncode == 0 else {}


def test_returns_in_salts_tables_and_the_runners_read_them(
        pg_master: tuple[World, Started, str]) -> None:
    world, up, database = pg_master
    assert _ping(world, up) == dict.fromkeys(MINIONS, True)
    assert _wait_rows(database, "SELECT count(*) FROM salt_returns", 3) == 3
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT fun, jid, return, id, success, full_ret "
                            "FROM salt_returns ORDER BY id").fetchall()
        ((jid, load),) = conn.execute("SELECT jid, load FROM jids").fetchall()
    assert [(r[0], r[2], r[3], r[4]) for r in rows] == [
        ("test.ping", True, m, "true") for m in sorted(MINIONS)]
    assert {r[1] for r in rows} == {jid}
    assert rows[0][5]["return"] is True and rows[0][5]["id"] == "minion1"
    assert load["fun"] == "test.ping" and sorted(load["minions"]) == sorted(MINIONS)
    looked = world.cli("run", up.master_conf, "jobs.lookup_jid", jid, "--out", "json")
    assert json_docs(looked.stdout) == dict.fromkeys(MINIONS, True), looked.stderr
    listed = world.cli("run", up.master_conf, "jobs.list_jobs", "--out", "json")
    assert json_docs(listed.stdout)[jid]["Function"] == "test.ping"
    assert any("job cache: pgjsonb" in line for line in up.master.drain())


def test_the_database_stopped_under_load_loses_no_return(
        postgres: Postgres, pg_master: tuple[World, Started, str]) -> None:
    world, up, database = pg_master
    # one client after another, as fast as the master answers
    rounds = Rounds(lambda turn: _ping(world, up)).start()
    answers = rounds.answers
    try:
        rounds.wait(2)
        postgres.stop()
        try:
            down_from = len(answers)
            rounds.wait(8)  # the master keeps answering while the database is down
            up.master.expect("unreachable", timeout=30)
            during = answers[down_from:]
        finally:
            postgres.start()
        rounds.wait(2)
    finally:
        rounds.stop()
    assert all(got == dict.fromkeys(MINIONS, True) for got in during), during
    acknowledged = sum(len(got) for got in answers)
    assert acknowledged >= 3 * 12
    # Every return a client got is in the database once, the spool drained.
    assert _wait_rows(database, "SELECT count(*) FROM salt_returns",
                      acknowledged) == acknowledged
    assert _count(database, "SELECT count(DISTINCT jid) FROM salt_returns") == len(answers)
    assert _count(database, "SELECT count(*) FROM jids") >= len(answers)
    up.master.expect("reachable again", timeout=30)
