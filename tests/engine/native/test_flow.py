"""The native flow gate (native/flow.py): the congestion window for a transfer alone, a
short queue for bulk bytes while express messages flow, express frames a little beyond
the window."""

from __future__ import annotations

from raetsalt.engine.native.congestion import Controller
from raetsalt.engine.native.flow import EXPRESS_EXTRA, QUIET_HOLD, QUIET_WINDOW, SendWindow

MiB = 1024 * 1024


def _gate(window: int) -> SendWindow:
    cc = Controller(1400, 2 * MiB)
    cc.cwnd = window
    return SendWindow(cc)


def test_a_transfer_alone_gets_the_whole_congestion_window() -> None:
    gate = _gate(2 * MiB)
    assert gate.allowance(0, now=10.0) == 2 * MiB
    assert gate.allowance(MiB, now=10.2) == MiB


def test_express_traffic_keeps_the_bulk_queue_short_then_lets_go() -> None:
    gate = _gate(2 * MiB)
    gate.on_sent(10.0, 100, express=True)
    assert gate.allowance(0, now=10.1) == QUIET_WINDOW  # bulk: the quiet window
    assert gate.allowance(0, now=10.1, express=True) == 2 * MiB + EXPRESS_EXTRA
    assert gate.allowance(0, now=10.0 + QUIET_HOLD + 0.01) == 2 * MiB  # express is gone


def test_the_quiet_window_is_the_paths_bandwidth_delay_product_when_larger() -> None:
    gate = _gate(2 * MiB)
    cc = gate.cc
    # 500 kB acknowledged 50 ms after they went, on a 50 ms path: 10 MB/s, and 500 kB in
    # flight keep the link busy.
    cc.on_acked(500_000, MiB, 1.0, (0, 1.0, 1.0), 0.05, 0.05, now=1.05)
    assert 499_990 <= cc.bdp() <= 500_000  # (float rounding)
    gate.on_sent(1.1, 100, express=True)
    assert gate.allowance(0, now=1.2) == cc.bdp()


def test_express_frames_pass_a_full_window() -> None:
    gate = _gate(MiB)
    assert gate.allowance(MiB, now=1.0) <= 0
    assert gate.allowance(MiB, now=1.0, express=True) == EXPRESS_EXTRA
