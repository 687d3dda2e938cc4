"""Drive a real raet 0.6.8 peer (tests/raetpeer.py) in a subprocess from tests and benchmarks.

Typical use in a test module (tests/conftest.py registers this module as a plugin, so
the ``raet_peer`` fixture needs no import)::

    def test_x(raet_peer):
        main = raet_peer("main", main=True, auto="once")
        minion = raet_peer("minion", auto="once")
        minion.join(main.ha)
        minion.wait_for("joined", remote="main")

Outside pytest use :func:`raet_peers` (a context manager yielding the same
start function) or :class:`RaetPeer` directly (it is a context manager too).

Waiting never sleeps: a reader thread parses the peer's stdout into a queue and
:meth:`RaetPeer.wait_for` blocks on that queue until a matching event arrives or
the timeout expires. Events that did not match stay in the backlog and can be
matched by later waits, so the order in which a test waits does not matter.
Every peer is killed at teardown, whatever happened.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PEER_SCRIPT = Path(__file__).resolve().with_name("raetpeer.py")
DEFAULT_TIMEOUT = 10.0
_EOF = object()


class PeerError(AssertionError):
    """The peer exited, reported an error we waited on, or an event did not arrive in time."""


def raet_available() -> bool:
    """True when raet 0.6.8 and libnacl are importable by the current interpreter."""
    return all(importlib.util.find_spec(m) is not None for m in ("raet", "libnacl", "ioflo"))


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port that was free a moment ago (prefer passing port 0 to the peer)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class RaetPeer:
    """One raetpeer.py subprocess.

    `options` become command-line flags of raetpeer.py: ``main=True`` -> ``--main``,
    ``auto="once"`` -> ``--auto once``, ``idle_wait=0`` -> ``--idle-wait 0``;
    False/None values are left out.
    """

    def __init__(self, name: str, keep: str | os.PathLike[str], *,
                 ha: tuple[str, int] = ("127.0.0.1", 0), **options: Any) -> None:
        self.name = name
        self.keep = Path(keep)
        self.bind_ha = ha
        self.options = options
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_event: dict[str, Any] = {}
        self.events: list[dict[str, Any]] = []   # every event ever received, in order
        self._backlog: list[dict[str, Any]] = []  # received but not yet matched by wait_for
        self._queue: queue.Queue[Any] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._exited = False
        self._stderr_path = ""

    # ------------------------------------------------------------ lifecycle
    def argv(self) -> list[str]:
        args = [sys.executable, str(PEER_SCRIPT), "--name", self.name,
                "--ha", f"{self.bind_ha[0]}:{self.bind_ha[1]}", "--keep", str(self.keep)]
        for key, value in self.options.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is not None and value is not False:
                args.extend([flag, str(value)])
        return args

    def start(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Start the process and wait for its ``ready`` event (returned)."""
        self.keep.mkdir(parents=True, exist_ok=True)
        fd, self._stderr_path = tempfile.mkstemp(prefix=f"raetpeer-{self.name}-",
                                                 suffix=".stderr")
        with os.fdopen(fd, "wb") as stderr:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=stderr)
        self._reader = threading.Thread(target=self._read, name=f"raetpeer-{self.name}",
                                        daemon=True)
        self._reader.start()
        self.ready_event = self.wait_for("ready", timeout=timeout)
        return self.ready_event

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                event = {"event": "_garbage", "line": raw.decode("utf-8", "replace")}
            self._queue.put(event)
        self._queue.put(_EOF)

    def close(self, timeout: float = 3.0) -> None:
        """Ask the peer to quit, then make sure it is gone (kill after `timeout`)."""
        proc = self.proc
        if proc is None:
            return
        try:
            if proc.poll() is None and proc.stdin is not None:
                try:
                    proc.stdin.close()  # EOF = quit
                except OSError:
                    pass
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            if self._reader is not None:
                self._reader.join(timeout=1.0)
            with contextlib.suppress(OSError):
                os.unlink(self._stderr_path)

    def __enter__(self) -> RaetPeer:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------- properties
    @property
    def ha(self) -> tuple[str, int]:
        """The address the peer is bound to (from its ready event)."""
        host, port = self.ready_event["ha"]
        return (host, int(port))

    @property
    def verhex(self) -> str:
        return str(self.ready_event["verhex"])

    @property
    def pubhex(self) -> str:
        return str(self.ready_event["pubhex"])

    def stderr_tail(self, limit: int = 4000) -> str:
        """Last bytes the peer wrote to stderr (raet console, tracebacks)."""
        try:
            with open(self._stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    # ------------------------------------------------------------ commands
    def command(self, cmd: str, **fields: Any) -> None:
        """Write one JSON command line to the peer's stdin."""
        if self.proc is None or self.proc.stdin is None:
            raise PeerError(f"peer {self.name} not started")
        line = json.dumps({"cmd": cmd, **fields}, separators=(",", ":")) + "\n"
        try:
            self.proc.stdin.write(line.encode("utf-8"))
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise PeerError(f"peer {self.name} is gone: {exc}\n{self.stderr_tail()}") from exc

    def join(self, ha: tuple[str, int] | list[Any], **fields: Any) -> dict[str, Any]:
        """Create a vacuous remote for the main at `ha` and join it; returns ``joining``."""
        self.command("join", ha=[ha[0], int(ha[1])], **fields)
        return self.wait_for("joining")

    def allow(self, remote: str | None = None, **fields: Any) -> dict[str, Any]:
        self.command("allow", remote=remote, **fields)
        return self.wait_for("allowing")

    def send(self, remote: str, body: dict[str, Any], count: int = 1, *,
             window: int = 0, seq: str | None = None, ident: Any = None) -> dict[str, Any]:
        """Queue `count` copies of `body` (``seq``: store the copy index under that key).

        With ``window`` > 0 at most that many message transactions are in flight at once.
        Returns the ``queued`` event; wait for ``send_done`` (same ``id``) for completion.
        """
        self.command("send", remote=remote, body=body, count=count, window=window,
                     seq=seq, id=ident)
        return self.wait_for("queued", id=ident)

    def accept(self, role: str) -> dict[str, Any]:
        """Operator acceptance of `role` in this peer's keep (like salt-key -a)."""
        self.command("accept", role=role)
        return self.wait_for("role", role=role)

    def reject(self, role: str) -> dict[str, Any]:
        self.command("reject", role=role)
        return self.wait_for("role", role=role)

    def stats(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        ident = f"stats-{time.monotonic_ns()}"
        self.command("stats", id=ident)
        return self.wait_for("stats", id=ident, timeout=timeout)

    def wait_idle(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Wait until the peer has no queued messages and no message transactions."""
        ident = f"idle-{time.monotonic_ns()}"
        self.command("wait_idle", id=ident)
        return self.wait_for("idle", id=ident, timeout=timeout)

    # -------------------------------------------------------------- events
    def _pull(self, deadline: float) -> bool:
        """Move one event from the reader queue to the backlog; False on timeout."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            item = self._queue.get(timeout=remaining)
        except queue.Empty:
            return False
        if item is _EOF:
            self._exited = True
            return True
        self.events.append(item)
        self._backlog.append(item)
        return True

    def wait_for(self, event: str | None = None, *, timeout: float = DEFAULT_TIMEOUT,
                 predicate: Callable[[dict[str, Any]], bool] | None = None,
                 **match: Any) -> dict[str, Any]:
        """Return (and consume) the first event named `event` whose fields equal `match`.

        Raises PeerError on timeout or when the peer exits first.
        """
        def matches(ev: dict[str, Any]) -> bool:
            if event is not None and ev.get("event") != event:
                return False
            if any(ev.get(k) != v for k, v in match.items()):
                return False
            return predicate is None or predicate(ev)

        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self._backlog):
                if matches(ev):
                    del self._backlog[i]
                    return ev
            if self._exited:
                raise PeerError(f"peer {self.name} exited while waiting for {event} {match}; "
                                f"backlog={self._backlog[-10:]}\n{self.stderr_tail()}")
            if not self._pull(deadline):
                raise PeerError(f"peer {self.name}: no {event} {match} within {timeout} s; "
                                f"backlog={self._backlog[-10:]}\n{self.stderr_tail()}")

    def wait_messages(self, count: int, *, timeout: float = DEFAULT_TIMEOUT,
                      **match: Any) -> list[dict[str, Any]]:
        """Wait for `count` ``message`` events (in arrival order)."""
        deadline = time.monotonic() + timeout
        return [self.wait_for("message", timeout=max(0.0, deadline - time.monotonic()), **match)
                for _ in range(count)]

    def errors(self) -> list[dict[str, Any]]:
        """``error`` events received so far (drains the reader queue first)."""
        while not self._queue.empty():
            self._pull(time.monotonic() + 0.001)
        return [ev for ev in self.events if ev.get("event") == "error"]


@contextlib.contextmanager
def raet_peers(base_dir: str | os.PathLike[str]) -> Iterator[Callable[..., RaetPeer]]:
    """Yield ``start(name, **options) -> RaetPeer``; every started peer is killed on exit.

    Each peer's keep is ``base_dir/<name>``.
    """
    started: list[RaetPeer] = []

    def start(name: str, **options: Any) -> RaetPeer:
        peer = RaetPeer(name, Path(base_dir) / name, **options)
        started.append(peer)
        peer.start()
        return peer

    try:
        yield start
    finally:
        for peer in reversed(started):
            peer.close()


try:
    import pytest
except ImportError:  # usable from benchmarks without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def raet_peer(tmp_path: Path) -> Iterator[Callable[..., RaetPeer]]:
        """Fixture: a function starting raet 0.6.8 peers, all killed at teardown."""
        if not raet_available():
            pytest.skip("raet 0.6.8 / libnacl / ioflo not installed")
        with raet_peers(tmp_path) as start:
            yield start
