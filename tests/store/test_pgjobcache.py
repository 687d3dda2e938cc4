"""The pgjsonb job cache against a real PostgreSQL (tests/pg.py): Salt's tables and
columns, the same answers as the file job cache, and an outage that loses nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg import Postgres

from raetsalt.daemon.jobcache import JobCache
from raetsalt.errors import ConfigError, KeepError
from raetsalt.store.pgjobcache import PgJobCache

JID = "20261126120000000001"


@pytest.fixture
def database(postgres: Postgres) -> str:
    """A fresh database of the test server: its connection string."""
    return postgres.create_database("jobs")


@pytest.fixture
def cache(database: str, tmp_path: Path) -> Iterator[PgJobCache]:
    store = PgJobCache({"cluster_store": database}, tmp_path / "spool")
    yield store
    store.close()


def _rows(database: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def _ret(value: Any, retcode: int = 0) -> dict[str, Any]:
    return {"return": value, "retcode": retcode, "success": retcode == 0,
            "fun": "test.echo", "fun_args": [value]}


def test_returns_land_in_salts_tables_and_read_back_like_the_file_cache(
        cache: PgJobCache, database: str, tmp_path: Path) -> None:
    load = {"fun": "test.echo", "arg": ["hi"], "tgt": "*", "tgt_type": "glob",
            "user": "root", "minions": ["m1", "m2"]}
    files = JobCache(tmp_path / "files")
    for store in (cache, files):
        store.save_load(JID, load)
        store.save_return(JID, "m1", _ret({"a": [1, 2]}))
        store.save_return(JID, "m2", _ret("bad", retcode=1))
    cache.commit_now()
    assert cache.flush()
    rows = _rows(database, "SELECT fun, jid, return, id, success, full_ret, alter_time "
                 "FROM salt_returns ORDER BY id")
    assert [r[:5] for r in rows] == [("test.echo", JID, {"a": [1, 2]}, "m1", "true"),
                                     ("test.echo", JID, "bad", "m2", "false")]
    assert rows[0][5] == {**_ret({"a": [1, 2]}), "jid": JID, "id": "m1"}  # Salt's full_ret
    assert rows[0][6].tzinfo is not None
    assert _rows(database, "SELECT jid, load FROM jids") == [(JID, {**load, "jid": JID})]
    # A new cache (nothing held: every answer comes from the database) reads like files.
    fresh = PgJobCache({"cluster_store": database}, tmp_path / "spool2")
    try:
        assert fresh.get_load(JID) == files.get_load(JID)
        assert fresh.get_returns(JID) == files.get_returns(JID)
        assert fresh.jids() == files.jids() == [JID]
        assert fresh.get_load("20261126120000000002") is None
    finally:
        fresh.close()


def test_a_return_saved_twice_is_one_row_the_last(cache: PgJobCache, database: str) -> None:
    cache.save_load(JID, {"fun": "test.echo"})
    cache.save_return(JID, "m1", _ret(1))
    cache.commit_now()
    assert cache.flush()
    cache.save_return(JID, "m1", _ret(2))
    cache.commit_now()
    assert cache.flush()
    assert _rows(database, "SELECT id, return FROM salt_returns") == [("m1", 2)]


def test_what_jsonb_refuses_is_stored_anyway_and_blocks_nothing(
        cache: PgJobCache, database: str) -> None:
    cache.save_load(JID, {"fun": "x" * 80})
    awkward = {"nul": "a\x00b", "lone": "\ud800x", "escaped": "\\u0000 stays text"}
    cache.save_return(JID, "m1", {**_ret(awkward), "fun": "f" * 80})
    cache.save_return(JID, "m2", _ret("after"))
    cache.commit_now()
    assert cache.flush()
    rows = dict(_rows(database, "SELECT id, return FROM salt_returns"))
    assert rows == {"m1": {"nul": "a\ufffdb", "lone": "\ufffdx",
                           "escaped": "\\u0000 stays text"}, "m2": "after"}
    assert _rows(database, "SELECT fun FROM salt_returns WHERE id = 'm1'") == [("f" * 50,)]
    assert cache.writer.stats["rejected"] == 0


def test_bad_ids_fail_in_the_caller(cache: PgJobCache) -> None:
    with pytest.raises(KeepError):
        cache.save_return("not-a-jid", "m1", _ret(1))
    with pytest.raises(KeepError):
        cache.save_return(JID, "", _ret(1))
    with pytest.raises(KeepError):
        cache.save_return(JID, "m1", {"return": [_circular()]})


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def test_an_outage_loses_nothing_and_never_waits(
        postgres: Postgres, database: str, tmp_path: Path) -> None:
    cache = PgJobCache({"cluster_store": database}, tmp_path / "spool")
    try:
        cache.save_load(JID, {"fun": "test.ping"})
        cache.commit_now()
        assert cache.flush()
        postgres.stop()
        try:
            minions = [f"m{n:04d}" for n in range(3000)]
            for start in range(0, len(minions), 100):  # 30 passes of the loop
                for minion in minions[start:start + 100]:
                    cache.save_return(JID, minion, _ret(True))
                cache.commit_now()
            # Reads answer from what is held (the database cannot be asked).
            assert len(cache.get_returns(JID)) == 3000
            assert cache.get_load(JID) == {"fun": "test.ping", "jid": JID}
            deadline = time.monotonic() + 60
            while (cache.writer.stats["spooled"] < 3001 or cache.writer.database_up
                   is not False) and time.monotonic() < deadline:
                time.sleep(0.05)  # polling the writer's state
            assert cache.writer.stats["spooled"] == 3001  # on disk, not only in memory
            assert cache.writer.database_up is False
            assert not cache.flush(0.2)
        finally:
            postgres.start()
        assert cache.flush(60)
        assert _rows(database, "SELECT count(*) FROM salt_returns") == [(3000,)]
        assert cache.writer.stats["dropped"] == cache.writer.stats["rejected"] == 0
        assert not list((tmp_path / "spool").glob("*.spool")) or cache.writer.spool.total_bytes() \
            < 8 << 20  # finished segments are removed
    finally:
        cache.close()


def test_rows_left_in_the_spool_are_written_at_the_next_start(
        postgres: Postgres, database: str, tmp_path: Path) -> None:
    postgres.stop()
    try:
        cache = PgJobCache({"cluster_store": database}, tmp_path / "spool")
        cache.save_load(JID, {"fun": "test.ping"})
        for n in range(50):
            cache.save_return(JID, f"m{n}", _ret(n))
        cache.commit_now()
        cache.writer.close(timeout=0.5)  # the database is down: they stay in the spool
        assert cache.writer.spool.total_bytes() > 0
    finally:
        postgres.start()
    again = PgJobCache({"cluster_store": database}, tmp_path / "spool")
    try:
        assert again.flush(60)
        assert _rows(database, "SELECT count(*) FROM salt_returns") == [(50,)]
        assert again.get_returns(JID)["m7"]["return"] == 7
        assert again.writer.spool.total_bytes() == 0 or not again.writer.pending()
    finally:
        again.close()


def test_clean_removes_old_jobs_in_order(cache: PgJobCache, database: str) -> None:
    old, new = "20200101000000000001", JID
    for jid in (old, new):
        cache.save_load(jid, {"fun": "test.ping"})
        cache.save_return(jid, "m1", _ret(True))
    assert cache.clean(datetime(2026, 11, 26, tzinfo=UTC), 24) == []
    cache.commit_now()
    assert cache.flush()
    assert _rows(database, "SELECT jid FROM jids") == [(new,)]
    assert _rows(database, "SELECT jid FROM salt_returns") == [(new,)]
    assert cache.jids() == [new]


def test_config_keys_like_salts_returner(postgres: Postgres, tmp_path: Path) -> None:
    opts = {"returner.pgjsonb.host": postgres.host, "returner.pgjsonb.port": postgres.port,
            "returner.pgjsonb.user": postgres.user, "returner.pgjsonb.pass": postgres.password,
            "returner.pgjsonb.db": postgres.dbname}
    cache = PgJobCache(opts, tmp_path / "spool")
    try:
        cache.save_load(JID, {"fun": "test.ping"})
        cache.commit_now()
        assert cache.flush(30)
        assert cache.get_load(JID) == {"fun": "test.ping", "jid": JID}
    finally:
        with psycopg.connect(postgres.conninfo) as conn:
            conn.execute("DROP TABLE IF EXISTS jids, salt_returns, salt_events")
        cache.close()
    with pytest.raises(ConfigError, match="port must be a number"):
        PgJobCache({"returner.pgjsonb.port": "many"}, tmp_path / "spool3")


def test_a_wrong_password_is_logged_once_and_rows_wait(
        postgres: Postgres, database: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    wrong = database.replace(postgres.password, "nope")
    cache = PgJobCache({"cluster_store": wrong}, tmp_path / "spool")
    try:
        cache.save_load(JID, {"fun": "test.ping"})
        cache.commit_now()
        assert not cache.flush(1.5)
        assert cache.get_load(JID) == {"fun": "test.ping", "jid": JID}
    finally:
        cache.close()
    lines = [r.getMessage() for r in caplog.records if "unreachable (" in r.getMessage()]
    assert len(lines) == 1 and "nope" not in json.dumps(lines)


def test_a_row_the_database_refuses_is_set_aside_and_the_rest_written(
        cache: PgJobCache, database: str, tmp_path: Path) -> None:
    cache.save_load(JID, {"fun": "test.ping"})
    cache.commit_now()
    assert cache.flush()
    with psycopg.connect(database) as conn:  # a rule of the site's DBA, say
        conn.execute("ALTER TABLE salt_returns ADD CONSTRAINT no_poison CHECK (id <> 'poison')")
    for minion in ("m1", "poison", "m2"):
        cache.save_return(JID, minion, _ret(minion))
    cache.commit_now()
    assert cache.flush()
    assert sorted(_rows(database, "SELECT id FROM salt_returns")) == [("m1",), ("m2",)]
    assert cache.writer.stats["rejected"] == 1
    (kept,) = (tmp_path / "spool" / "rejected.jsonl").read_text().splitlines()
    assert json.loads(kept)[:3] == ["ReturnRow", JID, "poison"]
