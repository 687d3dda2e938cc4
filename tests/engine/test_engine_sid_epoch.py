"""Session ids are reserved for every remote by one write per start (remote.SID_BLOCK):
a restarted main rewrites no remote's record to allow it again, and still never uses a
session id a remote may hold from an earlier run, however often it restarts (a crash
before any remote's record was rewritten included)."""

from __future__ import annotations

import json
from pathlib import Path

from raetsalt.engine.events import Allowed
from raetsalt.engine.remote import SID_BLOCK, id_after
from raetsalt.keep.records import KeepWrite, LocalRecord, RemoteRecord
from raetsalt.keep.store import FileKeep, MemoryKeep
from raetsalt.testing.pair import MAIN_HA, Pair, Peer, make_peer, road_pair


def _fleet(count: int) -> tuple[Pair, list[Peer]]:
    pair = road_pair(main_config={"handshake_rate": 0.0})
    assert pair.connect()
    minions = [pair.minion]
    for index in range(count - 1):
        ha = (f"10.0.3.{index}", 4510)
        peer = make_peer(MemoryKeep(), ha, f"minion{index}", seed=index)
        pair.net.attach(ha, peer.road)
        peer.road.connect(MAIN_HA, pair.net.now)
        minions.append(peer)
    assert pair.until(lambda: all(p.of(Allowed) for p in minions), timeout=60.0)
    return pair, minions


def _written(peer: Peer) -> list[KeepWrite]:
    """From now on, every write ``peer`` commits to its keep (returned list grows)."""
    writes: list[KeepWrite] = []
    keep, commit = peer.keep, peer.keep.commit

    def record(batch: list[KeepWrite]) -> None:
        writes.extend(batch)
        commit(batch)

    keep.commit = record  # type: ignore[method-assign]
    return writes


def _locals(writes: list[KeepWrite]) -> list[LocalRecord]:
    return [w.value for w in writes if isinstance(w.value, LocalRecord)]


def _remotes(writes: list[KeepWrite]) -> list[RemoteRecord]:
    return [w.value for w in writes if isinstance(w.value, RemoteRecord)]


def _restart_and_reconnect(pair: Pair, minions: list[Peer]) -> list[KeepWrite]:
    """Restart the main; when every minion is allowed again, what the main wrote."""
    before = [len(p.of(Allowed)) for p in minions]
    pair.main.drain()
    writes = _written(pair.main)
    pair.restart_main(recall_window=64)
    assert pair.until(lambda: all(len(p.of(Allowed)) > b for p, b in
                                  zip(minions, before, strict=True)), timeout=30.0)
    pair.main.drain()
    return writes


def test_a_restart_writes_our_record_once_and_no_remote_record() -> None:
    pair, minions = _fleet(12)
    epoch = pair.main.keep.load_state().local.epoch  # type: ignore[union-attr]
    held = {p.road.name: p.road.remote("main").rsid for p in minions}
    writes = _restart_and_reconnect(pair, minions)
    main = pair.main
    assert [r.epoch for r in _locals(writes)] == [epoch + 1]
    assert _remotes(writes) == []  # 12 allows, no remote record rewritten
    for peer in minions:
        sid = main.road.remote(peer.road.name).sid
        assert id_after(sid, held[peer.road.name])  # later than any sid of the last run
        assert peer.road.remote("main").rsid == sid  # and the minion took it


def test_restarts_without_any_remote_write_never_repeat_a_session_id() -> None:
    """Every run's sids lie after every earlier run's, though no remote record is
    written in any of them: what a crash at any point leaves is this keep."""
    pair, minions = _fleet(3)
    pair.main.drain()
    stored = {r.name: r for r in pair.main.keep.load_remotes()}
    used: dict[str, list[int]] = {p.road.name: [pair.main.road.remote(p.road.name).sid]
                                  for p in minions}
    for _ in range(4):
        assert _remotes(_restart_and_reconnect(pair, minions)) == []
        for peer in minions:
            used[peer.road.name].append(pair.main.road.remote(peer.road.name).sid)
    assert {r.name: r for r in pair.main.keep.load_remotes()} == stored
    for sids in used.values():
        assert all(id_after(b, a) for a, b in zip(sids, sids[1:], strict=False))
        assert all(b - a <= SID_BLOCK for a, b in zip(sids, sids[1:], strict=False))


def test_using_up_a_block_in_one_run_rewrites_the_record_once() -> None:
    pair, _ = _fleet(1)
    [local] = _locals(_restart_and_reconnect(pair, [pair.minion]))
    pair.main.drain()
    writes = _written(pair.main)
    main = pair.main.road
    remote = main.remote("minion")
    epoch = local.epoch
    remote.sid = (remote.sid_ceiling(epoch) - 2) % (1 << 32)  # two ids left in the block
    for _ in range(3):
        main.allow(remote.uid, pair.net.now)
        assert pair.until(lambda: not remote.transactions, timeout=10.0)
    pair.main.drain()
    written = _remotes(writes)
    assert len(written) == 1 and written[0].epoch == epoch
    assert written[0].sid == remote.sid - 1 + SID_BLOCK  # reserved at the block's end
    last = remote.sid
    pair.restart_main()
    assert id_after(pair.main.road.remote("minion").sid, last)


def test_a_record_from_a_later_epoch_than_ours_still_moves_sids_forward() -> None:
    """Our own record older than a remote's (restored from a backup, say): this start's
    epoch is past both, and the remote's sids continue after its reservation."""
    pair, _ = _fleet(1)
    keep = pair.main.keep
    local = keep.load_local()
    assert local is not None
    [saved] = keep.load_remotes()
    keep.save_remote(RemoteRecord(**{**vars(saved), "epoch": local.epoch + 50}))
    writes = _written(pair.main)
    pair.restart_main()
    pair.main.drain()
    road = pair.main.road
    assert [r.epoch for r in _locals(writes)] == [local.epoch + 51]
    assert not id_after(saved.sid, road.remote("minion").sid)
    assert road.remote("minion").sid == saved.sid  # the start of the new epoch's block


def test_keep_documents_without_an_epoch_load_and_bad_epochs_are_refused(
    tmp_path: Path,
) -> None:
    keep = FileKeep(tmp_path)
    record = RemoteRecord("m1", "m1", 2, 3, ("10.0.0.1", 4510), 77, False, 0, True, epoch=5)
    keep.save_remote(record)
    path = keep.path_of("remote", "m1")
    doc = json.loads(path.read_text())
    assert doc["epoch"] == 5
    del doc["epoch"]  # written before epochs existed
    path.write_text(json.dumps(doc))
    assert keep.load_remotes() == [RemoteRecord(**{**vars(record), "epoch": 0})]
    for bad in (-1, True, 1 << 63, "5", 1.5):
        path.write_text(json.dumps({**doc, "epoch": bad}))
        state = keep.load_state()
        assert state.remotes == [] and len(state.problems) == 1, bad
