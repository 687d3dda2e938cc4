"""Handshake crypto answered ahead (engine/prework.py, engine/precrypt.py), on a manual
clock: the main's road is driven as a driver with crypto threads drives it (each
datagram's ``crypto_jobs`` done first, the answers given with ``take_crypto``).  The
road uses the answers for the handshakes of a cold start and of a restart's call-back,
comes to the same sessions and events as a road that computes everything itself, and
never uses an answer for inputs other than those it was computed from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from helpers.fleet import QUIET, fleet

from raetsalt.crypto.jobs import Agree, Answer, CryptoJob, Verify, perform
from raetsalt.drops import DropReason
from raetsalt.engine.events import Event
from raetsalt.engine.road import Road
from raetsalt.testing.pair import MAIN_HA, Pair, Peer, road_pair
from raetsalt.wire.enums import PacketKind
from raetsalt.wire.packet import parse_packet_untrusted


@dataclass
class Ahead:
    """``road`` behind a driver that does each datagram's crypto before the road sees
    it; ``lie`` turns the answers given into others (a test of what the road trusts)."""

    road: Road
    lie: bool = False
    given: Counter[str] = field(default_factory=Counter)

    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None:
        jobs = self.road.crypto_jobs(data, address)
        answers: list[Answer] = [perform(job) for job in jobs]
        if self.lie:
            answers = [not a if isinstance(a, bool) else a for a in answers]
        for job in jobs:
            self.given[type(job).__name__] += 1
        self.road.take_crypto(jobs, answers)
        self.road.receive_datagram(data, address, now)
        self.road.take_crypto([], [])

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]:
        return list(self.road.datagrams_to_send(now))  # type: ignore[arg-type]

    def get_timer(self) -> float | None:
        return self.road.get_timer()

    def handle_timer(self, now: float) -> None:
        self.road.handle_timer(now)


def _fleet(count: int, *, ahead: bool) -> tuple[Pair, list[Peer], Ahead | None]:
    drivers: list[Ahead] = []

    def attach(pair: Pair) -> None:
        drivers.append(Ahead(pair.main.road))
        pair.net.attach(MAIN_HA, drivers[0])

    pair, minions = fleet(count, subnet="10.0.3", before=attach if ahead else None)
    return pair, minions, drivers[0] if drivers else None


def _story(events: list[Event]) -> list[tuple[str, str]]:
    return [(type(e).__name__, str(getattr(e, "name", getattr(e, "remote", ""))))
            for e in events]


def test_a_cold_start_takes_every_allow_answer_from_ahead_and_computes_none_itself() -> None:
    pair, minions, driver = _fleet(30, ahead=True)
    assert driver is not None
    stats = pair.main.road.stats
    # Per allow: the hello's and the initiate's signatures, the hello's long-term box,
    # the session box and the vouch's box (and the final ack's signature).
    assert driver.given["Verify"] >= 2 * len(minions)
    assert driver.given["Agree"] >= 3 * len(minions)
    assert stats["crypto_ahead"] >= 5 * len(minions)
    assert stats["crypto_inline"] == 0


def test_answers_ahead_change_nothing_the_road_decides() -> None:
    plain, _, _ = _fleet(12, ahead=False)
    ahead, _, _ = _fleet(12, ahead=True)
    assert _story(ahead.main.events) == _story(plain.main.events)
    for key in set(plain.main.road.stats) | set(ahead.main.road.stats):
        if not key.startswith("crypto_"):
            assert ahead.main.road.stats[key] == plain.main.road.stats[key], key
    assert ahead.net.now == plain.net.now


def test_a_restarted_main_calling_back_takes_the_cookies_crypto_from_ahead() -> None:
    pair, minions, _ = _fleet(20, ahead=False)
    pair.restart_main(recall_window=8, **QUIET)
    main = pair.main.road
    driver = Ahead(main)
    pair.net.attach(MAIN_HA, driver)
    assert pair.until(lambda: all(main.remote(p.road.name).allowed for p in minions),
                      timeout=30.0)
    assert main.stats["recall_allow"] == len(minions)
    # The main initiates: each cookie's signature, its session box and the vouch's box
    # come from ahead; the hello's box (made when the call starts, on a timer) does not.
    assert driver.given["Agree"] >= 2 * len(minions)
    assert main.stats["crypto_ahead"] >= 3 * len(minions)
    assert main.stats["crypto_inline"] <= len(minions)


def test_an_answer_is_used_only_for_the_inputs_it_was_computed_from() -> None:
    pair, _, _ = _fleet(1, ahead=False)
    main, minion = pair.main.road, pair.minion.road
    minion.allow(next(iter(minion.remotes)), pair.net.now)  # a new handshake: a hello
    (genuine, _), = [(bytes(d), a) for d, a in minion.datagrams_to_send(pair.net.now)]
    assert parse_packet_untrusted(genuine).header.packet_kind == PacketKind.HELLO
    jobs = main.crypto_jobs(genuine, minion.ha)
    assert [type(job) for job in jobs] == [Verify, Agree]
    main.admission.loaded = True  # a hello the road will answer "busy": no work ahead
    assert main.crypto_jobs(genuine, minion.ha) == []
    main.admission.reserved[minion.ha] = pair.net.now + 5.0  # unless its join holds a place
    assert main.crypto_jobs(genuine, minion.ha) == jobs
    main.admission.loaded = False
    del main.admission.reserved[minion.ha]
    forged = bytearray(genuine)
    forged[-1] ^= 1  # the signature's last byte
    main.take_crypto(jobs, [True, perform(jobs[1])])  # for the genuine hello only
    before = Counter(main.stats)
    main.receive_datagram(bytes(forged), minion.ha, pair.net.now)
    signature = f"drop_{DropReason.SIGNATURE.value}"
    assert main.stats[signature] == before[signature] + 1
    assert main.stats["crypto_inline"] == before["crypto_inline"] + 1
    assert main.stats["crypto_ahead"] == before["crypto_ahead"]
    main.receive_datagram(genuine, minion.ha, pair.net.now)  # the genuine one: from ahead
    assert main.stats["crypto_ahead"] == before["crypto_ahead"] + 2
    assert main.stats[signature] == before[signature] + 1


def test_answers_of_the_wrong_type_or_beyond_the_bound_are_not_held() -> None:
    road = road_pair().main.road
    jobs: list[CryptoJob] = [Verify(b"k" * 32, b"m", b"s" * 64), Agree(b"a" * 32, b"b" * 32),
                             Agree(b"c" * 32, b"d" * 32)]
    road.take_crypto(jobs, [b"x" * 32, True, b"short"])
    assert len(road.precomputed) == 0
    road.take_crypto(jobs, [False, None, b"y" * 32])
    assert len(road.precomputed) == 3
    road.take_crypto([], [])
    assert len(road.precomputed) == 0


def test_a_lying_driver_is_believed_for_exactly_its_inputs() -> None:
    """The answers are an input the road trusts (the driver computes them from the
    datagram itself): wrong ones make a cold start fail, and nothing else happens."""
    pair = road_pair(minion_config=QUIET, main_config={"handshake_rate": 0.0, **QUIET})
    driver = Ahead(pair.main.road, lie=True)
    pair.net.attach(MAIN_HA, driver)
    assert not pair.connect(timeout=10.0)
    assert pair.main.road.stats[f"drop_{DropReason.SIGNATURE.value}"] > 0
    assert driver.given["Verify"] > 0
