"""An estate that only takes its masters' datagrams (``Road.restrict_sources``), on the
seeded FakeNet: a forged join with the minion's own master's keys, a copy of the master's
real traffic and garbage, all from another address, are dropped before parsing, counted,
answered with nothing; the master's session carries on; a restarted main still calls the
minion back (recall) from the address the minion dialed."""

from __future__ import annotations

from raetsalt.drops import DropReason
from raetsalt.engine.events import Allowed, PacketDropped
from raetsalt.testing.fakenet import RawHost
from raetsalt.testing.forge import join_request
from raetsalt.testing.pair import MAIN_HA, MINION_HA, road_pair

STRANGER = ("10.6.6.6", 6666)
QUIET = {"presence_period": 30.0}
"""A minion that would not probe its main for 30 s: only the main's call brings it back."""


def test_a_restricted_minion_takes_its_main_only_and_answers_nobody_else() -> None:
    pair = road_pair(seed=7, minion_config=QUIET, main_config=QUIET)
    minion = pair.minion.road
    minion.restrict_sources(frozenset({MAIN_HA}))
    assert pair.connect()
    stranger = RawHost()
    pair.net.attach(STRANGER, stranger)
    keys = pair.minion_keep.load_role("main")
    assert keys is not None
    forged = join_request("main", verhex=keys.verhex, pubhex=keys.pubhex, source_uid=9,
                          destination_uid=0, tid=1)
    rx = minion.stats["rx"]
    for data in (forged, b"\x00" * 40, b"ri RAET\npl 0014\nhl 14\nbogus\n\n"):
        stranger.send(data, MINION_HA)
    minion.send_message("main", {"still": "here"}, pair.net.now)
    assert pair.until(lambda: {"still": "here"} in pair.main.received(), timeout=5)
    drops = pair.minion.of(PacketDropped)
    assert [d.reason for d in drops] == [DropReason.FOREIGN_SOURCE] * 3
    assert minion.stats["drop_foreign_source"] == 3 and minion.stats["rx"] > rx
    assert not minion.stats["drop_header"] and not minion.stats["drop_length"]
    pair.until(lambda: False, timeout=10)
    assert stranger.received_bytes == 0  # nothing answered to it, ever
    # A restarted main calls the minion back from the address the minion dialed.
    allowed = len(pair.minion.of(Allowed))
    pair.restart_main(**QUIET)
    assert pair.until(lambda: len(pair.minion.of(Allowed)) > allowed, timeout=30)
    assert pair.main.road.stats["recall_allow"] >= 1
