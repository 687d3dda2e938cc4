"""A daemon's log of dropped datagrams: the first of a reason at once, then sums at most
once a period, routine drops at DEBUG only; one entry per reason whatever arrives."""

from __future__ import annotations

import logging

import pytest

from raetsalt.daemon.droplog import DropLog
from raetsalt.drops import DropReason
from raetsalt.engine.events import PacketDropped


def test_drops_are_logged_at_a_bounded_rate(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    drops = DropLog("the master", period=60.0, clock=lambda: now[0])
    caplog.set_level(logging.DEBUG, logger="raetsalt.daemon.droplog")
    bad = PacketDropped(DropReason.IDS, ("10.0.0.2", 4510), "zero estate or session id")
    for second in range(120):  # one a second for two minutes
        now[0] = float(second)
        drops.note(bad)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "10.0.0.2:4510" in warnings[0].getMessage()
    assert "zero estate or session id" in warnings[0].getMessage()
    assert "dropped 60 more" in warnings[1].getMessage()
    caplog.clear()
    drops.note(PacketDropped(DropReason.STALE, ("10.0.0.3", 1), "late"))
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    for index in range(10_000):
        drops.note(PacketDropped(DropReason.SIGNATURE, ("10.9.0.0", index), "x" * 10_000))
    assert len(drops._tallies) == 3
    assert all(len(r.getMessage()) < 400 for r in caplog.records)
