"""The master's job cache written by a child process, on the other core.

With ten thousand minions answering a ``test.ping``, writing their returns (a file each:
open, write, close, rename, plus two file-system syncs per batch) took 40 % of the
master's loop.  A writer thread would take it off the loop but not off the interpreter
lock: its stream of small system calls convoys with the busy loop (two timing tests of
local attacks failed under load that way).  A process shares no lock.

``ProcessWriter`` is the master's side.  ``submit`` queues entries; ``commit_now`` (the
loop calls it once per pass) sends what was queued as numbered batches of at most
``MAX_BATCH`` bytes down a pipe and reads which batches the child reports committed,
never blocking: while the pipe is full (the child is behind) entries wait in memory,
where the job cache's readers see them anyway (``QueuedJobCache``); ``backlog`` and
``held(name)`` say how many bytes wait (the master's quotas refuse returns beyond a
bound, ``raetsalt.services.quota``).  ``register`` puts the pipes in the loop's
selector: the loop wakes when the child reports, and when the pipe has room while
entries wait, so a backlog drains at the disk's pace however idle the master is (with
only the loop's tick, one pipe-full a tick: about 0.6 MB/s).  Written entries' memory
is handed back to the system as the backlog drains (``TRIM``), not only once it is
empty: the heap's freed blocks sit between live ones, which glibc returns only to
``malloc_trim``.  The child (``main``, run from this very
``raetsalt``) takes the batches that have arrived, up to ``CHILD_BATCH`` bytes at a time
(so a flood never stops it from committing), writes them together with
``JobCache.commit`` (group commit: a crash leaves each file old or new, never torn) and
then reports the highest batch number, so what it reported is on disk.  A child that
dies is started again (at most once every ``RETRY`` seconds) and gets every batch it had
not reported, in order (rewriting a file with the same text is harmless); a failing
disk is the child's to retry, logged there once per interval.

Frames both ways: a 4-byte big-endian length, then msgpack: ``[sequence, [[jid, name,
text], ...]]`` down, ``sequence`` up.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import select
import selectors
import signal
import struct
import subprocess
import time
from collections.abc import Callable
from typing import Any

import msgpack

from raetsalt.daemon.childproc import python_child
from raetsalt.drivers.clock import monotonic
from raetsalt.errors import KeepError
from raetsalt.log import Throttle

log = logging.getLogger(__name__)

Entry = tuple[str, str, bytes]
"""(jid, file name, JSON text)."""


RETRY = 1.0
"""Seconds between restarts of a child that died (and between the child's retries)."""
MAX_OUTPUT = 8 << 20
"""Bytes sent to the pipe but not yet taken by the child, above which new entries wait."""
MAX_BATCH = 2 << 20
"""Bytes of entries (at least one entry) in one batch sent to the child."""
CHILD_BATCH = 8 << 20
"""Bytes of entries the child gathers at most before it commits them."""
BEHIND = 16 << 20
"""A backlog of this many bytes is reported (once, then again when it is cleared)."""
TRIM = 8 << 20
"""Each time entries of this many bytes more are written (and when a backlog of at least
this much is cleared), the freed memory is handed back to the system."""
PIPE_SIZE = 1 << 20
"""The pipe to the child asks for this capacity (Linux: at most ``pipe-max-size``)."""
_F_SETPIPE_SZ = 1031
_LENGTH = struct.Struct(">I")
MAX_FRAME = 1 << 30
"""The longest frame either side accepts."""


def _frame(payload: object) -> bytes:
    data: bytes = msgpack.packb(payload, use_bin_type=True)
    return _LENGTH.pack(len(data)) + data


class ProcessWriter:
    """The loop's side of the writer process (module docstring).  ``on_committed`` is
    called, in the caller's thread, with each batch the child reported."""

    def __init__(self, root: str | os.PathLike[str],
                 on_committed: Callable[[list[Entry]], None] = lambda batch: None, *,
                 clock: Callable[[], float] = monotonic) -> None:
        self.root = os.fspath(root)
        self.on_committed = on_committed
        self.clock = clock
        self.sequence = 0
        self.committed = 0
        """The highest batch the child reported on disk."""
        self.restarts = 0
        self.backlog = 0
        """Bytes of entries submitted and not yet reported committed."""
        self._held: dict[str, int] = {}
        """File name -> bytes of its entries in the backlog."""
        self.peak = 0
        """The largest backlog since it was last empty."""
        self._behind = False
        self._pending: list[Entry] = []
        self._unreported: dict[int, list[Entry]] = {}
        self._output = bytearray()
        self._input = bytearray()
        self._proc: subprocess.Popen[bytes] | None = None
        self._start_at = 0.0
        self._failures = Throttle(60.0)
        self._released = 0
        """Bytes of entries written since the memory was last handed back."""
        self._selectors: dict[selectors.BaseSelector, Any] = {}
        self._watched: dict[selectors.BaseSelector, tuple[int, int] | None] = {}
        """What each selector watches: (reports fd, input fd), None: nothing."""
        self._writing: dict[selectors.BaseSelector, bool] = {}
        """Whether each selector waits for room in the pipe to the child."""

    # -- the loop's calls -----------------------------------------------------------------

    def submit(self, entries: list[Entry]) -> None:
        self._pending.extend(entries)
        held = self._held
        for _jid, name, text in entries:
            self.backlog += len(text)
            held[name] = held.get(name, 0) + len(text)
        if self.backlog > self.peak:
            self.peak = self.backlog
            if self.peak >= BEHIND and not self._behind:
                self._behind = True
                log.warning("job cache: the writer is behind, %.1f MiB of returns are not "
                            "on disk yet", self.backlog / (1 << 20))

    def held(self, name: str) -> int:
        """Bytes of the entries for files named ``name`` not yet on disk."""
        return self._held.get(name, 0)

    def _release(self, batch: list[Entry]) -> None:
        held = self._held
        for _jid, name, text in batch:
            self.backlog -= len(text)
            self._released += len(text)
            left = held.get(name, 0) - len(text)
            if left > 0:
                held[name] = left
            else:
                held.pop(name, None)
        if not self.backlog and self.peak:
            if self._behind:
                self._behind = False
                log.warning("job cache: the writer caught up (%.1f MiB were waiting at "
                            "most)", self.peak / (1 << 20))
            if self.peak >= TRIM:
                self._released = TRIM  # handed back once the batches are let go
                log.info("job cache: backlog cleared (%.1f MiB at most)",
                         self.peak / (1 << 20))
            self.peak = 0

    # -- the loop's selector ---------------------------------------------------------------

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        """Wake ``selector`` when the child reports, or takes input while some waits."""
        self._selectors[selector] = data
        self._watched[selector] = None
        self._watch()

    def unregister(self, selector: selectors.BaseSelector) -> None:
        self._selectors.pop(selector, None)
        self._forget(selector)

    def _forget(self, selector: selectors.BaseSelector) -> None:
        self._writing.pop(selector, None)
        watched = self._watched.pop(selector, None)
        if watched is not None:
            for fd in watched:
                try:
                    selector.unregister(fd)
                except (KeyError, ValueError, OSError):
                    pass

    def _watch(self) -> None:
        """Keep the selectors' interest in line with the child and the output."""
        if not self._selectors:
            return
        proc = self._proc
        want: tuple[int, int] | None = None
        writing = False
        if proc is not None and proc.stdin is not None and proc.stdout is not None:
            want = (proc.stdout.fileno(), proc.stdin.fileno())
            writing = bool(self._output)
        for selector, data in self._selectors.items():
            have = self._watched.get(selector)
            if have != want:
                self._forget(selector)
                if want is not None:
                    selector.register(want[0], selectors.EVENT_READ, data)
                    if writing:
                        selector.register(want[1], selectors.EVENT_WRITE, data)
                self._watched[selector] = want
                self._writing[selector] = writing
            elif want is not None and self._writing.get(selector) != writing:
                if writing:
                    selector.register(want[1], selectors.EVENT_WRITE, data)
                else:
                    try:
                        selector.unregister(want[1])
                    except (KeyError, ValueError, OSError):
                        pass
                self._writing[selector] = writing

    def commit_now(self) -> bool:
        """Hand over what is queued, take the child's reports; never blocks.  True when
        everything submitted is reported committed."""
        self._read_reports()
        if self._released >= TRIM:
            self._released = 0
            trim_memory()
        if not self._pending and not self._unreported:
            self._watch()
            return True
        if self._proc is None and not self._start():  # started with the first batch
            return False
        while self._pending and len(self._output) < MAX_OUTPUT:
            batch = self._next_batch()
            self.sequence += 1
            self._unreported[self.sequence] = batch
            self._output += _frame([self.sequence, [list(e) for e in batch]])
            self._write_output()
        self._write_output()
        self._watch()
        return not self._pending and not self._unreported

    def _next_batch(self) -> list[Entry]:
        """The oldest pending entries, ``MAX_BATCH`` bytes at most (one at least)."""
        pending = self._pending
        size = count = 0
        for _jid, _name, text in pending:
            if count and size + len(text) > MAX_BATCH:
                break
            size += len(text)
            count += 1
        if count == len(pending):
            self._pending = []
            return pending
        batch = pending[:count]
        del pending[:count]
        return batch

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted so far is reported committed."""
        deadline = time.monotonic() + timeout
        while not self.commit_now():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            proc = self._proc
            if proc is None or proc.stdout is None:
                time.sleep(min(remaining, 0.05))  # waiting for the next restart
                continue
            writable = [proc.stdin] if self._output and proc.stdin is not None else []
            select.select([proc.stdout], writable, [], min(remaining, 0.5))
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued (waiting at most ``timeout``), then stop the child."""
        if not self.flush(timeout):
            log.error("job cache: %d batch(es) not written before stopping",
                      len(self._unreported) + bool(self._pending))
        proc = self._proc
        self._proc = None
        self._watch()
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # -- internals ------------------------------------------------------------------------

    def _start(self) -> bool:
        now = self.clock()
        if now < self._start_at:
            return False
        self._start_at = now + RETRY
        try:
            proc = subprocess.Popen(python_child(__name__, self.root),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    close_fds=True)
        except OSError as exc:
            self._failed(f"cannot start the job cache writer: {exc}")
            return False
        assert proc.stdin is not None and proc.stdout is not None
        try:  # fewer, larger hand-overs: each wake-up may pass the child this much
            fcntl.fcntl(proc.stdin.fileno(), _F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:
            pass  # not Linux, or above pipe-max-size: the default capacity
        os.set_blocking(proc.stdin.fileno(), False)
        os.set_blocking(proc.stdout.fileno(), False)
        self._proc = proc
        self._input.clear()
        self._output.clear()
        for sequence, batch in self._unreported.items():  # in order: older first
            self._output += _frame([sequence, [list(e) for e in batch]])
        return True

    def _lost(self, why: str) -> None:
        proc, self._proc = self._proc, None
        self._watch()  # before its pipes are closed
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
            proc.kill()
            proc.wait()
            self.restarts += 1
        self._failed(f"the job cache writer stopped ({why}); starting it again")

    def _failed(self, message: str) -> None:
        times = self._failures.note("writer", self.clock())
        if times:
            log.error("%s (%d time(s))", message, times)

    def _write_output(self) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or not self._output:
            return
        try:
            sent = os.write(proc.stdin.fileno(), self._output)
        except BlockingIOError:
            return
        except OSError as exc:  # EPIPE: the child is gone
            self._lost(str(exc))
            return
        del self._output[:sent]

    def _read_reports(self) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        while True:
            try:
                data = os.read(proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            except OSError as exc:
                self._lost(str(exc))
                return
            if not data:
                self._lost("end of its output")
                return
            self._input += data
        try:
            reports = _frames(self._input)
        except ValueError as exc:
            self._lost(str(exc))
            return
        for sequence in reports:
            assert isinstance(sequence, int)
            for done in [s for s in self._unreported if s <= sequence]:
                self._committed(self._unreported.pop(done))
            self.committed = max(self.committed, sequence)

    def _committed(self, batch: list[Entry]) -> None:
        self._release(batch)
        self.on_committed(batch)  # (then nothing holds the batch: its memory is free)


def trim_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``): after a
    backlog of returns is written, the master's memory comes back to what it was."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc


# -- the child ----------------------------------------------------------------------------

def _frames(buffer: bytearray) -> list[Any]:
    """The whole frames at the start of ``buffer`` (taken out of it)."""
    out = []
    while len(buffer) >= _LENGTH.size:
        (size,) = _LENGTH.unpack_from(buffer)
        if size > MAX_FRAME:
            raise ValueError(f"a frame of {size} bytes")
        if len(buffer) < _LENGTH.size + size:
            break
        out.append(msgpack.unpackb(bytes(buffer[_LENGTH.size:_LENGTH.size + size])))
        del buffer[:_LENGTH.size + size]
    return out


def serve(root: str, source: int = 0, sink: int = 1) -> int:
    """The child's loop: read batches, commit all that arrived together, report."""
    from raetsalt.daemon.jobcache import JobCache  # the child's own import

    cache = JobCache(root)
    failures = Throttle(60.0)
    buffer = bytearray()
    entries: list[Entry] = []
    size = 0
    highest = 0
    done = False
    while not done or entries:
        # Wait for input only when there is nothing to write; then take what else came,
        # up to CHILD_BATCH bytes (a master that never stops sending is committed too).
        while not done and (not entries or (size < CHILD_BATCH and
                                            select.select([source], [], [], 0)[0])):
            data = os.read(source, 1 << 20)
            if not data:
                done = True
                break
            buffer += data
            for frame in _frames(buffer):
                sequence, batch = frame
                for j, n, t in batch:
                    entries.append((str(j), str(n), bytes(t)))
                    size += len(t)
                highest = max(highest, int(sequence))
            if buffer:
                continue  # the rest of a frame is on its way
            if not select.select([source], [], [], 0)[0]:
                break
        if not entries:
            continue
        try:
            cache.commit(entries)
        except (KeepError, OSError) as exc:
            if failures.note("commit", time.monotonic()):
                log.error("the job cache cannot be written: %s", exc)
            if done:  # the master is gone: nobody would ever see this child stop trying
                log.error("the master has stopped: %d record(s) left unwritten", len(entries))
                return 1
            time.sleep(RETRY)  # the child's only job: nothing else waits for it
            continue
        entries = []
        size = 0
        try:
            os.write(sink, _frame(highest))  # a few bytes: the pipe takes them whole
        except OSError:
            pass  # the master is gone: write the rest, then stop at the end of the input
    return 0


def main(argv: list[str]) -> int:
    """The child process (``ProcessWriter`` starts it): ``argv`` is ``[root]``."""
    # The master stops it by closing the pipe: a terminal's Ctrl-C is the master's.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.ERROR, format="raetsalt-master job cache: %(message)s")
    return serve(argv[0])
