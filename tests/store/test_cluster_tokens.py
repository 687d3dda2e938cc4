"""The cluster's eauth tokens (``raetsalt.store.pgtokens`` under ``raetsalt.auth.tokens``)
against the test PostgreSQL: a token made through one master's store is taken by
another's, expiry and revocation hold on both, only hashes reach the database, rows that
are not what a master writes are counted drops, and a database outage blocks nothing
(a revocation made meanwhile arrives when it is back)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers.waiting import wait_for
from hypothesis import given
from hypothesis import strategies as st
from pg import Postgres

from raetsalt.auth.tokens import TokenStore, digest_of
from raetsalt.store import sharedtokens
from raetsalt.store.pgtokens import MAX_RECORD, ClusterTokens


class Pair:
    """Two masters' token stores sharing one database."""

    def __init__(self, root: Path, database: str) -> None:
        self.database = database
        self.stores = {}
        for name in ("ma", "mb"):
            store = TokenStore(root / name)
            store.shared = ClusterTokens({"conninfo": database}, "fleet1", name,
                                         forget=store.forget)
            self.stores[name] = store
        for store in self.stores.values():
            wait_for(lambda s=store: s.shared.connected)  # type: ignore[union-attr]

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


@pytest.fixture
def pair(postgres: Postgres, tmp_path: Path) -> Iterator[Pair]:
    made = Pair(tmp_path, postgres.create_database("tokens"))
    try:
        yield made
    finally:
        made.close()


def _sql(database: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    with psycopg.connect(database, autocommit=True) as conn:
        cur = conn.execute(sql, args)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def test_a_token_made_on_one_master_works_on_the_other_until_it_expires(pair: Pair) -> None:
    a, b = pair.stores["ma"], pair.stores["mb"]
    now = time.time()
    made = a.create("fred", "file", ["ops"], now, 3600.0, None, wait=5.0)
    token = made["token"]
    assert made["shared"] is True  # committed before the login is answered
    # b has it at once, by its notification or by reading the row
    got = b.fetch(token, now)
    assert got is not None and (got["name"], got["eauth"], got["groups"]) == (
        "fred", "file", ["ops"])
    assert not (b.root / digest_of(token)).exists()  # b keeps no file of it
    # expiry is the record's, everywhere
    assert b.get(token, now + 3601) is None and a.get(token, now + 3601) is None
    # only the hash is in the database
    rows = _sql(pair.database, "SELECT token_hash, record FROM raetsalt_cluster_tokens")
    assert [r[0] for r in rows] == [digest_of(token)]
    assert token not in json.dumps([str(r) for r in rows])


def test_a_logout_on_one_master_ends_the_token_everywhere(pair: Pair) -> None:
    a, b = pair.stores["ma"], pair.stores["mb"]
    now = time.time()
    token = a.create("fred", "file", [], now, 3600.0, None, wait=5.0)["token"]
    assert b.fetch(token, now) is not None
    b.remove(token, wait=5.0)  # returns once the database holds the revocation
    assert _sql(pair.database, "SELECT revoked FROM raetsalt_cluster_tokens") == [(True,)]
    assert b.get(token, now) is None
    wait_for(lambda: a.get(token, time.time()) is None)
    assert not (a.root / digest_of(token)).exists()  # a's own file went with it
    # a revocation is not undone by the token's record written again
    assert b.fetch(token, now) is None


def test_rows_that_are_not_a_masters_are_counted_drops(pair: Pair) -> None:
    b = pair.stores["mb"]
    assert b.shared is not None
    shared = b.shared
    good = "a" * 64
    record = sharedtokens.record_text({"name": "x", "eauth": "file", "groups": [],
                                       "start": 1.0, "expire": 4e9})
    insert = ("INSERT INTO raetsalt_cluster_tokens (cluster_id, token_hash, record, expire, "
              "origin) VALUES ('fleet1', %s, %s, %s, 'evil')")
    _sql(pair.database, insert, "b" * 64, "{not json", 4e9)
    _sql(pair.database, insert, "c" * 64, "x" * (MAX_RECORD + 1), 4e9)  # not even fetched
    _sql(pair.database, insert, "d" * 64, record, 5e9)  # expiry differs from the record's
    _sql(pair.database, insert, good, record, 4e9)
    before = shared.stats["malformed"]
    for digest in ("b", "c", "d"):
        shared.fetch(digest * 64, 5.0)
    assert shared.stats["malformed"] == before + 3
    shared.fetch(good, 5.0)
    assert shared.lookup(good, time.time()) is not None
    # notifications: malformed, oversized and another cluster's are dropped, counted
    for payload in ("{", "x" * 5000, json.dumps({"cluster": "fleet1", "op": "put",
                                                   "hash": "zz"}),
                    json.dumps({"cluster": "other", "op": "put", "hash": good})):
        _sql(pair.database, "SELECT pg_notify('raetsalt_tokens', %s)", payload)
    wait_for(lambda: shared.stats["malformed"] == before + 6
                 and shared.stats["foreign"] == 1)


def test_a_database_outage_blocks_nothing_and_a_revocation_waits(
        pair: Pair, postgres: Postgres) -> None:
    a, b = pair.stores["ma"], pair.stores["mb"]
    now = time.time()
    token = a.create("fred", "file", [], now, 3600.0, None, wait=5.0)["token"]
    assert b.fetch(token, now) is not None
    postgres.stop()
    try:
        wait_for(lambda: not a.shared.connected)  # type: ignore[union-attr]
        skipped = b.shared.stats["fetch_skipped"]  # type: ignore[union-attr]
        wait_for(lambda: not b.shared.connected)  # type: ignore[union-attr]
        late = a.create("ann", "file", [], now, 3600.0, None)  # queued, not waited for
        assert late["shared"] is False
        assert a.get(late["token"], now) is not None  # works here meanwhile
        a.remove(token)
        assert b.fetch(token, now) is not None  # b has not heard yet
        assert b.fetch(late["token"], now) is None  # not asked of an absent database
        assert b.shared.stats["fetch_skipped"] == skipped + 1  # type: ignore[union-attr]
    finally:
        postgres.start()
    wait_for(lambda: b.get(token, time.time()) is None, timeout=30)
    wait_for(lambda: b.get(late["token"], time.time()) is not None, timeout=30)


@given(st.one_of(st.text(max_size=200), st.binary(max_size=50), st.integers(),
                 st.none(), st.lists(st.integers(), max_size=3)))
def test_payloads_and_records_from_the_database_never_raise(value: object) -> None:
    assert sharedtokens.from_payload("fleet1", value) in (None, False) or isinstance(
        sharedtokens.from_payload("fleet1", value), tuple)
    assert sharedtokens.parse_record(value) is None or isinstance(
        sharedtokens.parse_record(value), dict)
    sharedtokens.from_row(value, value, value, value)
