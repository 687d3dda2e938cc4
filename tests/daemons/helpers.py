"""Real daemons for tests: config dirs under a short temp dir, processes whose console
log is read line by line (``Daemon.expect``), and the commands run against them.

Used by tests/daemons and tests/remote.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bus.helpers import Proc
from helpers.ports import HeldPort, port_in, retry_in_use

from raetsalt.config import load_node_config
from raetsalt.keep.store import FileKeep
from raetsalt.paths import keep_dir

# Short probing and back-off so restarts are noticed within a second or two.  Minions run
# raetsalt's native functions (as without salt installed) unless a test sets
# execution_mode in minion.d/ (tests/remote/test_salt.py).
MINION_TUNING = ("raet_alive_period: 1.0\nacceptance_wait_time: 1.0\nrandom_reauth_delay: 2.0\n"
                 "execution_mode: native\n")


class Daemon:
    """A daemon process whose stderr (the console log) is read line by line."""

    def __init__(self, node: str, confdir: Path, *extra: str, cwd: Path | None = None
                 ) -> None:
        """With ``cwd``, the installed ``raetsalt-<node>`` script is run from there (as an
        operator would), else ``python -m raetsalt.cli.<node>`` (``raetsalt.api.daemon``
        for the REST API)."""
        self.node = node
        self.confdir = confdir
        program = ([str(Path(sys.executable).with_name(f"raetsalt-{node}"))] if cwd
                   else [sys.executable, "-m",
                         "raetsalt.api.daemon" if node == "api" else f"raetsalt.cli.{node}"])
        self.popen = subprocess.Popen(
            [*program, "-c", str(confdir), "-l", "info", *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            cwd=cwd,
        )
        assert self.popen.stderr is not None
        os.set_blocking(self.popen.stderr.fileno(), False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.popen.stderr, selectors.EVENT_READ)
        self._buffer = b""
        self.lines: list[str] = []
        self._read = 0  # lines already matched by expect()

    def _pull(self, timeout: float) -> bool:
        assert self.popen.stderr is not None
        if not self._selector.select(timeout):
            return False
        chunk = self.popen.stderr.read()
        if not chunk:
            return False
        *complete, self._buffer = (self._buffer + chunk).split(b"\n")
        self.lines.extend(line.decode(errors="replace") for line in complete)
        return True

    def expect(self, fragment: str, timeout: float = 5.0) -> str:
        """The next log line (after the last one matched) containing ``fragment``."""
        deadline = time.monotonic() + timeout
        while True:
            for index in range(self._read, len(self.lines)):
                if fragment in self.lines[index]:
                    self._read = index + 1
                    return self.lines[index]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (not self._pull(remaining) and self.popen.poll() is not None):
                self._pull(0.1)
                raise AssertionError(
                    f"{self.node}: no line with {fragment!r} within {timeout} s; "
                    f"rc={self.popen.poll()} log:\n" + "\n".join(self.lines[-30:])
                )

    def peek(self, fragments: tuple[str, ...], timeout: float = 30.0) -> str | None:
        """The first log line with one of ``fragments``, without consuming it (``expect``
        still finds it); None if the process ended (or ``timeout`` passed) before."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for line in self.lines[seen:]:
                if any(fragment in line for fragment in fragments):
                    return line
            seen = len(self.lines)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (not self._pull(remaining) and self.popen.poll() is not None):
                return None

    def expect_each(self, fragments: list[str], timeout: float = 5.0) -> None:
        """Every fragment appears in some later line, in any order."""
        deadline = time.monotonic() + timeout
        start = self._read
        for fragment in fragments:
            self._read = start
            self.expect(fragment, max(0.0, deadline - time.monotonic()))
        self._read = len(self.lines)

    def drain(self) -> list[str]:
        while self._pull(0):
            pass
        return self.lines

    def terminate(self) -> int:
        """SIGTERM, and the exit code once the daemon has stopped (it must stop by itself:
        the generous wait only keeps a hung daemon from hanging the suite)."""
        self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(60)

    def bind_failed(self) -> bool:
        """The daemon could not bind its port ("address already in use") and is gone;
        False once it serves (for ``helpers.ports.retry_in_use``)."""
        line = self.peek(("serving on", "address already in use"))
        if line is None or "serving on" in line:
            return False
        self.popen.wait(60)
        self.stop()
        return True

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        self._selector.close()
        if self.popen.stderr is not None:
            self.popen.stderr.close()


class World:
    """Config dirs, daemons and helper processes of one test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # The master's raet_port: 0 (the master binds a free port and World reads it from
        # the "serving on" line) until a master has bound one or a minion needed it first.
        self.port = 0
        self._held: HeldPort | None = None
        self.daemons: list[Daemon] = []
        self.procs: list[Proc] = []

    def master_dir(self, extra: str = "", alive: float = 1.0) -> Path:
        confdir = self.root / "ma"
        confdir.mkdir(exist_ok=True)
        (confdir / "master").write_text(
            f"root_dir: {confdir}\ninterface: 127.0.0.1\nid: themaster\n"
            f"raet_port: {self.port}\nraet_alive_period: {alive}\n{extra}"
        )
        return confdir

    def minion_dir(self, name: str, minion_id: str, extra: str = "", alive: float = 1.0
                   ) -> Path:
        confdir = self.root / name
        confdir.mkdir(exist_ok=True)
        if not self.port:  # no master yet: hold a port for it until it starts
            self._held = HeldPort()
            self.port = self._held.port
        tuning = MINION_TUNING.replace("raet_alive_period: 1.0", f"raet_alive_period: {alive}")
        (confdir / "minion").write_text(
            f"id: {minion_id}\nroot_dir: {confdir}\nraet_port: 0\n"
            f"master: 127.0.0.1:{self.port}\n{tuning}{extra}"
        )
        return confdir

    def cli(self, tool: str, confdir: Path, *args: str, timeout: float = 30.0
            ) -> subprocess.CompletedProcess[str]:
        """Run ``raetsalt``/``raetsalt-run``/``raetsalt-call`` (``tool``) with ``-c confdir``."""
        command = [sys.executable, "-m", f"raetsalt.cli.{tool}", "-c", str(confdir), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)

    def start(self, node: str, confdir: Path, *extra: str, cwd: Path | None = None
              ) -> Daemon:
        """Start ``raetsalt-<node> -c confdir -l info`` (``extra`` arguments after; in
        ``cwd`` if given)."""
        if node != "master":
            return self._spawn(node, confdir, *extra, cwd=cwd)
        if self._held is not None:
            self._held.release()
            self._held = None
        if not self.port:
            daemon = self._spawn(node, confdir, *extra, cwd=cwd)
            line = daemon.peek(("serving on",))
            if line is not None:
                self.port = port_in(line)
            return daemon
        # A config written before the port was known (a restart with the same config):
        # the master comes back on the port its minions know.
        config = confdir / "master"
        config.write_text(config.read_text().replace("raet_port: 0\n", f"raet_port: {self.port}\n"))
        # The port it had before, or the one held for it: someone else may have bound it
        # since, for a moment.
        return retry_in_use(lambda: self._spawn(node, confdir, *extra, cwd=cwd), self._in_use)

    def _spawn(self, node: str, confdir: Path, *extra: str, cwd: Path | None = None
               ) -> Daemon:
        daemon = Daemon(node, confdir, *extra, cwd=cwd)
        self.daemons.append(daemon)
        return daemon

    def _in_use(self, daemon: Daemon) -> bool:
        """Did ``daemon`` fail to bind its port because another socket holds it?"""
        line = daemon.peek(("serving on", "address already in use"))
        if line is None or "serving on" in line:
            return False
        daemon.popen.wait(60)
        daemon.stop()
        self.daemons.remove(daemon)
        return True

    def master_keep(self) -> FileKeep:
        return FileKeep(keep_dir(load_node_config(self.root / "ma", "master")))

    def script(self, name: str, text: str, env: dict[str, str] | None = None) -> Proc:
        path = self.root / name
        path.write_text(text)
        proc = Proc([str(path)], env=env)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()
        for daemon in self.daemons:
            daemon.stop()
        if self._held is not None:
            self._held.release()



def udp_sockets(port: int) -> list[tuple[str, str]]:
    """The IPv4 UDP sockets bound to ``port``, as the kernel lists them in /proc/net/udp:
    ``(local "addr:port", remote "addr:port")``; the remote is ``0.0.0.0:0`` unless the
    socket is connected."""

    def address(field: str) -> str:
        host, _, number = field.partition(":")
        return f"{socket.inet_ntoa(struct.pack('<I', int(host, 16)))}:{int(number, 16)}"

    found = []
    for line in Path("/proc/net/udp").read_text().splitlines()[1:]:
        local, remote = line.split()[1:3]
        if int(local.partition(":")[2], 16) == port:
            found.append((address(local), address(remote)))
    return found


def key_tool(confdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``raetsalt-key -c confdir ...`` in another process, as an operator runs it."""
    tool = Path(sys.executable).with_name("raetsalt-key")
    return subprocess.run([str(tool), "-c", str(confdir), *args], capture_output=True,
                          text=True, timeout=30)


def ping(world: World, minion: str = "minion1", timeout: str = "5") -> bool:
    """``raetsalt MINION test.ping`` through the master of ``world``: did it answer?"""
    done = world.cli("salt", world.root / "ma", minion, "test.ping", "--out", "json",
                     "-t", timeout)
    return done.returncode == 0 and json.loads(done.stdout or "{}").get(minion) is True


@contextmanager
def make_world() -> Iterator[World]:
    root = Path(tempfile.mkdtemp(prefix="rsd", dir="/tmp"))  # socket paths stay short
    w = World(root)
    try:
        yield w
    finally:
        w.close()
        shutil.rmtree(root, ignore_errors=True)
