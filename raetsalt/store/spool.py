"""The job cache's spool: every row goes through these files before the database.

A segment ``<n>.spool`` (n counts up) is a run of frames, each a 4-byte big-endian length
and a msgpack list of rows (``raetsalt.store.rows.pack``): one frame per batch, appended
and synced (``append``: one ``fsync`` per batch, however many rows: group commit).  The
shipper reads segments in order (``read``) and removes the ones it has written to the
database (``remove``); a master that stops with rows unwritten finds them at the next
start.  A frame cut short by a crash ends its segment (``read`` reports it torn); a new
run never appends to an old segment.  Files are 0600 in a 0700 directory.

Bounded: ``append`` refuses a batch that would take the segments past ``max_bytes`` (the
caller counts and logs the loss); a segment is closed at ``segment_bytes``.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import NamedTuple

import msgpack

from raetsalt.store.rows import Row, pack, unpack

MAX_BYTES = 1 << 30
"""What the spool may hold before new rows are refused (a long outage under load)."""
SEGMENT_BYTES = 8 << 20
_LENGTH = struct.Struct(">I")
MAX_FRAME = 256 << 20
READ_BYTES = 4 << 20
"""Bytes ``read`` takes at a time (at least one whole frame)."""


class Position(NamedTuple):
    segment: int
    offset: int


class Chunk(NamedTuple):
    rows: list[Row]
    end: Position
    """Where the next read starts."""
    finished: list[int]
    """Segments read to their end (removable once ``rows`` are written)."""
    bad: int
    """Frames or rows that could not be read (a torn tail, a damaged frame), skipped."""


class Spool:
    """The segments under ``directory`` (module docstring).  One thread appends, another
    reads and removes; ``position`` is the end of what was appended and synced."""

    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES,
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._sizes = {n: (self._path(n)).stat().st_size for n in self.segments()}
        self._current = max(self._sizes, default=0) + 1
        self._fd: int | None = None

    def _path(self, segment: int) -> Path:
        return self.directory / f"{segment:012d}.spool"

    def segments(self) -> list[int]:
        """The segments on disk, oldest first."""
        found = []
        for path in self.directory.glob("*.spool"):
            if path.stem.isdigit():
                found.append(int(path.stem))
        return sorted(found)

    def first(self) -> Position:
        """Where reading starts: the oldest segment (or the one to come)."""
        with self._lock:
            return Position(min(self._sizes, default=self._current), 0)

    def position(self) -> Position:
        with self._lock:
            return Position(self._current, self._sizes.get(self._current, 0))

    def total_bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    def append(self, rows: list[Row]) -> bool:
        """Append ``rows`` as one synced frame; False (nothing written) when the spool is
        full.  ``OSError`` if the disk refuses (the frame may be partly there: the
        segment is closed, the next append starts a new one)."""
        data: bytes = msgpack.packb([pack(row) for row in rows], use_bin_type=True)
        frame = _LENGTH.pack(len(data)) + data
        with self._lock:
            if sum(self._sizes.values()) + len(frame) > self.max_bytes:
                return False
            if self._sizes.get(self._current, 0) >= self.segment_bytes:
                self._roll()
            segment = self._current
            new = segment not in self._sizes
        try:
            if self._fd is None:
                self._fd = os.open(self._path(segment),
                                   os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
                if new:
                    self._sync_dir()
            written = 0
            while written < len(frame):
                written += os.write(self._fd, frame[written:])
            os.fsync(self._fd)
        except OSError:
            with self._lock:  # never append after a frame that may be torn
                try:
                    self._sizes[segment] = self._path(segment).stat().st_size
                except OSError:
                    self._sizes.setdefault(segment, 0)
                self._roll()
            raise
        with self._lock:
            self._sizes[segment] = self._sizes.get(segment, 0) + len(frame)
        return True

    def _roll(self) -> None:
        """Close the current segment (the lock is held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._current in self._sizes:
            self._current += 1

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, start: Position, end: Position) -> Chunk:
        """Rows from ``start`` up to ``end`` (a ``position``), about ``READ_BYTES`` of
        them at most; the segments before ``end``'s are closed and read to their end."""
        rows: list[Row] = []
        finished: list[int] = []
        bad = 0
        segment, offset = start
        while not rows:
            path = self._path(segment)
            try:
                limit = end.offset if segment == end.segment else path.stat().st_size
                with path.open("rb") as handle:
                    handle.seek(offset)
                    data = handle.read(max(0, min(READ_BYTES, limit - offset)))
                    if len(data) >= _LENGTH.size:  # a frame longer than READ_BYTES: whole
                        (size,) = _LENGTH.unpack_from(data)
                        whole = _LENGTH.size + size
                        if len(data) < whole <= min(MAX_FRAME, limit - offset):
                            data += handle.read(whole - len(data))
            except FileNotFoundError:  # removed behind our back: its rows are lost
                limit = max(offset, end.offset) if segment == end.segment else offset
                data = b""
            used, frames, damaged = _frames(data)
            bad += damaged
            for frame in frames:
                for item in frame:
                    try:
                        rows.append(unpack(item))
                    except ValueError:
                        bad += 1
            offset += used
            if offset < limit and used == 0:
                bad += 1  # a torn or damaged tail: the rest of the segment is unreadable
                offset = limit
            if offset < limit or segment >= end.segment:
                break
            finished.append(segment)
            segment, offset = self._next(segment, end.segment), 0
        return Chunk(rows, Position(segment, offset), finished, bad)

    def _next(self, segment: int, last: int) -> int:
        with self._lock:
            later = [n for n in self._sizes if segment < n <= last]
        return min(later, default=last)

    def remove(self, segments: list[int]) -> None:
        """Forget segments whose rows are all in the database."""
        for segment in segments:
            self._path(segment).unlink(missing_ok=True)
            with self._lock:
                self._sizes.pop(segment, None)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _frames(data: bytes) -> tuple[int, list[list[object]], int]:
    """Whole frames at the start of ``data``: (bytes used, frames, damaged frames)."""
    used = 0
    frames: list[list[object]] = []
    damaged = 0
    while len(data) - used >= _LENGTH.size:
        (size,) = _LENGTH.unpack_from(data, used)
        if size > MAX_FRAME:
            break  # garbage: treated as a torn tail
        if len(data) - used - _LENGTH.size < size:
            break
        body = data[used + _LENGTH.size:used + _LENGTH.size + size]
        used += _LENGTH.size + size
        try:
            frame = msgpack.unpackb(body, raw=False)
        except (ValueError, msgpack.UnpackException):
            damaged += 1
            continue
        if isinstance(frame, list):
            frames.append(frame)
        else:
            damaged += 1
    return used, frames, damaged
