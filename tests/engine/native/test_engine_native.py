"""Native-profile negotiation (docs/native-profile.md): chosen inside the authenticated handshake.

Two raetsalt ends pick native; either end with ``native=False`` (and every raet 0.6.8
peer, see tests/interop) gets the raet format; tampering with the handshake fails closed
instead of falling back.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from raetsalt.engine.events import Allowed
from raetsalt.engine.native.frames import is_native
from raetsalt.testing.pair import MAIN_HA, Pair, road_pair
from raetsalt.wire.enums import PacketKind, TransactionKind
from raetsalt.wire.packet import parse_packet_untrusted


@pytest.mark.parametrize(
    ("main_native", "minion_native", "expected"),
    [(True, True, "native"), (True, False, "raet"), (False, True, "raet"), (False, False, "raet")],
)
def test_profile_is_native_only_when_both_offer_it(
    main_native: bool, minion_native: bool, expected: str
) -> None:
    pair = road_pair(main_config={"native": main_native}, minion_config={"native": minion_native})
    assert pair.connect()
    assert [e.profile for e in pair.main.of(Allowed)] == [expected]
    assert [e.profile for e in pair.minion.of(Allowed)] == [expected]
    sent: list[bytes] = []
    original = pair.minion.road.datagrams_to_send
    pair.minion.road.datagrams_to_send = lambda now: _tap(original(now), sent)  # type: ignore[method-assign]
    pair.minion.road.send_message("main", {"hello": "profile"}, pair.net.now)
    assert pair.until(lambda: pair.main.received() == [{"hello": "profile"}])
    assert any(is_native(d) for d in sent) == (expected == "native")


def _tap(
    out: list[tuple[bytes, tuple[str, int]]], seen: list[bytes]
) -> list[tuple[bytes, tuple[str, int]]]:
    seen.extend(data for data, _ in out)
    return out


def _tamper(pair: Pair, side: str, kind: PacketKind) -> Callable[[], int]:
    """Flip one byte in the body of every allow packet of ``kind`` that ``side`` sends."""
    road = getattr(pair, side).road
    original = road.datagrams_to_send
    count = [0]

    def tampered(now: float) -> list[tuple[bytes, tuple[str, int]]]:
        out = []
        for data, address in original(now):
            if not is_native(data):
                header = parse_packet_untrusted(data).header
                if header.transaction_kind == TransactionKind.ALLOW and header.packet_kind == kind:
                    buf = bytearray(data)
                    buf[-100] ^= 0x01  # inside the body, before the signature
                    data = bytes(buf)
                    count[0] += 1
            out.append((data, address))
        return out

    road.datagrams_to_send = tampered
    return lambda: count[0]


@pytest.mark.parametrize(
    ("side", "kind"), [("main", PacketKind.COOKIE), ("minion", PacketKind.INITIATE)]
)
def test_tampered_negotiation_fails_closed(side: str, kind: PacketKind) -> None:
    pair = road_pair()
    tampered = _tamper(pair, side, kind)
    pair.minion.road.connect(MAIN_HA, pair.net.now, name="main")
    pair.until(lambda: False, timeout=30)
    assert tampered() >= 1
    # No session at all, and certainly not a raet one: nothing falls back.
    assert not pair.main.of(Allowed) and not pair.minion.of(Allowed)
    victim = pair.minion if side == "main" else pair.main
    assert victim.road.stats["drop_signature"] >= 1
