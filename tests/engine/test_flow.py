"""The native flow gate (engine/flow.py): the full window for a transfer alone, a short
queue for bulk bytes while express messages flow, express frames a little beyond the
window."""

from __future__ import annotations

from raetsalt.engine.flow import EXPRESS_EXTRA, QUIET_HOLD, QUIET_WINDOW, SendWindow

MiB = 1024 * 1024


def test_a_transfer_alone_gets_the_whole_window() -> None:
    window = SendWindow(2 * MiB)
    assert window.allowance(0, now=10.0) == 2 * MiB
    window.on_acked(64 * 1024, rtt=0.050, now=10.1)  # a long round trip does not cut it
    assert window.allowance(MiB, now=10.2) == MiB


def test_express_traffic_keeps_the_bulk_queue_short_then_lets_go() -> None:
    window = SendWindow(2 * MiB)
    window.on_sent(10.0, express=True)
    assert window.allowance(0, now=10.1) == QUIET_WINDOW  # bulk: the quiet window
    assert window.allowance(0, now=10.1, express=True) == 2 * MiB + EXPRESS_EXTRA
    assert window.allowance(0, now=10.0 + QUIET_HOLD + 0.01) == 2 * MiB  # express is gone


def test_express_frames_pass_a_full_window() -> None:
    window = SendWindow(MiB)
    assert window.allowance(MiB, now=1.0) <= 0
    assert window.allowance(MiB, now=1.0, express=True) == EXPRESS_EXTRA
