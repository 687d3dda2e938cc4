"""``Tap``: a road as FakeNet sees it, recording every datagram it sends and receives
(for tests that look at what went over the wire)."""

from __future__ import annotations

from raetsalt.engine.road import Road


class Tap:
    """Attach ``Tap(road)`` to a FakeNet in place of ``road``."""

    def __init__(self, road: Road) -> None:
        self.road = road
        self.sent: list[bytes] = []
        self.received: list[bytes] = []

    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None:
        self.received.append(bytes(data))
        self.road.receive_datagram(data, address, now)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]:
        out = self.road.datagrams_to_send(now)
        self.sent.extend(bytes(d) for d, _ in out)
        return out

    def get_timer(self) -> float | None:
        return self.road.get_timer()

    def handle_timer(self, now: float) -> None:
        self.road.handle_timer(now)
