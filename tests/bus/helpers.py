"""Process helpers for the bus tests: a bus host, scripts, and line reads with deadlines."""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest


class Proc:
    """A child Python process whose stdout is read line by line with a deadline."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.popen = subprocess.Popen(
            [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env
        )
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        assert self.popen.stdout is not None
        os.set_blocking(self.popen.stdout.fileno(), False)
        self._selector.register(self.popen.stdout, selectors.EVENT_READ)

    def readline(self, timeout: float = 10.0) -> str | None:
        """The next stdout line, or None if none came within ``timeout`` / at EOF."""
        deadline = time.monotonic() + timeout
        assert self.popen.stdout is not None
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                return None
            chunk = self.popen.stdout.read()
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def expect(self, fragment: str, timeout: float = 10.0) -> str:
        line = self.readline(timeout)
        if line is None or fragment not in line:
            self.stop()
            err = self.popen.stderr.read().decode() if self.popen.stderr else ""
            raise AssertionError(f"expected {fragment!r}, got {line!r}; stderr:\n{err[-2000:]}")
        return line

    def wait(self, timeout: float = 10.0) -> int:
        return self.popen.wait(timeout)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._selector.close()
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Processes to stop at the end of the test, whatever happens."""
    started: list[Proc] = []
    yield started
    for proc in reversed(started):
        proc.stop()


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A short directory under /tmp: socket paths must fit in 107 bytes."""
    path = tempfile.mkdtemp(prefix="rsb", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_bus(procs: list[Proc], node: str, sock_dir: str, node_id: str | None = None) -> str:
    """Start ``python -m raetsalt.event serve`` and return the manor's socket path."""
    args = ["-m", "raetsalt.event", "serve", "--node", node, "--sock-dir", sock_dir]
    if node_id is not None:
        args += ["--id", node_id]
    proc = Proc(args)
    procs.append(proc)
    return proc.expect("serving ").split(" ", 1)[1]


def start_script(procs: list[Proc], path: str, env: dict[str, str] | None = None) -> Proc:
    proc = Proc([path], env=env)
    procs.append(proc)
    return proc
