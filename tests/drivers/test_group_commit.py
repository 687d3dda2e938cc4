"""Group commit of the master's job cache and the keep: one batch, two syncs,
however many records; the loop never waits; queued records are readable; and a process
killed in the middle of its batches loses nothing it was told was committed and leaves
no torn file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import raetsalt.daemon.jobcache as jobs_module
from raetsalt.daemon.cachewriter import QueuedDataCache, QueuedJobCache
from raetsalt.daemon.datacache import MinionDataCache
from raetsalt.daemon.jobcache import JobCache
from raetsalt.errors import KeepError
from raetsalt.keep.store import FileKeep

JID = "20261124000000000001"


def test_returns_queued_behind_a_commit_are_one_batch_with_two_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    syncs: list[Path] = []
    real_sync = jobs_module.sync_filesystem

    def slow_sync(path: Path) -> None:
        gate.wait(60)  # opened by the test once it has looked
        syncs.append(path)
        real_sync(path)

    monkeypatch.setattr(jobs_module, "sync_filesystem", slow_sync)
    cache = QueuedJobCache(tmp_path / "jobs")
    try:
        cache.save_load(JID, {"fun": "test.ping", "minions": []})
        for n in range(1000):
            cache.save_return(JID, f"m{n:04d}", {"return": True, "retcode": 0})
        # Nothing waited for the disk: the first sync is still held at the gate.
        assert syncs == []
        # Readable at once, from the queue.
        assert len(cache.get_returns(JID)) == 1000 and cache.jids() == [JID]
        assert cache.get_load(JID) == {"fun": "test.ping", "minions": [], "jid": JID}
        gate.set()
        assert cache.flush(20)
        # The first record alone (its batch was under way), then the 1,000 others at once.
        assert len(syncs) <= 4
        on_disk = JobCache(tmp_path / "jobs")
        assert len(on_disk.get_returns(JID)) == 1000
        assert on_disk.get_returns(JID)["m0999"] == {"return": True, "retcode": 0}
        assert cache._queued == {}
    finally:
        gate.set()
        cache.close()


def test_a_failing_disk_keeps_the_returns_readable_and_writes_them_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = {"on": True}
    real_sync = jobs_module.sync_filesystem

    def sync(path: Path) -> None:
        if broken["on"]:
            raise KeepError("no space left on device")
        real_sync(path)

    monkeypatch.setattr(jobs_module, "sync_filesystem", sync)
    cache = QueuedJobCache(tmp_path / "jobs", threaded=False)  # as the master: per pass
    now = [0.0]
    cache.writer.clock = lambda: now[0]
    cache.save_load(JID, {"fun": "test.ping"})
    cache.save_return(JID, "m1", {"return": True})
    assert cache.writer.committed == 0  # queued until the pass ends
    assert cache.writer.commit_now() is False
    assert cache.writer.failing and cache.writer.committed == 0
    assert list(cache.get_returns(JID)) == ["m1"]
    assert not list((tmp_path / "jobs" / JID).glob("*.json"))  # nothing half-installed
    broken["on"] = False
    cache.save_return(JID, "m2", {"return": True})
    assert cache.writer.commit_now() is False  # not again before RETRY seconds
    now[0] += 1.0
    assert cache.writer.commit_now() is True  # the retry takes everything
    assert cache.writer.committed == 3 and cache.writer.failing is None
    assert sorted(JobCache(tmp_path / "jobs").get_returns(JID)) == ["m1", "m2"]


def test_a_record_that_cannot_be_stored_fails_in_the_caller(tmp_path: Path) -> None:
    cache = QueuedJobCache(tmp_path / "jobs", threaded=False)
    circular: dict[str, object] = {}
    circular["self"] = circular
    with pytest.raises(KeepError):
        cache.save_return(JID, "m1", circular)
    with pytest.raises(KeepError):
        cache.save_return(JID, "../etc", {"return": True})
    with pytest.raises(KeepError):
        cache.save_load("../../x", {})
    assert cache.writer.submitted == 0


_WRITER = r"""
import sys
from raetsalt.daemon.cachewriter import QueuedDataCache, QueuedJobCache
from raetsalt.daemon.datacache import MinionDataCache
from raetsalt.drivers.keepwriter import KeepWriter
from raetsalt.keep.records import Acceptance, KeepWrite, RoleRecord
from raetsalt.keep.store import FileKeep

root = sys.argv[1]
cache = QueuedJobCache(root + "/jobs")
keep = KeepWriter(FileKeep(root + "/keep"))
jid = "20261124000000000001"
cache.save_load(jid, {"fun": "test.ping"})
told = 0
sequences = []
n = 0
while True:
    n += 1
    cache.save_return(jid, f"m{n:06d}", {"return": n, "pad": "x" * 200})
    role = RoleRecord(f"r{n:06d}", Acceptance.ACCEPTED, "%064x" % n, "%064x" % n)
    sequences.append((n, cache.writer.submitted, keep.submit([KeepWrite.role(role)])))
    # Back-pressure, as a loop serving a road has: a producer that never pauses holds the
    # GIL so long that the writer threads' many small system calls barely get it back.
    for writer in (cache.writer, keep):
        if writer.submitted - writer.committed > 256:
            writer.flush(30)
    while told < len(sequences):
        number, job_seq, keep_seq = sequences[told]
        if cache.writer.committed < job_seq or keep.committed < keep_seq:
            break
        print(number, flush=True)  # acknowledged: both records are on disk
        told += 1
"""


def test_a_process_killed_mid_batch_loses_nothing_acknowledged(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    acknowledged = 0
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 60
        while acknowledged < 300 and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            acknowledged = int(line)
        os.kill(child.pid, signal.SIGKILL)  # in the middle of whatever batch is under way
    finally:
        child.kill()
        child.wait(10)
    assert acknowledged >= 300
    # Everything acknowledged is there and intact; no file is torn; no temp file is seen.
    returns = JobCache(tmp_path / "jobs").get_returns(JID)
    for n in range(1, acknowledged + 1):
        assert returns[f"m{n:06d}"] == {"return": n, "pad": "x" * 200}
    for path in (tmp_path / "jobs" / JID).iterdir():
        if not path.name.startswith("."):
            json.loads(path.read_text())
    keep = FileKeep(tmp_path / "keep")
    roles = {r.role for r in keep.list_roles()}
    assert {f"r{n:06d}" for n in range(1, acknowledged + 1)} <= roles
    assert not keep.load_state().broken


def test_the_minion_data_cache_is_written_in_batches_and_in_order(tmp_path: Path) -> None:
    cache = QueuedDataCache(tmp_path / "minions", threaded=False)
    cache.save("m1", {"os": "Linux"})
    cache.save("m2", {"os": "Linux"})
    cache.remove("m1")
    cache.save("m2", {"os": "BSD"})
    assert MinionDataCache(tmp_path / "minions").load_all() == {"m2": {"os": "BSD"}}
    with pytest.raises(KeepError):
        cache.save("../x", {})
    assert not [p for p in (tmp_path / "minions").iterdir() if p.name.startswith(".")]
    cache.close()
