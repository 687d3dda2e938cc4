"""Address migration on real sockets: the minion reaches the main through a relay that
rebinds it to a new port mid-transfer (a NAT), and the native session follows it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_udp import Pump, of

from raetsalt.drivers.udp import Accept, RoadStack
from raetsalt.engine.config import RoadConfig
from raetsalt.engine.events import Allowed, MessageReceived
from raetsalt.keep.records import AutoMode

RELAY = Path(__file__).resolve().parents[2] / "bench" / "udp_relay.py"


@pytest.mark.parametrize("accept", ["anyone", "connected"])
def test_a_nat_rebinding_mid_transfer_moves_the_session_and_loses_nothing(
    tmp_path: Path, accept: Accept
) -> None:
    """The minion as a listener, and as a daemon's minion is by default: its socket
    connected to the address it dialed (the NAT's outside), which does not move."""
    # Real-network datagrams, so the transfer takes a few hundred of them.
    config = RoadConfig(native_loopback_datagram_size=1400)
    main = RoadStack(
        tmp_path / "main", name="main", main=True, auto=AutoMode.ONCE, config=config
    ).open()
    minion = RoadStack(tmp_path / "minion", name="minion", auto=AutoMode.ONCE, config=config,
                       accept=accept).open()
    relay = subprocess.Popen(
        [sys.executable, str(RELAY), f"127.0.0.1:{main.address[1]}", "0", "1",
         "--move-after", "100"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    pump = Pump(main, minion)
    try:
        assert relay.stdout is not None and relay.stdin is not None
        front = tuple(json.loads(relay.stdout.readline())["ha"])
        minion.connect(front, name="main")  # type: ignore[arg-type]
        pump.until(lambda ev: bool(of(ev[main], Allowed)) and bool(of(ev[minion], Allowed)))
        before = main.road.remote("minion").ha
        up = [{"up": n, "pad": "u" * 2000} for n in range(200)]
        down = [{"down": n, "pad": "d" * 2000} for n in range(200)]
        for n in range(200):
            minion.send("main", up[n])
            main.send("minion", down[n])
        try:
            pump.until(
                lambda ev: len(of(ev[main], MessageReceived)) == 200
                and len(of(ev[minion], MessageReceived)) == 200,
                timeout=20,
            )
        except AssertionError:
            channel = main.road.remote("minion").channel
            path = channel.path if channel is not None else None
            raise AssertionError(
                f"stuck: main at {main.road.remote('minion').ha} (was {before}), "
                f"validating {path and (path.address, path.sent)}, main {dict(main.road.stats)}, "
                f"minion {dict(minion.road.stats)}, drivers {dict(main.stats)} {dict(minion.stats)}"
            ) from None
        assert [e.body for e in of(pump.events[main], MessageReceived)] == up
        assert [e.body for e in of(pump.events[minion], MessageReceived)] == down
        after = main.road.remote("minion").ha
        assert after != before and after[0] == before[0]  # a new port on the same host
        assert main.road.stats["native_migrated"] == 1
        assert len(of(pump.events[main], Allowed)) == 1  # no new handshake
        relay.stdin.close()
        assert json.loads(relay.stdout.readline())["moved"] == 1
    finally:
        pump.close()
        relay.kill()
        relay.wait()
        main.close()
        minion.close()
