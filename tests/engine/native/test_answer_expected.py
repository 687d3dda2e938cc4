"""``Road.answer_within``: after a send, how soon the answer of a little request/response
traffic is due (the smoothed round trip), so a driver may poll for it instead of
sleeping; never for bulk transfers, nor before a round trip was measured."""

from __future__ import annotations

from raetsalt.engine.events import MessageDelivered
from raetsalt.engine.native.channel import QUICK_IN_FLIGHT
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import Pair, road_pair


def _connected() -> Pair:
    pair = road_pair(Conditions(latency=0.0004))
    assert pair.connect()
    return pair


def _delivered(pair: Pair, body: dict[str, object]) -> None:
    """The minion sends ``body`` and the network runs until it is confirmed."""
    before = len(pair.minion.of(MessageDelivered))
    pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: len(pair.minion.of(MessageDelivered)) > before)


def test_a_small_message_awaits_its_answer_within_the_round_trip() -> None:
    pair = _connected()
    _delivered(pair, {"warm": 1})  # a round trip measured
    channel = pair.channel("minion")
    road = pair.minion.road
    road.send_message("main", {"ping": 2}, pair.net.now)
    assert road.datagrams_to_send(pair.net.now)
    assert 0 < channel.recovery.bytes_in_flight <= QUICK_IN_FLIGHT
    assert road.answer_within == channel.recovery.srtt
    # The path's round trip is 2 x 0.4 ms (and the acks' delay): what was measured.
    assert 0.0008 <= road.answer_within < 0.1
    # A call that flushes nothing says nothing is due from it.
    road.datagrams_to_send(pair.net.now)
    assert road.answer_within is None


def test_a_bulk_transfer_is_not_request_response_traffic() -> None:
    pair = _connected()
    _delivered(pair, {"warm": 1})
    road = pair.minion.road
    road.send_message("main", {"bulk": "x" * (4 * QUICK_IN_FLIGHT)}, pair.net.now)
    assert road.datagrams_to_send(pair.net.now)
    # The first flight is what the congestion window allows; the rest waits its turn.
    assert pair.channel("minion").scheduler.has_data()
    assert road.answer_within is None


def test_nothing_is_expected_before_a_round_trip_was_measured() -> None:
    pair = _connected()
    channel = pair.channel("minion")
    if channel.recovery.rtt_sampled:  # the handshake's packets may have measured one
        channel.recovery.rtt_sampled = False
    road = pair.minion.road
    road.send_message("main", {"first": 1}, pair.net.now)
    assert road.datagrams_to_send(pair.net.now)
    assert road.answer_within is None
