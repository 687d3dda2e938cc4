"""Key rotation inside a native session (native/rekey.py), under load, both ends, both
directions: nothing lost, duplicated or held up; old keys dropped and useless after."""

from __future__ import annotations

import pytest

from raetsalt.crypto import KeyPair, SessionBox
from raetsalt.engine.events import Allowed, MessageDelivered
from raetsalt.engine.native.frames import KEY_ACCEPT_FRAME, KEY_FRAME
from raetsalt.engine.native.rekey import KeyRing
from raetsalt.errors import BadPacket
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import Pair, road_pair

ONE_WAY = 0.025


def _pair(conditions: Conditions, seed: int = 0, **rekey: float) -> Pair:
    config = {"native": True, **rekey}
    pair = road_pair(conditions, seed=seed, main_config=config, minion_config=config)
    assert pair.connect()
    return pair


def _load(pair: Pair, count: int) -> float:
    """``count`` messages each way (large and small mixed) at once; returns the seconds
    until all arrived, after checking each arrived once and in order per stream."""
    start = pair.net.now
    up = [{"up": n, "pad": "u" * (40_000 if n % 4 == 0 else 200)} for n in range(count)]
    down = [{"down": n, "pad": "d" * (40_000 if n % 4 == 1 else 200)} for n in range(count)]
    for body in up:
        pair.minion.road.send_message("main", body, start)
    for body in down:
        pair.main.road.send_message("minion", body, start)
    assert pair.until(
        lambda: len(pair.main.received()) == count and len(pair.minion.received()) == count,
        timeout=60,
    )
    took = pair.net.now - start
    pair.until(lambda: False, timeout=2.0)  # late duplicates would show now
    for got, sent in ((pair.main.received(), up), (pair.minion.received(), down)):
        assert len(got) == len(sent)
        big = [b for b in sent if len(b["pad"]) > 16 * 1024]  # type: ignore[arg-type]
        small = [b for b in sent if len(b["pad"]) <= 16 * 1024]  # type: ignore[arg-type]
        assert [b for b in got if b in big] == big  # each stream in order
        assert [b for b in got if b in small] == small
    return took


def test_rotation_on_a_timer_under_load_loses_and_delays_nothing() -> None:
    clean = Conditions(latency=ONE_WAY)
    base = _load(_pair(clean), 200)
    pair = _pair(clean, native_rekey_interval=0.1)
    took = _load(pair, 200)
    for side in ("main", "minion"):
        channel = pair.channel(side)
        assert channel.keys.rotations >= 3, side  # several rotations during the load
        assert pair.main.road.stats["native_retransmit"] == 0  # nothing was lost ...
        assert pair.minion.road.stats["native_retransmit"] == 0
    assert pair.main.road.stats["drop_decrypt"] == pair.minion.road.stats["drop_decrypt"] == 0
    assert took <= base + 2 * ONE_WAY  # ... or held up by more than a round trip
    # Both ends rotated in step and hold at most one key besides the current one.
    main, minion = pair.channel("main"), pair.channel("minion")
    assert abs(main.keys.epoch - minion.keys.epoch) <= 1
    # Both ends started rotations (native_rekey counts the offers that were answered).
    assert pair.main.road.stats["native_rekey"] > 0 and pair.minion.road.stats["native_rekey"] > 0


def test_rotation_after_a_packet_count_on_a_lossy_net() -> None:
    lossy = Conditions(latency=0.005, loss=0.05, duplicate=0.02, jitter=0.003)
    pair = _pair(lossy, seed=5, native_rekey_packets=150)
    _load(pair, 200)
    rotations = pair.channel("main").keys.rotations + pair.channel("minion").keys.rotations
    assert rotations >= 4  # offers and answers were lost too; the rotations completed
    assert not pair.main.of(Allowed)[1:]  # no new handshake was needed


def test_the_previous_key_is_dropped_and_opens_nothing_afterwards() -> None:
    pair = _pair(Conditions(latency=ONE_WAY), native_rekey_interval=0.5)
    minion = pair.channel("minion")
    early = bytes(minion.seal_packet(b"\x05"))  # sealed under the first key, held back
    first = minion.keys.box
    pair.until(lambda: pair.channel("main").keys.rotations >= 2, timeout=10)
    pair.until(lambda: False, timeout=1.0)
    main = pair.channel("main")
    assert first not in (main.keys.box, main.keys.previous, main.keys.next)
    assert first not in (minion.keys.box, minion.keys.previous, minion.keys.next)
    drops = pair.main.road.stats["drop_decrypt"]
    pair.main.road.receive_datagram(early, pair.minion.road.ha, pair.net.now)
    assert pair.main.road.stats["drop_decrypt"] == drops + 1
    # The session itself goes on.
    pair.main.road.send_message("minion", {"after": "rotations"}, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(MessageDelivered)), timeout=5)
    assert {"after": "rotations"} in pair.minion.received()


def _rings(now: float = 0.0) -> tuple[KeyRing, KeyRing]:
    a_short, b_short = KeyPair.generate(), KeyPair.generate()
    a = KeyRing(
        SessionBox(a_short.secret, b_short.public), now, interval=1.0, packets=100, initiator=True
    )
    b = KeyRing(
        SessionBox(b_short.secret, a_short.public), now, interval=1.0, packets=100, initiator=False
    )
    return a, b


def test_simultaneous_offers_resolve_to_the_initiators() -> None:
    a, b = _rings()
    offer_a, offer_b = a.on_timer(1.0, 0.1), b.on_timer(1.0, 0.1)
    assert offer_a is not None and offer_b is not None
    _, epoch, pub_b = KEY_FRAME.unpack(offer_b)
    assert a.on_offer(epoch, pub_b, 0.0) is None  # the initiator keeps its own offer
    _, epoch, pub_a = KEY_FRAME.unpack(offer_a)
    answer = b.on_offer(epoch, pub_a, 0.0)  # the responder drops its own and accepts
    assert answer is not None and answer[0] == KEY_ACCEPT_FRAME
    assert b.on_offer(epoch, pub_a, 0.0) == answer  # a repeated offer gets the same answer
    _, epoch, pub = KEY_FRAME.unpack(answer)
    assert a.on_accept(epoch, pub, now=1.1)
    assert not a.on_accept(epoch, pub, now=1.2)  # late repeat: nothing more
    nonce = bytes(24)
    sealed = a.box.encrypt(b"after", nonce)
    assert b.next is not None and b.next.decrypt_untrusted(sealed, nonce) == b"after"


@pytest.mark.parametrize("epoch", [0, 2, 99])
def test_offers_of_other_epochs_switch_nothing(epoch: int) -> None:
    a, b = _rings()
    public = KeyPair.generate().public
    if epoch == 0:
        assert b.on_offer(epoch, public, 0.0) is None
    else:
        with pytest.raises(BadPacket, match="skips an epoch"):
            b.on_offer(epoch, public, 0.0)
    assert b.next is None and b.epoch == 0


def test_a_low_order_key_in_an_offer_is_a_counted_drop_not_a_crash() -> None:
    _, b = _rings()
    with pytest.raises(BadPacket, match="unusable key"):
        b.on_offer(1, bytes(32), 0.0)  # the all-zero point: no shared secret
    assert b.next is None and b.answer == b""


def test_a_datagram_sealed_for_a_key_frame_does_not_shift_the_next_bursts_records() -> None:
    # Key and path frames go in datagrams of their own (seal_packet, no record); the bulk
    # burst after one must still file each packet's record under its own counter, or an
    # ack of one packet marks another's frames delivered (a message then never arrives).
    pair = _pair(Conditions(latency=ONE_WAY))
    channel = pair.channel("minion")
    channel.seal_packet(b"")  # as a KEY_CONFIRM answer would be
    pair.minion.road.send_message("main", {"big": "x" * 300_000}, pair.net.now)
    pair.minion.road.datagrams_to_send(pair.net.now)  # the burst
    recovery = channel.recovery
    last = recovery.record(recovery.counter)
    assert last is not None and last.frames  # the newest counter's own record
    first = recovery.oldest_unacked()
    records = [recovery.record(counter) for counter in range(first, recovery.counter + 1)]
    assert all(record is None or record.frames for record in records)


def test_a_rotation_starts_at_the_instant_its_timer_names() -> None:
    # 150.61...3 + 120 rounds so that the sum less 150.61...3 is below 120: compared
    # that way, the rotation was not due when its timer fired, and the timer fired at
    # that instant without end.
    installed = 150.61642402352393
    a_short, b_short = KeyPair.generate(), KeyPair.generate()
    ring = KeyRing(SessionBox(a_short.secret, b_short.public), installed, interval=120.0,
                   packets=100, initiator=True, reject_after=120.0 * 3)
    due = ring.get_timer(0.1)
    assert due == installed + 120.0
    assert ring.on_timer(due, 0.1) is not None  # the offer of the next key
    assert not ring.expired(installed + 360.0 - 1e-6) and ring.expired(installed + 360.0)
