"""The master's job cache written by a child process (``raetsalt.daemon.cacheproc``): the
loop hands over a batch per pass and never waits; the child reports what is on disk; a
killed child is started again and nothing is lost; what it reported survives its death
mid-batch, and no file is torn."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raetsalt.daemon import cacheproc
from raetsalt.daemon.cacheproc import ProcessWriter
from raetsalt.daemon.cachewriter import QueuedJobCache
from raetsalt.daemon.jobcache import JobCache

JID = "20261124000000000001"


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[QueuedJobCache]:
    """The master's job cache: written by a child process."""
    queued = QueuedJobCache(tmp_path / "jobs", process=True)
    assert isinstance(queued.writer, ProcessWriter)
    yield queued
    queued.close()
    assert queued.writer._proc is None  # type: ignore[union-attr]


def _check_files(root: Path) -> None:
    """Every visible file of the job parses (no torn file; temporary names are dotted)."""
    for path in (root / JID).iterdir():
        if not path.name.startswith("."):
            json.loads(path.read_text())


def test_each_pass_hands_over_a_batch_without_waiting_and_the_child_reports_it(
        cache: QueuedJobCache, tmp_path: Path) -> None:
    writer = cache.writer
    assert isinstance(writer, ProcessWriter)
    cache.save_load(JID, {"fun": "test.ping", "minions": []})
    cache.save_return(JID, "m0000", {"return": True, "retcode": 0})
    writer.commit_now()  # starts the child
    assert writer._proc is not None
    writer._proc.send_signal(signal.SIGSTOP)  # a writer stuck on the disk
    try:
        for n in range(1, 2000):
            cache.save_return(JID, f"m{n:04d}", {"return": True, "retcode": 0})
            if n % 100 == 99:
                writer.commit_now()  # a pass of the loop: hands over, never waits
        assert writer.sequence >= 20 and writer.committed < writer.sequence
    finally:
        writer._proc.send_signal(signal.SIGCONT)
    assert len(cache.get_returns(JID)) == 2000  # readable at once, queued or written
    assert cache.flush(30)
    assert writer.committed == writer.sequence and cache._queued == {}
    on_disk = JobCache(tmp_path / "jobs")
    assert len(on_disk.get_returns(JID)) == 2000
    assert on_disk.get_load(JID) == {"fun": "test.ping", "minions": [], "jid": JID}
    # A file saved again later is written again (the newest wins).
    cache.save_return(JID, "m0000", {"return": False, "retcode": 1})
    assert cache.flush(30)
    assert on_disk.get_returns(JID)["m0000"] == {"return": False, "retcode": 1}


def test_a_record_saved_twice_in_one_batch_does_not_stop_the_writer(
        cache: QueuedJobCache, tmp_path: Path) -> None:
    """A batch's record is saved again as each sub-batch adds its minions; when both
    saves reached the child in one batch, it staged the same temporary file twice, the
    second rename failed (ENOENT), and it retried that batch for ever: nothing after it
    reached the disk, and a master restart lost every return since."""
    writer = cache.writer
    assert isinstance(writer, ProcessWriter)
    cache.save_load(JID, {"fun": "test.ping", "minions": ["a"]})
    writer.commit_now()  # starts the child
    assert writer._proc is not None
    writer._proc.send_signal(signal.SIGSTOP)  # both saves wait in the pipe together
    try:
        cache.save_load(JID, {"fun": "test.ping", "minions": ["a", "b"]})
        writer.commit_now()
        cache.save_load(JID, {"fun": "test.ping", "minions": ["a", "b", "c"]})
        cache.save_return(JID, "c", {"return": True, "retcode": 0})
        writer.commit_now()
    finally:
        writer._proc.send_signal(signal.SIGCONT)
    assert cache.flush(30)
    on_disk = JobCache(tmp_path / "jobs")
    assert on_disk.get_load(JID) == {"fun": "test.ping", "minions": ["a", "b", "c"],
                                     "jid": JID}
    assert on_disk.get_returns(JID) == {"c": {"return": True, "retcode": 0}}


def test_the_same_file_twice_in_one_commit_is_written_once_with_the_last_text(
        tmp_path: Path) -> None:
    cache = JobCache(tmp_path / "jobs")
    cache.commit([(JID, "m.json", b'{"return": 1}'), (JID, ".load.json", b"{}"),
                  (JID, "m.json", b'{"return": 2}')])
    assert cache.get_returns(JID) == {"m": {"return": 2}}
    assert sorted(p.name for p in (tmp_path / "jobs" / JID).iterdir()) == [".load.json",
                                                                         "m.json"]


def test_a_giant_return_goes_through_and_an_idle_writer_starts_no_process(
        cache: QueuedJobCache, tmp_path: Path) -> None:
    writer = cache.writer
    assert isinstance(writer, ProcessWriter)
    assert writer.commit_now() and writer._proc is None  # nothing to write: no child
    cache.save_load(JID, {"fun": "cmd.run"})
    giant = "x" * (24 << 20)  # over MAX_OUTPUT alone: it goes, the rest waits its turn
    cache.save_return(JID, "big", {"return": giant})
    writer.commit_now()
    for n in range(50):
        cache.save_return(JID, f"m{n:02d}", {"return": n})
        writer.commit_now()
    assert cache.flush(60)
    returns = JobCache(tmp_path / "jobs").get_returns(JID)
    assert returns["big"]["return"] == giant and returns["m49"] == {"return": 49}


def test_a_killed_writer_is_started_again_and_gets_what_it_had_not_reported(
        cache: QueuedJobCache, tmp_path: Path) -> None:
    writer = cache.writer
    assert isinstance(writer, ProcessWriter)
    cache.save_load(JID, {"fun": "test.ping"})
    for n in range(3000):
        cache.save_return(JID, f"m{n:04d}", {"return": n, "pad": "y" * 300})
        if n % 50 == 49:
            writer.commit_now()
        if n == 1500:
            assert writer._proc is not None
            os.kill(writer._proc.pid, signal.SIGKILL)  # whatever it was writing
    assert cache.flush(30)
    assert writer.restarts == 1
    returns = JobCache(tmp_path / "jobs").get_returns(JID)
    assert [returns[f"m{n:04d}"]["return"] for n in range(3000)] == list(range(3000))
    _check_files(tmp_path / "jobs")


_MASTER = r"""
import sys
from raetsalt.daemon.cachewriter import QueuedJobCache

cache = QueuedJobCache(sys.argv[1], process=True)
jid = "20261124000000000001"
cache.save_load(jid, {"fun": "test.ping"})
print("child", flush=True)
batches = []
told = 0
n = 0
while True:
    for _ in range(20):  # a pass of the loop: some returns, then the hand-over
        n += 1
        cache.save_return(jid, f"m{n:06d}", {"return": n, "pad": "x" * 200})
    cache.writer.commit_now()
    if cache.writer._proc is not None and told == 0 and not batches:
        print("pid", cache.writer._proc.pid, flush=True)
    batches.append((cache.writer.sequence, n))
    while batches and cache.writer.committed >= batches[0][0]:
        told = batches.pop(0)[1]
        print(told, flush=True)  # acknowledged: on disk
    if len(batches) > 100:
        cache.writer.flush(30)  # back-pressure
"""


def test_what_the_writer_reported_survives_its_death_mid_batch(tmp_path: Path) -> None:
    master = subprocess.Popen([sys.executable, "-c", _MASTER, str(tmp_path / "jobs")],
                              stdout=subprocess.PIPE, text=True)
    acknowledged = 0
    writer_pid = 0
    try:
        assert master.stdout is not None
        for line in iter(master.stdout.readline, ""):  # until the child's output ends
            if line.startswith("pid"):
                writer_pid = int(line.split()[1])
            elif line.strip().isdigit() and int(line) >= 2000:
                acknowledged = int(line)
                break
        assert writer_pid
        os.kill(writer_pid, signal.SIGKILL)  # the writer, in the middle of a batch
        os.kill(master.pid, signal.SIGKILL)
    finally:
        master.kill()
        master.wait(10)
    assert acknowledged >= 2000
    _check_files(tmp_path / "jobs")  # first: nothing torn; then all acknowledged, intact
    returns = JobCache(tmp_path / "jobs").get_returns(JID)
    intact = {"return": 0, "pad": "x" * 200}
    assert all(returns[f"m{n:06d}"] == {**intact, "return": n}
               for n in range(1, acknowledged + 1))


def test_the_writer_is_this_raetsalt_whatever_the_working_directory_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A master started in a checkout of another raetsalt (one without this module) still
    starts its own writer (``python -m`` would have looked in the working directory)."""
    other = tmp_path / "elsewhere"
    (other / "raetsalt" / "daemon").mkdir(parents=True)
    (other / "raetsalt" / "__init__.py").write_text("")
    (other / "raetsalt" / "daemon" / "__init__.py").write_text("")
    monkeypatch.chdir(other)
    cache = QueuedJobCache(tmp_path / "jobs", process=True)
    try:
        cache.save_return(JID, "m1", {"return": True})
        assert cache.flush(30)
        assert cache.writer.restarts == 0  # type: ignore[union-attr]
        assert JobCache(tmp_path / "jobs").get_returns(JID) == {"m1": {"return": True}}
    finally:
        cache.close()


def test_a_writer_whose_master_is_gone_stops_when_it_cannot_write(tmp_path: Path) -> None:
    """With its input closed and a batch it cannot commit (the job's directory is a
    file), the child gives up instead of retrying for ever as an orphan."""
    from raetsalt.daemon.cacheproc import _frame, serve

    root = tmp_path / "cache"
    root.mkdir()
    jid = "20261124052900123456"
    (root / jid).write_text("not a directory")
    source, feed = os.pipe()
    reports, sink = os.pipe()
    os.write(feed, _frame([1, [[jid, "minion1.p", b"{}"]]]))
    os.close(feed)
    assert serve(str(root), source, sink) == 1  # it returns: no retrying for ever
    assert (root / jid).read_text() == "not a directory"
    for fd in (source, sink, reports):
        os.close(fd)


def test_a_backlog_goes_in_bounded_batches_and_quotas_see_it(cache: QueuedJobCache) -> None:
    from raetsalt.daemon import cacheproc
    from raetsalt.errors import QuotaExceeded
    from raetsalt.services.quota import MinionQuota, QuotaConfig

    writer = cache.writer
    assert isinstance(writer, ProcessWriter)
    text = "y" * 100_000
    for n in range(60):  # 6 MB submitted before the loop's next pass
        cache.save_return(JID, f"m{n}", {"return": text})
    assert writer.backlog > 6_000_000 and writer.held("m0.json") > 100_000
    writer.commit_now()
    sizes = [sum(len(t) for _, _, t in batch) for batch in writer._unreported.values()]
    assert len(sizes) >= 3 and max(sizes) <= cacheproc.MAX_BATCH  # streamed, not one frame
    assert cache.flush(30)
    assert writer.backlog == 0 and writer.held("m0.json") == 0
    assert len(list((cache.root / JID).glob("m*.json"))) == 60
    cache.quota = MinionQuota(QuotaConfig(minion_backlog=150_000))
    cache.save_return(JID, "q", {"return": text})
    with pytest.raises(QuotaExceeded, match="minion_backlog_max"):
        cache.save_return(JID, "q", {"return": text})  # the first is not on disk yet
    assert writer.held("q.json") < 150_000


def test_a_loop_woken_only_by_the_writer_drains_the_backlog_and_hands_memory_back(
        cache: QueuedJobCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The master's loop wakes for its sockets and timers; after a flood nothing else
    may come.  With the writer's pipes in its selector, the loop wakes when the child
    reports or can take more, so the backlog drains without any other traffic (before,
    one pipe-full went per tick of the loop), and the memory of what is written is
    handed back as it goes, not only once all of it is."""
    trims: list[int] = []
    monkeypatch.setattr(cacheproc, "trim_memory", lambda: trims.append(writer.backlog))
    writer = cache.writer
    assert isinstance(writer, ProcessWriter)
    selector = selectors.DefaultSelector()
    writer.register(selector)
    cache.save_load(JID, {"fun": "test.echo"})
    for n in range(600):  # 36 MB waiting: several hand-backs' worth (TRIM: 8 MiB)
        cache.save_return(JID, f"m{n:04d}", {"return": "x" * 60_000})
    while not writer.commit_now():  # the loop's pass; then it waits for its selector
        assert selector.select(30), "the writer did not wake the loop"  # (hang detector)
    assert writer.backlog == 0 and cache._queued == {}
    assert len(JobCache(tmp_path / "jobs").get_returns(JID)) == 600
    assert trims[0] > 0 and trims[-1] == 0  # as it drained, and once it was empty
    writer.unregister(selector)
    assert not selector.get_map()
    selector.close()
