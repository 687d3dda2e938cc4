"""The keep writer: batches off the event loop, durable answers, failures retried."""

from __future__ import annotations

import logging
import select
import threading
from pathlib import Path

import pytest

from raetsalt.drivers.keepwriter import KeepWriter
from raetsalt.keep.records import Acceptance, KeepWrite, RoleRecord
from raetsalt.keep.store import FileKeep
from raetsalt.testing.faults import FullDiskKeep

V, P = "a" * 64, "b" * 64


def _role(name: str) -> KeepWrite:
    return KeepWrite.role(RoleRecord(name, Acceptance.PENDING, V, P))


class SlowKeep(FileKeep):
    """Commits wait for a gate, so a test can see batches pile up behind one commit."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, durable=False)
        self.gate = threading.Event()
        self.batches: list[int] = []

    def commit(self, writes: list[KeepWrite]) -> None:
        self.gate.wait(10)
        self.batches.append(len(writes))
        super().commit(writes)


def test_submissions_behind_a_commit_become_one_batch(tmp_path: Path) -> None:
    keep = SlowKeep(tmp_path / "keep")
    writer = KeepWriter(keep)
    try:
        first = writer.submit([_role("r0")])
        sequences = [writer.submit([_role(f"r{n}")]) for n in range(1, 200)]
        assert writer.committed == 0  # nothing waited for the disk
        keep.gate.set()
        assert writer.flush(10)
        assert writer.committed == sequences[-1] == 200 and first == 1
        # At most the first write alone, then everything queued behind it at once.
        assert len(keep.batches) <= 2 and sum(keep.batches) == 200
        assert len(keep.list_roles()) == 200
        # The descriptor says "committed advanced" to a selector loop.
        assert select.select([writer.fileno()], [], [], 1.0)[0]
        writer.drain_wake()
        assert not select.select([writer.fileno()], [], [], 0)[0]
    finally:
        writer.close()


def test_a_failing_keep_is_retried_and_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    keep = FullDiskKeep(full=True)
    writer = KeepWriter(keep, threaded=False)
    for n in range(100):
        writer.submit([_role(f"r{n}")])
    assert writer.committed == 0 and writer.failing
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert not any(r.exc_info for r in caplog.records)
    keep.full = False
    writer.submit([_role("last")])
    assert writer.committed == 101 and writer.failing is None
    assert len(keep.list_roles()) == 101
    writer.close()
