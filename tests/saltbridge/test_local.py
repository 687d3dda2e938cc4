"""``raetsalt-call --local`` runs Salt's functions masterless, as ``salt-call --local``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("salt")


def _call(confdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raetsalt.cli.call", "-c", str(confdir),
                           "--local", *args, "--out", "json"], capture_output=True, text=True,
                          timeout=120)


def test_states_and_pillar_from_the_minions_own_roots(tmp_path: Path) -> None:
    (tmp_path / "srv" / "pillar").mkdir(parents=True)
    (tmp_path / "srv" / "salt").mkdir()
    (tmp_path / "srv" / "pillar" / "top.sls").write_text("base:\n  '*':\n    - p\n")
    (tmp_path / "srv" / "pillar" / "p.sls").write_text("colour: green\n")
    out = tmp_path / "out.txt"
    (tmp_path / "srv" / "salt" / "x.sls").write_text(
        f"{out}:\n  file.managed:\n    - contents: \"{{{{ pillar['colour'] }}}}\"\n"
        "    - template: jinja\n")
    (tmp_path / "minion").write_text(f"id: loc1\nroot_dir: {tmp_path}\n")
    done = _call(tmp_path, "pillar.items", "unmask=True")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"local": {"colour": "green"}}
    done = _call(tmp_path, "state.apply", "x")
    assert done.returncode == 0, done.stderr
    [state] = json.loads(done.stdout)["local"].values()
    assert state["result"] is True and out.read_text() == "green\n"
    missing = _call(tmp_path, "nosuch.function")
    assert missing.returncode == 255 and "'nosuch.function' is not available." in missing.stderr
