"""The shipped systemd units restart a daemon that dies (the daemons contain a failing
step themselves; a crash that still escapes is systemd's to restart), but not one that
exits because its key was rejected (77) or its config is unusable (78): a restart
cannot fix those."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from raetsalt.cli.daemon import EXIT_CONFIG
from raetsalt.daemon.service import EXIT_REJECTED

UNITS = Path(__file__).resolve().parents[1] / "conf" / "systemd"


def unit(node: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / f"raetsalt-{node}.service")
    return parser


@pytest.mark.parametrize("node, kept", [("master", {EXIT_CONFIG}),
                                        ("minion", {EXIT_REJECTED, EXIT_CONFIG})])
def test_a_dead_daemon_is_restarted_but_not_a_rejected_or_misconfigured_one(
        node: str, kept: set[int]) -> None:
    service = unit(node)["Service"]
    assert service["Restart"] == "on-failure"
    assert {int(code) for code in service["RestartPreventExitStatus"].split()} == kept
    assert unit(node)["Unit"]["StartLimitIntervalSec"] == "0"  # never gives up
    assert service["WorkingDirectory"] == "/"
    assert service["ExecStart"].split()[0].endswith(f"/raetsalt-{node}")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
@pytest.mark.parametrize("node", ["master", "minion"])
def test_systemd_accepts_the_unit_without_a_warning(tmp_path: Path, node: str) -> None:
    script = Path(sys.executable).with_name(f"raetsalt-{node}")
    text = (UNITS / f"raetsalt-{node}.service").read_text()
    text = text.replace(f"/usr/local/bin/raetsalt-{node}", str(script))
    path = tmp_path / f"raetsalt-{node}.service"
    path.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
