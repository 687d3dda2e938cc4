"""Shared key decisions: the pure rules (raetsalt/store/sharedkeys.py, the policy hook)
and two ClusterKeys on the test PostgreSQL hearing each other through LISTEN/NOTIFY."""

from __future__ import annotations

import select
import time

import psycopg
import pytest
from helpers.waiting import wait_for
from pg import Postgres

from raetsalt.keep.policy import Action, KeyPolicy
from raetsalt.keep.records import Acceptance, KeyRef, KeyState, RoleRecord
from raetsalt.store import pgkeys
from raetsalt.store.pgkeys import CHANNEL, ClusterKeys, stored
from raetsalt.store.sharedkeys import (
    MAX_DENIED_PER_ID,
    SharedKey,
    accepted_key,
    decided,
    from_payload,
    from_row,
    local_action,
    may_pend,
    taken,
    to_payload,
    verdict,
)

V, P, OTHER = "a" * 64, "b" * 64, "c" * 64


def test_the_cluster_decides_undecided_ids_with_the_same_keys_only() -> None:
    book = {"m1": SharedKey("m1", "accepted", V, P), "m2": SharedKey("m2", "rejected", V, P),
            "m3": SharedKey("m3", "deleted", V, P)}
    policy = KeyPolicy(shared=lambda role, v, p: verdict(book, role, v, p))
    assert policy.decide("m1", V, P, None).acceptance is Acceptance.ACCEPTED
    assert policy.decide("m1", V, OTHER, None).acceptance is Acceptance.PENDING
    assert policy.decide("m2", V, P, None).acceptance is Acceptance.REJECTED
    assert policy.decide("m3", V, P, None).acceptance is Acceptance.PENDING
    pending = RoleRecord("m1", Acceptance.PENDING, V, P)
    assert policy.decide("m1", V, P, pending).acceptance is Acceptance.ACCEPTED
    rejected_here = RoleRecord("m1", Acceptance.REJECTED, V, P)  # a stored decision stays
    assert policy.decide("m1", V, P, rejected_here).acceptance is Acceptance.REJECTED


def test_a_decision_heard_becomes_the_operator_action_here() -> None:
    accepted = SharedKey("m1", "accepted", V, P)
    pending = RoleRecord("m1", Acceptance.PENDING, V, P)
    assert local_action(accepted, pending) == (
        Action.ACCEPT, KeyRef("m1", KeyState.PENDING, V, P))
    assert local_action(accepted, RoleRecord("m1", Acceptance.ACCEPTED, V, P)) is None
    assert local_action(accepted, RoleRecord("m1", Acceptance.PENDING, V, OTHER)) is None
    assert local_action(accepted, None) is None
    deleted = SharedKey("m1", "deleted", V, P)
    assert local_action(deleted, RoleRecord("m1", Acceptance.ACCEPTED, V, P)) == (
        Action.DELETE, KeyRef("m1", KeyState.ACCEPTED, V, P))
    assert decided(Action.ACCEPT, KeyRef("m1", KeyState.DENIED, V, P), "ma") is None


def test_notifications_are_checked() -> None:
    good = SharedKey("m1", "accepted", V, P, "ma")
    assert from_payload("c1", to_payload("c1", good)) == good
    assert from_payload("c2", to_payload("c1", good)) is None  # another cluster's
    for bad in ("", "[]", "{", '{"cluster":"c1","role":"../x","state":"accepted",'
                f'"verhex":"{V}","pubhex":"{P}"}}',
                '{"cluster":"c1","role":"m1","state":"owned",'
                f'"verhex":"{V}","pubhex":"{P}"}}',
                '{"cluster":"c1","role":"m1","state":"accepted","verhex":"zz","pubhex":""}',
                "x" * 5000):
        assert from_payload("c1", bad) is None


def _wait_for(keys: ClusterKeys, count: int) -> list[SharedKey]:
    got: list[SharedKey] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        select.select([keys.fileno()], [], [], 1.0)
        got.extend(keys.take())
    return got


def test_two_masters_hear_each_other(postgres: Postgres) -> None:
    database = postgres.create_database("keys")
    params = {"conninfo": database}
    a, b = ClusterKeys(params, "c1", "ma"), ClusterKeys(params, "c1", "mb")
    try:
        a.publish(Action.ACCEPT, KeyRef("m1", KeyState.PENDING, V, P))
        (heard,) = _wait_for(b, 1)
        assert heard == SharedKey("m1", "accepted", V, P, "ma")
        assert b.verdict("m1", V, P) is Acceptance.ACCEPTED
        with psycopg.connect(database, autocommit=True) as conn:  # forged and foreign
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, "not json"))
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, to_payload(
                "c2", SharedKey("m9", "accepted", V, P))))
        b.publish(Action.DELETE, KeyRef("m1", KeyState.ACCEPTED, V, P))
        (heard,) = _wait_for(a, 1)
        assert heard.state == "deleted" and a.verdict("m1", V, P) is None
        # b's listener counts the forged and the foreign notification in its own time
        wait_for(lambda: b.stats["malformed"] == 1 and b.stats["foreign"] == 1, timeout=30)
        assert "m9" not in b.book
        # A master started later learns what was decided before it.
        c = ClusterKeys(params, "c1", "mc")
        try:
            (stored,) = _wait_for(c, 1)
            assert stored.state == "deleted"
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def test_a_verify_key_finds_only_what_the_cluster_accepted_with_it() -> None:
    """The adoption lookup: the id and public key of an accepted decision on this very
    verify key; a rejected or deleted one, another key under the id, or an index entry
    the book no longer backs, finds nothing."""
    v1, p1, v2 = "1" * 64, "2" * 64, "3" * 64
    book = {"m1": SharedKey("m1", "accepted", v1, p1)}
    assert accepted_key(book, {v1: "m1"}, v1) == ("m1", p1)
    assert accepted_key(book, {v1: "m1"}, v2) is None
    assert accepted_key(book, {v2: "m1"}, v2) is None  # the index is stale: m1 has v1
    for state in ("rejected", "deleted"):
        assert accepted_key({"m1": SharedKey("m1", state, v1, p1)}, {v1: "m1"}, v1) is None


def test_a_pending_key_is_listed_but_never_replaces_a_decision() -> None:
    new = SharedKey("m1", "pending", V, P, "ma")
    assert may_pend(None, new)
    assert may_pend(SharedKey("m1", "deleted", V, P), new)
    assert may_pend(SharedKey("m1", "pending", OTHER, P), new)  # the newest wait shows
    assert not may_pend(SharedKey("m1", "pending", V, P, "mb"), new)  # said already
    for state in ("accepted", "rejected"):
        assert not may_pend(SharedKey("m1", state, V, P), new)
        assert not may_pend(SharedKey("m1", state, OTHER, P), new)
    # pending decides nothing: no verdict, nothing applied to a master's keys
    assert verdict({"m1": new}, "m1", V, P) is None
    assert local_action(new, RoleRecord("m1", Acceptance.PENDING, V, P)) is None
    assert from_payload("c1", to_payload("c1", new)) == new


def test_a_key_pending_on_one_master_is_decided_on_another(postgres: Postgres) -> None:
    database = postgres.create_database("pending")
    params = {"conninfo": database}
    a, b = ClusterKeys(params, "c1", "ma"), ClusterKeys(params, "c1", "mb")
    try:
        a.pending("m1", V, P)
        (heard,) = _wait_for(b, 1)
        assert heard == SharedKey("m1", "pending", V, P, "ma")
        assert b.holds(KeyRef("m1", KeyState.PENDING, V, P))
        b.publish(Action.ACCEPT, KeyRef("m1", KeyState.PENDING, V, P))
        (heard,) = _wait_for(a, 1)
        assert heard.state == "accepted"
        todo = local_action(heard, RoleRecord("m1", Acceptance.PENDING, V, P))
        assert todo == (Action.ACCEPT, KeyRef("m1", KeyState.PENDING, V, P))
        # Another key pair waiting under the accepted id on a master that has not heard
        # of the decision yet (its book stale): the database keeps the decision, and
        # that master learns so.
        assert wait_for(lambda: b.book["m1"].state == "accepted", timeout=30)
        with b._lock:
            del b.book["m1"]
        b.pending("m1", OTHER, P)
        assert wait_for(lambda: b.book["m1"].state == "accepted", timeout=30)
        with psycopg.connect(database) as conn:
            row = conn.execute("SELECT state, verhex FROM raetsalt_cluster_keys "
                               "WHERE role = 'm1'").fetchone()
        assert row == ("accepted", V)
    finally:
        a.close()
        b.close()


def _pair(n: int) -> tuple[str, str]:
    return (f"{n:064x}", f"{n + 1:064x}")


def test_an_id_the_cluster_holds_under_other_keys_is_denied_here() -> None:
    """A master with no record of m1 denies other keys under it when the cluster holds it
    accepted or pending; a denied pair never becomes the record."""
    book = {"m1": SharedKey("m1", "accepted", V, P), "m2": SharedKey("m2", "pending", V, P),
            "m3": SharedKey("m3", "deleted", V, P), "m4": SharedKey("m4", "rejected", V, P)}
    policy = KeyPolicy(shared=lambda role, v, p: verdict(book, role, v, p),
                       taken=lambda role, v, p: taken(book, role, v, p))
    for role in ("m1", "m2"):
        decision = policy.decide(role, V, OTHER, None)
        assert (decision.acceptance, decision.denial, decision.record) == (
            Acceptance.REJECTED, True, None)
        assert decision.denied == ((V, OTHER),)
        again = policy.decide(role, V, OTHER, None, [(V, OTHER)])
        assert again.denial and again.denied is None  # already listed: nothing new
    assert policy.decide("m1", V, P, None).acceptance is Acceptance.ACCEPTED
    assert policy.decide("m3", V, OTHER, None).acceptance is Acceptance.PENDING
    assert policy.decide("m4", V, OTHER, None).acceptance is Acceptance.PENDING
    # A record here decides as before (the cluster is asked only when there is none).
    mine = RoleRecord("m2", Acceptance.PENDING, V, OTHER)
    assert policy.decide("m2", V, OTHER, mine).acceptance is Acceptance.PENDING


def test_a_denied_pair_deleted_anywhere_leaves_this_masters_list() -> None:
    gone = SharedKey("m1", "undenied", V, OTHER, "ma")
    accepted = RoleRecord("m1", Acceptance.ACCEPTED, V, P)
    assert local_action(gone, accepted, ((V, OTHER),)) == (
        Action.DELETE, KeyRef("m1", KeyState.DENIED, V, OTHER))
    assert local_action(gone, accepted, ((V, P),)) is None
    assert local_action(SharedKey("m1", "denied", V, OTHER), accepted, ((V, OTHER),)) is None
    for state in ("denied", "undenied"):
        shared = SharedKey("m1", state, V, OTHER, "ma")
        assert from_payload("c1", to_payload("c1", shared)) == shared
        assert from_row("m1", state, V, OTHER) is None  # never a decision row
    assert from_row("m1", "denied", V, OTHER, states=("denied",)) is not None


def test_denied_keys_are_listed_everywhere_bounded_and_deleted_everywhere(
        postgres: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    database = postgres.create_database("denied")
    params = {"conninfo": database}
    monkeypatch.setattr(pgkeys, "MAX_DENIED", 12)
    a, b = ClusterKeys(params, "c1", "ma"), ClusterKeys(params, "c1", "mb")
    try:
        a.publish(Action.ACCEPT, KeyRef("m1", KeyState.PENDING, V, P))
        assert _wait_for(b, 1)[0].state == "accepted"
        b.deny("m1", [(V, OTHER)])
        wait_for(lambda: a.holds(KeyRef("m1", KeyState.DENIED, V, OTHER)), timeout=30)
        assert a.book["m1"].state == "accepted"  # the decision stays
        listed = stored(params, "c1")
        assert SharedKey("m1", "denied", V, OTHER, "mb") in listed
        assert SharedKey("m1", "accepted", V, P, "ma") in listed
        # At most MAX_DENIED_PER_ID per id: a flood of made-up keys stops at the mirror.
        b.deny("m1", [_pair(n) for n in range(20)])
        wait_for(lambda: len(a.denied.get("m1", ())) == MAX_DENIED_PER_ID, timeout=30)
        assert b.stats["denied_dropped"] == 20 - (MAX_DENIED_PER_ID - 1)
        # ... and at the database, for a master whose mirror missed the others' rows.
        with b._lock:
            b.denied.clear()
            b._denied_count = 0
        b.deny("m1", [_pair(100)])
        wait_for(lambda: b.stats["denied_dropped"] == 20 - (MAX_DENIED_PER_ID - 1) + 1,
                 timeout=30)
        assert _count(database, "m1") == MAX_DENIED_PER_ID
        # At most MAX_DENIED in all (12 here: 8 of m1, 4 more).
        b.deny("m2", [_pair(200 + n) for n in range(6)])
        wait_for(lambda: b.stats["denied_dropped"] == 14 + 2, timeout=30)
        assert _count(database, None) == 12
        # Deleted on A (B denied it): gone from the table, and B is told.
        a.publish(Action.DELETE, KeyRef("m1", KeyState.DENIED, V, OTHER))
        heard = _wait_for(b, 1)
        assert heard == [SharedKey("m1", "undenied", V, OTHER, "ma")]
        assert not b.holds(KeyRef("m1", KeyState.DENIED, V, OTHER))
        assert _count(database, "m1") == MAX_DENIED_PER_ID - 1
        # A row no master writes is dropped and counted when a master reads the table.
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("INSERT INTO raetsalt_cluster_denied (cluster_id, role, verhex, "
                         "pubhex, origin) VALUES ('c1', '../x', %s, %s, 'm?')", (V, P))
        c = ClusterKeys(params, "c1", "mc")
        try:
            wait_for(lambda: c.stats["malformed"] == 1, timeout=30)
            assert "../x" not in c.denied and len(c.denied["m1"]) == MAX_DENIED_PER_ID - 1
        finally:
            c.close()
    finally:
        a.close()
        b.close()


def _count(database: str, role: str | None) -> int:
    with psycopg.connect(database) as conn:
        sql = "SELECT count(*) FROM raetsalt_cluster_denied"
        row = conn.execute(sql + (" WHERE role = %s" if role else ""),
                           (role,) if role else ()).fetchone()
    assert row is not None
    return int(row[0])
