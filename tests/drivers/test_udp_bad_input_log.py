"""On a real socket: a flood of bad or unstorable joins leaves at most one log line per
interval and never a traceback (there were once 1,483 bytes of traceback per datagram)."""

from __future__ import annotations

import logging
import socket

import pytest

from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.config import RoadConfig
from raetsalt.keep.records import AutoMode
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.faults import FullDiskKeep
from raetsalt.testing.forge import join_request


def _flood(stack: RoadStack, datagrams: list[bytes]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
        for data in datagrams:
            attacker.sendto(data, stack.address)
            stack.service(0)  # keep the socket buffer from overflowing
    # Drain until the road has taken every datagram (each one is counted as rx).
    for _ in range(200):
        if stack.road.stats["rx"] >= len(datagrams):
            break
        stack.service(0.05)
    assert stack.road.stats["rx"] == len(datagrams)


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.INFO]


def test_unparsable_names_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # No handshake rate limit: every join reaches the body check (not a "busy" answer).
    config = RoadConfig(handshake_rate=0)
    with RoadStack(MemoryKeep(), name="master", main=True, auto=AutoMode.ONCE,
                   config=config) as stack:
        _flood(stack, [join_request(":", tid=n) for n in range(1, 2001)])
        assert stack.road.stats["drop_body"] == 2000
        assert stack.stats["engine_error"] == 0
    assert not any(r.exc_info for r in caplog.records)
    assert _lines(caplog) == []


def test_a_full_disk_is_logged_once_per_interval_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Storage is not in the engine's path any more: joins are answered from memory, the
    writer keeps what it could not write, says so once, and writes it all once it can."""
    caplog.set_level(logging.DEBUG)
    keep = FullDiskKeep()
    config = RoadConfig(new_ids_burst=1000, handshake_rate=0)  # one address; limits elsewhere
    with RoadStack(keep, name="master", main=True, auto=AutoMode.ONCE, config=config) as stack:
        keep.full = True
        _flood(stack, [join_request(f"new{n}", tid=n) for n in range(1, 501)])
        assert stack.road.stats["drop_body"] == 0 and stack.stats["engine_error"] == 0
        assert len(stack.road.keys.roles) == 500  # every join answered
        assert stack.writer is not None and stack.writer.failing
        lines = _lines(caplog)
        assert len(lines) == 1 and "No space left on device" in lines[0].getMessage()
        keep.full = False
        assert stack.writer.flush(5.0) and stack.writer.failing is None
        assert len(keep.list_roles()) == 500
    assert not any(r.exc_info for r in caplog.records)
