"""Restarts with real processes: either side restarts (new process, same keep) and
the session comes back with no operator action."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.ports import port_in, retry_in_use

from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import Allowed
from raetsalt.keep.records import AutoMode

pytestmark = pytest.mark.integration


def _start_main(keep: Path, port: int = 0) -> tuple[subprocess.Popen[str], int]:
    """``raetsalt-road listen`` on ``port`` (0: a free one); the process and its port."""

    def start() -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "raetsalt.cli.road", "listen", "--ha", f"127.0.0.1:{port}",
             "--keep", str(keep), "--name", "main", "--auto-accept", "--echo"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        return proc, proc.stderr.readline()

    def in_use(started: tuple[subprocess.Popen[str], str]) -> bool:
        proc, line = started
        if "address already in use" not in line:
            return False
        proc.wait()
        return True

    proc, line = retry_in_use(start, in_use)  # a restart binds the port it had
    assert "listening on" in line, line  # bound and serving
    return proc, port_in(line)


def _echo(stack: RoadStack, body: dict[str, object], timeout: float = 15.0) -> object:
    stack.send("main", body)
    for message in stack.messages(timeout=timeout):
        if message.body == body:
            return message.body
    raise AssertionError(f"no echo of {body} within {timeout} s")


@contextmanager
def _minion(tmp_path: Path, port: int) -> Iterator[RoadStack]:
    """A minion estate (its keep under ``tmp_path``) connected to the main at ``port``."""
    with RoadStack(
        tmp_path / "minion", ("127.0.0.1", 0), name="minion", auto=AutoMode.ONCE
    ) as stack:
        stack.connect(("127.0.0.1", port), name="main")
        yield stack


def test_main_killed_and_restarted_with_its_keep(tmp_path: Path) -> None:
    main, port = _start_main(tmp_path / "main")
    try:
        with _minion(tmp_path, port) as stack:
            assert _echo(stack, {"before": 1}) == {"before": 1}
            main.send_signal(signal.SIGKILL)
            main.wait()
            main, _ = _start_main(tmp_path / "main", port)
            # The minion finds out by itself (alive -> "unallowed" -> new allow).
            stack.run_until(lambda evs: any(isinstance(e, Allowed) for e in evs), timeout=15)
            assert _echo(stack, {"after": 2}) == {"after": 2}
    finally:
        main.kill()
        main.wait()


def test_minion_restarted_with_its_keep(tmp_path: Path) -> None:
    main, port = _start_main(tmp_path / "main")
    try:
        with _minion(tmp_path, port) as stack:
            assert _echo(stack, {"first": "life"}) == {"first": "life"}
        # A new minion process would do exactly this: same keep, connect again.
        with RoadStack(tmp_path / "minion", ("127.0.0.1", 0), auto=AutoMode.ONCE) as stack:
            assert stack.road.name == "minion"
            stack.connect(("127.0.0.1", port), name="main")
            assert _echo(stack, {"second": "life"}) == {"second": "life"}
    finally:
        main.send_signal(signal.SIGTERM)
        assert main.wait(timeout=5) == 0
