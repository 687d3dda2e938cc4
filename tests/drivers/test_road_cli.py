"""raetsalt-road in subprocesses: listen + send/ping, and the exit codes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raetsalt.cli.road import EXIT_PENDING, EXIT_REJECTED, EXIT_UNREACHABLE

pytestmark = pytest.mark.integration

ROAD = [sys.executable, "-m", "raetsalt.cli.road"]


def road(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ROAD, *args], capture_output=True, text=True, timeout=timeout)


class Listener:
    def __init__(self, proc: subprocess.Popen[str], ha: str, keep: Path) -> None:
        self.proc, self.ha, self.keep = proc, ha, keep

    def line(self) -> dict:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def hangup(self) -> None:
        """SIGHUP: listen applies the keep's decisions; wait for its note saying so."""
        assert self.proc.stderr is not None
        self.proc.send_signal(signal.SIGHUP)
        lines = []
        while "re-read the keep" not in (line := self.proc.stderr.readline()):
            assert line and len(lines) < 20, lines
            lines.append(line)
        assert "1 decision(s) applied" in line


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Callable[..., Listener]]:
    procs: list[subprocess.Popen[str]] = []

    def start(*flags: str, keep: Path | None = None) -> Listener:
        keep = keep or tmp_path / f"listener{len(procs)}"
        proc = subprocess.Popen(
            [*ROAD, "listen", "--ha", "127.0.0.1:0", "--keep", str(keep), "--name", "master",
             *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        procs.append(proc)
        assert proc.stderr is not None
        first = proc.stderr.readline()  # blocks until the socket is bound
        found = re.search(r"listening on (\S+) as master", first)
        assert found, first
        return Listener(proc, found.group(1), keep)

    yield start
    for proc in procs:
        proc.terminate()
        try:
            assert proc.wait(timeout=5) == 0  # SIGTERM is a clean stop
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_send_wait_gets_the_echo_and_ping_measures(listener, tmp_path: Path) -> None:
    srv = listener("--auto-accept", "--echo")
    keep = tmp_path / "client"
    body = {"fun": "test.ping", "blob": "x" * 3000}
    done = road("send", "--to", srv.ha, "--keep", str(keep), "--name", "minion", "--wait",
                json.dumps(body))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"from": "master", "body": body}
    assert srv.line() == {"from": "minion", "body": body}
    # the client cached the master's key on first sight, the master accepted ours once
    assert json.loads((keep / "role" / "master.json").read_text())["acceptance"] == "accepted"
    assert json.loads((srv.keep / "role" / "minion.json").read_text())["acceptance"] == "accepted"

    pinged = road("ping", "--to", srv.ha, "--keep", str(keep), "--count", "3",
                  "--interval", "0.05")
    assert pinged.returncode == 0, pinged.stderr
    times = re.findall(r"alive from master \(\S+\): seq=\d time=([0-9.]+) ms", pinged.stdout)
    assert len(times) == 3 and all(0 < float(t) < 1000 for t in times)
    assert "3 probes, 3 answered" in pinged.stdout


def test_pending_then_accepted_then_rejected(listener, tmp_path: Path) -> None:
    from raetsalt.keep.store import FileKeep

    srv = listener()  # no auto-accept: keys wait for the operator
    keep = tmp_path / "client"
    done = road("send", "--to", srv.ha, "--keep", str(keep), "--name", "minion", "--timeout",
                "5", '{"a": 1}')
    assert done.returncode == EXIT_PENDING
    assert f"key pending on {srv.ha}: accept it there" in done.stderr
    assert json.loads((srv.keep / "role" / "minion.json").read_text())["acceptance"] == "pending"

    FileKeep(srv.keep).accept_role("minion")  # what the key tool does, then tell listen
    srv.hangup()
    done = road("send", "--to", srv.ha, "--keep", str(keep), '{"a": 2}')
    assert done.returncode == 0, done.stderr
    assert srv.line() == {"from": "minion", "body": {"a": 2}}

    FileKeep(srv.keep).reject_role("minion")
    srv.hangup()
    done = road("ping", "--to", srv.ha, "--keep", str(keep), "--timeout", "5")
    assert done.returncode == EXIT_REJECTED, done.stderr
    assert "rejected" in done.stderr


def test_unreachable_and_bad_arguments(tmp_path: Path) -> None:
    from raetpeer_client import free_udp_port

    port = free_udp_port()
    done = road("send", "--to", f"127.0.0.1:{port}", "--timeout", "0.5", '{"a": 1}')
    assert done.returncode == EXIT_UNREACHABLE
    assert done.stderr.strip().splitlines() == [
        f"raetsalt-road: no session with 127.0.0.1:{port} within 0.5 s "
        "(nothing listening, or packets lost)"
    ]
    assert road("send", "--to", "127.0.0.1:1", "[1, 2]").returncode == 2
    assert road("ping", "--to", "nowhere").returncode == 2
    assert road("listen", "--keep", str(tmp_path)).returncode == 2  # --ha is required


def test_listen_refuses_a_port_in_use(listener) -> None:
    srv = listener()
    done = road("listen", "--ha", srv.ha, "--keep", str(srv.keep.with_name("other")))
    assert done.returncode == 1
    assert "address already in use" in done.stderr
