"""What the benchmarks read about the daemons they start (Linux ``/proc``), and how they
stop them."""

from __future__ import annotations

import os
import signal
import subprocess


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s children (the master's automation process)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def terminate(proc: subprocess.Popen[str], timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
