"""The masters' road's bookkeeping (``raetsalt.daemon.peerroad.ClusterRoad``), fed road
events directly: who holds which minion, jobs delivered for another master, and what
a peer's message cannot do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raetsalt.daemon.clusterpki import load_or_create
from raetsalt.daemon.peerroad import ClusterRoad, pillar_size
from raetsalt.engine.events import MessageReceived, PresenceChanged
from raetsalt.services import clusterwire as wire

JID = "20261126190000123456"


class Fake:
    def __init__(self) -> None:
        self.delivered: list[tuple[str, dict[str, Any]]] = []
        self.returned: list[tuple[str, dict[str, Any]]] = []
        self.now = 100.0

    def deliver(self, minion: str, body: dict[str, Any]) -> bool:
        if minion == "absent":
            return False
        self.delivered.append((minion, body))
        return True


@pytest.fixture
def road(tmp_path: Path) -> Any:
    keys, created = load_or_create(str(tmp_path / "cluster"))
    assert created
    assert load_or_create(str(tmp_path / "cluster")) == (keys, False)
    fake = Fake()
    opts = {"pki_dir": str(tmp_path / "pki"), "interface": "127.0.0.1", "id": "ma",
            "cluster_port": 0, "cluster_peers": ["127.0.0.1:9"]}
    peer = ClusterRoad(opts, keys, deliver=fake.deliver,
                       returned=lambda m, b: fake.returned.append((m, b)),
                       local=dict, clock=lambda: fake.now)
    try:
        yield peer, fake
    finally:
        peer.close()


def test_holders_jobs_and_returns(road: Any) -> None:
    peer, fake = road
    peer.handle([MessageReceived("mb", {"cluster": "held", "minions": {"m1": {"os": "x"},
                                                                       "m2": None}}),
                 MessageReceived("mc", {"cluster": "held", "minions": {"m3": None}})])
    assert peer.holder("m1") == "mb" and peer.holder("m3") == "mc"
    assert peer.elsewhere["m1"][1] == {"os": "x"}
    # a master cannot take a minion away from another's announcement
    peer.handle([MessageReceived("mc", {"cluster": "gone", "minions": ["m1"]})])
    assert peer.holder("m1") == "mb"
    # a job for our minions: delivered, its returns go back to mc
    pub = {"jid": JID, "fun": "test.ping"}
    peer.handle([MessageReceived("mc", {"cluster": "pub", "jid": JID,
                                        "minions": ["m9", "absent"], "body": pub})])
    assert fake.delivered == [("m9", pub)] and peer.stats["pub_not_held"] == 1
    assert peer.origin_of(JID) == "mc"
    fake.now += 2 * 86400
    assert peer.origin_of(JID) is None  # forgotten after a day
    # a return is taken only from the master holding that minion
    peer.handle([MessageReceived("mc", {"cluster": "ret", "minion": "m1",
                                        "body": {"jid": JID}})])
    assert fake.returned == [] and peer.stats["ret_not_held"] == 1
    peer.handle([MessageReceived("mb", {"cluster": "ret", "minion": "m1",
                                        "body": {"jid": JID}})])
    assert fake.returned == [("m1", {"jid": JID})]
    # garbage is counted, not raised
    peer.handle([MessageReceived("mb", {"cluster": "held", "minions": 5})])
    assert peer.stats["malformed"] == 1
    # a peer that stops answering takes its minions out of reach
    peer.handle([PresenceChanged("mb", False)])
    assert peer.holder("m1") is None and peer.holder("m3") == "mc"


def test_forward_queues_one_message_per_holder_and_job(road: Any) -> None:
    peer, _ = road
    peer.handle([MessageReceived("mb", {"cluster": "held", "minions": {"m1": None,
                                                                       "m2": None}})])
    body = {"jid": JID}
    assert peer.forward("m1", body) and peer.forward("m2", body)
    assert not peer.forward("m7", body)  # nobody holds it
    assert list(peer._outbox) == [("mb", JID)]
    assert peer._outbox[("mb", JID)][0] == ["m1", "m2"]


def test_cluster_key_file_is_checked_and_adopted(tmp_path: Path) -> None:
    from raetsalt.daemon.clusterpki import FILE, adopt
    from raetsalt.errors import ConfigError
    from raetsalt.keep.store import FileKeep

    keys, _ = load_or_create(str(tmp_path / "c"))
    path = tmp_path / "c" / FILE
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        load_or_create(str(tmp_path / "c"))
    path.chmod(0o600)
    path.write_text('{"sighex": "zz"}')
    with pytest.raises(ConfigError, match="sighex"):
        load_or_create(str(tmp_path / "c"))
    keep = tmp_path / "keep"
    adopt(str(keep), keys, name="ma", ha=("127.0.0.1", 1))
    record = FileKeep(str(keep)).load_local()
    assert record is not None and (record.sighex, record.prihex) == (keys.sighex, keys.prihex)
    other, _ = load_or_create(str(tmp_path / "d"))
    adopt(str(keep), other, name="ma", ha=("127.0.0.1", 1))  # replaced, name kept
    record = FileKeep(str(keep)).load_local()
    assert record is not None and record.name == "ma" and record.sighex == other.sighex


def test_a_peer_back_without_a_new_session_is_asked_for_its_minions(road: Any) -> None:
    peer, _ = road
    sent: list[tuple[str, dict[str, Any]]] = []
    peer._send = lambda remote, body: sent.append((remote, body))
    peer.local = lambda: {"m5": None}
    peer.handle([MessageReceived("mb", {"cluster": "held", "minions": {"m1": None}})])
    peer.handle([PresenceChanged("mb", True)])
    assert sent == []  # never lost: nothing to ask
    peer.handle([PresenceChanged("mb", False)])
    assert peer.holder("m1") is None
    peer.handle([PresenceChanged("mb", True)])
    assert sent == [("mb", {"cluster": "ask"})]
    peer.handle([MessageReceived("mb", {"cluster": "ask"})])  # and it answers one
    assert sent[1] == ("mb", {"cluster": "held", "minions": {"m5": None}})


def test_a_pillar_counts_only_while_its_master_holds_the_minion(road: Any) -> None:
    peer, _ = road
    peer.handle([MessageReceived("mb", {"cluster": "held", "minions": {"m1": None}}),
                 MessageReceived("mb", {"cluster": "pillar", "minions": {"m1": {"t": "b"}}}),
                 MessageReceived("mc", {"cluster": "pillar", "minions": {"m2": {"t": "r"}}})])
    assert peer.pillar_of("m1") == {"t": "b"}
    assert peer.pillar_of("m2") is None  # mc does not hold m2
    # the minion moves to mc: mb's pillar of it no longer counts
    peer.handle([MessageReceived("mc", {"cluster": "held", "minions": {"m1": None}})])
    assert peer.pillar_of("m1") is None
    peer.handle([MessageReceived("mc", {"cluster": "pillar", "minions": {"m1": {"t": "c"}}})])
    assert peer.pillar_of("m1") == {"t": "c"}
    peer.handle([MessageReceived("mc", {"cluster": "gone", "minions": ["m1"]})])
    assert peer.pillar_of("m1") is None and "m1" not in peer.pillars
    # malformed: counted
    peer.handle([MessageReceived("mc", {"cluster": "pillar", "minions": {"m1": [1]}})])
    assert peer.stats["malformed"] == 1
    # a pillar too large to share is not sent, and said
    peer.announce_pillar("m5", {"blob": "x" * (wire.MAX_PILLAR + 1)})
    assert peer.stats["pillar_not_shared"] == 1
    assert pillar_size({"a": 1}) == len('{"a": 1}')
    assert pillar_size({1j: 1}) is None  # type: ignore[dict-item]
