"""Adoption: a minion joined with one master of a cluster starts its session with
another master of the cluster by the allow alone (``raetsalt.engine.adopt``).

Two mains share one long-term identity (the cluster's keys); ``mb`` reads the keys its
cluster accepted through ``Road.adopt_key`` (a dict here, PostgreSQL on a daemon).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from raetsalt.crypto import KeyPair, Signer, random_bytes
from raetsalt.engine.events import Allowed, Joined, JoinPending, JoinRejected, MessageReceived
from raetsalt.keep.records import Acceptance, AutoMode, RoleRecord
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.fakenet import Conditions, FakeNet, RawHost
from raetsalt.testing.pair import Peer, make_peer
from raetsalt.wire import allow as layout
from raetsalt.wire.enums import BodyKind, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import pack_packet

MA = ("10.0.0.1", 4506)
MB = ("10.0.0.3", 4506)
MINION = ("10.0.0.2", 4510)
ATTACKER = ("10.0.0.66", 4510)


class Cluster:
    def __init__(self, seed: int, *, mb_keep: MemoryKeep | None = None,
                 shared_keys: bool = True) -> None:
        self.net = FakeNet(Conditions(), seed=seed)
        keep_a = MemoryKeep()
        self.ma = make_peer(keep_a, MA, "ma", main=True, seed=seed + 1)
        record = keep_a.load_local()
        assert record is not None
        keep_b = mb_keep or MemoryKeep()
        if shared_keys:
            keep_b.save_local(replace(record, name="mb", role="mb", ha=MB, puid=1, epoch=0))
        self.mb = make_peer(keep_b, MB, "mb", main=True, seed=seed + 3, auto=AutoMode.NEVER)
        self.minion = make_peer(MemoryKeep(), MINION, "minion", seed=seed + 2)
        for ha, peer in ((MA, self.ma), (MB, self.mb), (MINION, self.minion)):
            self.net.attach(ha, peer.road)
        self.accepted: dict[str, tuple[str, str]] = {}
        self.mb.road.adopt_key = self.accepted.get
        policy = self.mb.road.keys.policy  # (a daemon asks the same store: clusterkeys)
        self.mb.road.keys.policy = replace(policy, shared=self._verdict)

    def _verdict(self, role: str, verhex: str, pubhex: str) -> Acceptance | None:
        found = self.accepted.get(verhex)
        return Acceptance.ACCEPTED if found == (role, pubhex) else None

    def until(self, done: Callable[[], bool], timeout: float = 60.0) -> bool:
        return self.net.run_until(done, timeout=timeout)

    def joined_to_ma(self) -> int:
        uid = self.minion.road.connect(MA, self.net.now)
        assert self.until(lambda: bool(self.ma.of(Allowed)) and bool(self.minion.of(Allowed)))
        return uid

    def share_minion_key(self) -> RoleRecord:
        record = self.ma.road.keys.roles["minion"]
        self.accepted[record.verhex] = ("minion", record.pubhex)
        return record

    def move_to_mb(self, like: int) -> int:
        self.net.detach(MA)
        return self.minion.road.connect(MB, self.net.now, like=like)


def capture_to_mb(cluster: Cluster) -> list[bytes]:
    """Every datagram the minion sends to ``MB`` from now on (filled as it sends)."""
    sent: list[bytes] = []
    road = cluster.minion.road
    original = road.datagrams_to_send

    def capture(now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]:
        out = original(now)
        sent.extend(bytes(d) for d, to in out if to == MB)
        return out

    road.datagrams_to_send = capture  # type: ignore[method-assign]
    return sent


def allowed_on(peer: Peer, name: str) -> bool:
    return any(e.remote == name for e in peer.of(Allowed))


def test_a_minion_moves_to_another_master_with_an_allow_and_no_join() -> None:
    cluster = Cluster(seed=1)
    ma_uid = cluster.joined_to_ma()
    cluster.share_minion_key()
    joins_before = len(cluster.minion.of(Joined))
    uid = cluster.move_to_mb(ma_uid)
    assert cluster.until(lambda: allowed_on(cluster.mb, "minion"))
    assert cluster.until(lambda: cluster.minion.road.remote(uid).allowed)
    assert cluster.minion.road.remote(uid).name == "mb"  # the name came in the ack
    cluster.minion.drain()
    assert sorted(r.name for r in cluster.minion.keep.load_remotes()) == ["ma", "mb"]
    assert not cluster.mb.of(Joined) and len(cluster.minion.of(Joined)) == joins_before
    assert cluster.mb.road.stats["adopt_started"] == 1
    remote = cluster.mb.road.remote("minion")
    assert remote.ha == MINION and remote.channel is not None  # native session
    assert cluster.mb.road.keys.roles["minion"].acceptance is Acceptance.ACCEPTED
    assert [r.name for r in cluster.mb.keep.load_remotes()] == ["minion"]
    cluster.mb.road.send_message("minion", {"job": "after the move"}, cluster.net.now)
    assert cluster.until(lambda: {"job": "after the move"} in cluster.minion.received())
    cluster.minion.road.send_message(uid, {"ret": True}, cluster.net.now)
    assert cluster.until(lambda: any(e.body == {"ret": True}
                                     for e in cluster.mb.of(MessageReceived)))


def test_an_unknown_key_is_not_adopted_and_the_minion_joins() -> None:
    cluster = Cluster(seed=2)
    ma_uid = cluster.joined_to_ma()  # (its key is not in mb's store)
    cluster.move_to_mb(ma_uid)
    assert cluster.until(lambda: bool(cluster.minion.of(JoinPending)))
    assert cluster.mb.road.stats["adopt_unknown_key"] >= 1
    assert cluster.mb.road.stats["adopt_started"] == 0
    assert not cluster.mb.of(Allowed)
    assert cluster.mb.road.keys.roles["minion"].acceptance is Acceptance.PENDING


def test_a_key_rejected_on_this_master_gets_no_session() -> None:
    keep = MemoryKeep()
    cluster = Cluster(seed=3, mb_keep=keep)
    ma_uid = cluster.joined_to_ma()
    record = cluster.share_minion_key()
    # mb's own records say rejected (an operator here), whatever the store's lookup says
    cluster.mb.road.keys.roles["minion"] = RoleRecord(
        "minion", Acceptance.REJECTED, record.verhex, record.pubhex)
    cluster.move_to_mb(ma_uid)
    assert cluster.until(lambda: bool(cluster.minion.of(JoinRejected)))
    assert cluster.mb.road.stats["adopt_not_accepted_here"] >= 1
    assert not cluster.mb.of(Allowed) and "minion" not in cluster.mb.road.remotes_by_name


def test_a_denied_pair_is_not_adopted() -> None:
    cluster = Cluster(seed=4)
    ma_uid = cluster.joined_to_ma()
    record = cluster.share_minion_key()
    cluster.mb.road.keys.denied["minion"] = ((record.verhex, record.pubhex),)
    cluster.move_to_mb(ma_uid)
    assert cluster.until(lambda: cluster.mb.road.stats["adopt_denied_here"] > 0)
    # told ``unjoined``, the minion joins: the ordinary key policy decides from there
    assert cluster.until(lambda: bool(cluster.minion.of(JoinPending))
                         or bool(cluster.mb.of(Joined)))
    assert cluster.mb.road.stats["adopt_started"] == 0


def _hello(signer: Signer, plain: bytes, source_uid: int = 7) -> bytes:
    short = KeyPair.generate()
    header = Header(packet_kind=PacketKind.HELLO, transaction_kind=TransactionKind.ALLOW,
                    source_uid=source_uid, destination_uid=0, session_id=1,
                    transaction_id=1, body_kind=BodyKind.RAW, foot_kind=FootKind.NACL)
    body = layout.pack_hello(short.public, random_bytes(80), random_bytes(24), plain)
    return pack_packet(header, body, signer.sign)


def test_a_forged_adoption_hello_gets_nothing() -> None:
    """The hello names the accepted key but is signed by another: dropped, unanswered,
    no remote made; a hello naming an unknown key is unanswered too."""
    cluster = Cluster(seed=5)
    cluster.joined_to_ma()
    record = cluster.share_minion_key()
    attacker = RawHost()
    cluster.net.attach(ATTACKER, attacker)
    forger = Signer.generate()
    attacker.send(_hello(forger, record.verhex.encode()), MB)
    attacker.send(_hello(forger, forger.verify_key.hex().encode()), MB)
    cluster.until(lambda: False, timeout=5)
    assert attacker.received == []
    stats = cluster.mb.road.stats
    assert stats["drop_signature"] == 1 and stats["adopt_unknown_key"] == 1
    assert "minion" not in cluster.mb.road.remotes_by_name


def test_a_replayed_adoption_hello_leaves_nothing_behind() -> None:
    """Someone replays the minion's real hello from elsewhere: it gets a cookie it cannot
    open (the amplification limit applies), and the remote the hello made is forgotten
    when the handshake times out."""
    cluster = Cluster(seed=6)
    ma_uid = cluster.joined_to_ma()
    cluster.share_minion_key()
    sent = capture_to_mb(cluster)
    road = cluster.minion.road
    cluster.net.detach(MB)  # the minion's hello goes nowhere
    uid = cluster.move_to_mb(ma_uid)
    cluster.until(lambda: bool(sent), timeout=5)
    road.release(uid, cluster.net.now)
    cluster.net.detach(MINION)
    cluster.net.attach(MB, cluster.mb.road)
    attacker = RawHost()
    cluster.net.attach(ATTACKER, attacker)
    attacker.send(sent[0], MB)
    cluster.until(lambda: bool(attacker.received), timeout=5)
    assert attacker.received and attacker.received_bytes <= 3 * attacker.sent_bytes
    cluster.until(lambda: False, timeout=30)
    assert cluster.mb.road.stats["adopt_failed"] >= 1
    assert "minion" not in cluster.mb.road.remotes_by_name
    assert not cluster.mb.of(Allowed)


def test_a_hello_replayed_after_the_move_leaves_the_session_alone() -> None:
    cluster = Cluster(seed=7)
    ma_uid = cluster.joined_to_ma()
    cluster.share_minion_key()
    sent = capture_to_mb(cluster)
    road = cluster.minion.road
    uid = cluster.move_to_mb(ma_uid)
    assert cluster.until(lambda: road.remote(uid).allowed)
    attacker = RawHost()
    cluster.net.attach(ATTACKER, attacker)
    attacker.send(sent[0], MB)  # the adoption hello, from elsewhere
    cluster.until(lambda: False, timeout=30)
    # cookies it cannot open, within the limit for an address no handshake validated
    assert attacker.received and attacker.received_bytes <= 3 * attacker.sent_bytes
    remote = cluster.mb.road.remote("minion")
    assert remote.allowed and remote.ha == MINION
    assert cluster.mb.road.stats["adopted"] == 1
    cluster.mb.road.send_message("minion", {"job": "still here"}, cluster.net.now)
    assert cluster.until(lambda: {"job": "still here"} in cluster.minion.received())


def test_a_master_without_the_cluster_keys_is_joined() -> None:
    """The next master has keys of its own: the hello's box does not open there (dropped,
    unanswered), the adoption times out and the minion joins it as a new estate (an
    unsigned first contact), its key accepted through the cluster's store."""
    cluster = Cluster(seed=8, shared_keys=False)
    ma_uid = cluster.joined_to_ma()
    cluster.share_minion_key()
    uid = cluster.move_to_mb(ma_uid)
    assert cluster.until(lambda: cluster.minion.road.remote(uid).allowed)
    assert cluster.mb.road.stats["drop_decrypt"] >= 1 and cluster.mb.road.stats["adopted"] == 0
    assert cluster.mb.of(Joined) and cluster.minion.road.remote(uid).name == "mb"
