"""The systemd units shipped in conf/systemd/ pass ``systemd-analyze verify`` (every key known,
every value well formed), with ExecStart pointed at this venv's commands."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONF = Path(__file__).resolve().parent.parent / "conf" / "systemd"


@pytest.mark.parametrize("node", ["master", "minion"])
def test_unit_is_valid(tmp_path: Path, node: str) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    text = (CONF / f"raetsalt-{node}.service").read_text()
    command = Path(sys.executable).with_name(f"raetsalt-{node}")
    assert f"ExecStart=/usr/local/bin/raetsalt-{node} -c /etc/raetsalt\n" in text
    unit = tmp_path / f"raetsalt-{node}.service"
    unit.write_text(text.replace(f"/usr/local/bin/raetsalt-{node}", str(command)))
    done = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                          timeout=60)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if unit.name in line or "Unknown" in line]
    assert done.returncode == 0 and not problems, done.stdout + done.stderr
