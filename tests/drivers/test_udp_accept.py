"""An estate that only dials out (a minion): ``RoadStack(accept=...)`` on real sockets.

``"connected"``: the socket is connected to the one address dialed, so the kernel refuses
every other source (the sender gets "connection refused", as at a closed port) and the
session (raet and native profiles, a megabyte both ways, a restarted main calling it back)
works as before.  ``"dialed"``: datagrams from addresses not dialed are dropped before
parsing and counted (``drop_foreign_source``).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.ports import refused_from
from test_udp import Pump, connect, exchange, of, open_pair, pattern_body

from raetsalt.daemon.service import road_binding
from raetsalt.drivers.udp import RoadStack, route_source
from raetsalt.engine.events import Allowed, DropReason, PacketDropped
from raetsalt.engine.road import RoadConfig
from raetsalt.errors import LocalError
from raetsalt.keep.records import AutoMode

pytestmark = pytest.mark.integration


@pytest.fixture(params=["raet", "native"])
def config(request: pytest.FixtureRequest) -> RoadConfig:
    return RoadConfig(native=request.param == "native")


def _main(path: Path, config: RoadConfig, port: int = 0) -> RoadStack:
    return RoadStack(path, ("127.0.0.1", port), name="main", main=True, auto=AutoMode.ONCE,
                     config=config)


def _minion(path: Path, config: RoadConfig, accept: str) -> RoadStack:
    return RoadStack(path, ("127.0.0.1", 0), name="minion", auto=AutoMode.ONCE, config=config,
                     accept=accept)  # type: ignore[arg-type]


@pytest.fixture
def connected(tmp_path: Path, config: RoadConfig) -> Iterator[tuple[Pump, RoadStack, RoadStack]]:
    with open_pair(tmp_path, config, "connected") as opened:
        yield opened


def test_a_connected_minion_is_refused_by_the_kernel_to_everyone_else(connected) -> None:
    pump, main, minion = connected
    connect(pump, main, minion)
    assert minion.sock.getpeername() == main.address
    assert minion.road.sources == frozenset({main.address})
    for size in (100, 1024 * 1024):
        exchange(pump, minion, main, "main", pattern_body(size, f"up{size}"))
        exchange(pump, main, minion, "minion", pattern_body(size, f"down{size}"))
    assert refused_from("127.0.0.2", minion.address)
    assert refused_from("127.0.0.1", minion.address)  # same host, another port
    pump.until(lambda ev: True)
    assert not minion.road.stats["drop_header"]  # never read: nothing to parse
    exchange(pump, minion, main, "main", pattern_body(100, "after"))


def test_a_restarted_main_calls_a_connected_minion_back(tmp_path: Path, config: RoadConfig
                                                        ) -> None:
    with _minion(tmp_path / "minion", config, "connected") as minion:
        with _main(tmp_path / "main", config) as main:
            pump = Pump(main, minion)
            connect(pump, main, minion)
            port = main.address[1]
            pump.close()
        # The main comes back on its port with its keep: it has lost the session keys
        # and calls its known minions back (engine.recall) at the address it holds.
        with _main(tmp_path / "main", config, port) as again:
            pump = Pump(again, minion)
            pump.until(lambda ev: bool(of(ev[again], Allowed)) and bool(of(ev[minion], Allowed)),
                       timeout=20)
            assert again.road.stats["recall_allow"] >= 1
            exchange(pump, again, minion, "minion", pattern_body(5000, "recalled"))
            pump.close()


def test_a_dialing_minion_drops_and_counts_strangers_before_parsing(tmp_path: Path,
                                                                    config: RoadConfig) -> None:
    with _main(tmp_path / "main", config) as main, \
            _minion(tmp_path / "minion", config, "dialed") as minion:
        pump = Pump(main, minion)
        connect(pump, main, minion)
        with pytest.raises(OSError):
            minion.sock.getpeername()  # not connected: one socket for several masters
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
            stranger.bind(("127.0.0.2", 0))
            stranger.sendto(b"ri RAET\npl 0014\nhl 14\nbogus\n\n", minion.address)
        pump.until(lambda ev: bool(of(ev[minion], PacketDropped)))
        (drop,) = of(pump.events[minion], PacketDropped)
        assert (drop.reason, drop.address[0]) == (DropReason.FOREIGN_SOURCE, "127.0.0.2")
        assert minion.road.stats["drop_foreign_source"] == 1  # read, and dropped unparsed
        assert not minion.road.stats["drop_header"]
        exchange(pump, minion, main, "main", pattern_body(5000, "after"))
        pump.close()


def test_nothing_is_taken_before_the_first_dial(tmp_path: Path) -> None:
    with _minion(tmp_path / "minion", RoadConfig(), "dialed") as minion:
        assert minion.road.sources == frozenset()
    with _minion(tmp_path / "other", RoadConfig(), "anyone") as listener:
        assert listener.road.sources is None


def test_route_source_names_the_local_address_towards_a_destination() -> None:
    assert route_source(("127.0.0.1", 4506), socket.AF_INET) == "127.0.0.1"
    with pytest.raises(LocalError, match="no route"):
        route_source(("::1", 4506), socket.AF_INET)  # not an address of this family


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def _opts(**extra: object) -> dict[str, object]:
    return {"raet_port": 4510, "interface": None, "ipv6": False, "master": "127.0.0.1",
            "master_port": 4506, "__masters": ["127.0.0.1:4506"], **extra}


def test_road_binding_follows_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    assert road_binding(_opts(), "minion") == (("127.0.0.1", 4510), "connected")
    listed = ["127.0.0.1:4506", "127.0.0.1:4507"]
    assert road_binding(_opts(__masters=listed), "minion") == (("127.0.0.1", 4510), "dialed")
    assert road_binding(_opts(interface="0.0.0.0"), "minion") == (("0.0.0.0", 4510), "anyone")
    assert road_binding(_opts(interface="0.0.0.0", raet_port=4506), "master") == (
        ("0.0.0.0", 4506), "anyone")
    if socket.has_ipv6 and _ipv6_loopback():
        assert road_binding(_opts(ipv6=True, master="::1", __masters=["[::1]:4506"]),
                            "minion") == (("::1", 4510), "connected")
    # Masters reached from different local addresses (or none resolvable now): the
    # wildcard address, still taking datagrams from the masters only.
    monkeypatch.setattr("raetsalt.daemon.service.route_source",
                        lambda ha, family: f"10.0.0.{ha[1] - 4500}")
    assert road_binding(_opts(__masters=listed), "minion") == (("0.0.0.0", 4510), "dialed")
    assert road_binding(_opts(__masters=["nowhere.invalid:4506"]), "minion") == (
        ("0.0.0.0", 4510), "connected")
