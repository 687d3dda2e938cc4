"""``raetsalt-run state.orchestrate`` end to end: Salt's orchestrate with ``salt.function``,
``salt.state``, ``salt.runner`` and ``require`` against real daemons; the output compared
with what Salt's own highstate outputter prints for the same return (timings masked),
and Salt's exit codes (0; 1 when a step failed)."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemons.helpers import World, make_world

from raetsalt.cli import run as run_cli
from remote.cluster import run_as, started_cluster

pytest.importorskip("salt")
salt_output = pytest.importorskip("salt.output")
salt_config = pytest.importorskip("salt.config")
pytestmark = pytest.mark.integration

MASTER = """\
auto_accept: true
file_roots:
  base: [{srv}]
publisher_acl:
  nobody:
    - test.ping
"""
PILLARED = """\
greet:
  salt.function:
    - name: test.echo
    - tgt: {{ pillar['who'] }}
    - arg:
      - {{ salt['pillar.get']('word', 'none') }}
"""
AS_NOBODY = """\
allowed:
  salt.function:
    - name: test.ping
    - tgt: web1

denied:
  salt.function:
    - name: cmd.run
    - tgt: web1
    - arg:
      - id
"""
DEPLOY = """\
build:
  salt.function:
    - name: cmd.run
    - tgt: web1
    - arg:
      - echo built > {out}/built && cat {out}/built

install:
  salt.state:
    - tgt: db1
    - sls: marker
    - require:
      - salt: build

check:
  salt.function:
    - name: test.ping
    - tgt: '*'
    - require:
      - salt: install

who:
  salt.runner:
    - name: manage.up
"""
MARKER = """\
{out}/installed:
  file.managed:
    - contents: installed from {{{{ grains['id'] }}}}
"""
FAILING = """\
broken:
  salt.function:
    - name: cmd.run
    - tgt: web1
    - arg:
      - exit 3
    - kwarg:
        python_shell: true

after:
  salt.function:
    - name: test.ping
    - tgt: db1
    - require:
      - salt: broken
"""


@dataclass
class Orch:
    world: World
    master_conf: Path
    out: Path
    home: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.world.cli("run", self.master_conf, "-t", "60", *args, timeout=180.0)


@pytest.fixture(scope="module")
def orch() -> Iterator[Orch]:
    with make_world() as world:
        srv, out = world.root / "srv", world.root / "out"
        (srv / "orch").mkdir(parents=True)
        out.mkdir()
        (srv / "orch" / "deploy.sls").write_text(DEPLOY.format(out=out))
        (srv / "orch" / "failing.sls").write_text(FAILING)
        (srv / "marker.sls").write_text(MARKER.format(out=out))
        (srv / "orch" / "acl.sls").write_text(AS_NOBODY)
        (srv / "orch" / "pillared.sls").write_text(PILLARED)
        os.chmod(world.root, 0o755)  # other users read the config and the SLS files
        home = world.root / "home"
        home.mkdir()
        os.chown(home, pwd.getpwnam("nobody").pw_uid, -1)
        with started_cluster(world, MASTER.format(srv=srv),
                             {"web1": "roles: [web]", "db1": "roles: [db]"},
                             {"web1": "execution_mode: auto\n",
                              "db1": "execution_mode: salt\n"}) as up:
            yield Orch(world, up.master_conf, out, home)


def _mask(text: str) -> str:
    """Salt's timing fields, which differ from run to run, and the order of the minions
    a function ran on (the order their returns arrived in)."""
    text = re.sub(r"(Started|Duration|Total run time): *.*", r"\1: X", text)
    text = re.sub(r"ran on ([^.\n]+)\.", lambda m: "ran on " + ", ".join(
        sorted(m.group(1).split(", "))) + ".", text)
    return re.sub(r"(start_time|duration):\n( +)\S.*", r"\1:\n\2X", text)


def salt_prints(data: Any, retcode: int) -> str:
    opts = dict(salt_config.DEFAULT_MASTER_OPTS)
    opts["color"] = False
    return salt_output.try_printout(data, "highstate", opts, _retcode=retcode) or ""


def test_three_steps_with_require(orch: Orch) -> None:
    done = orch.run("state.orchestrate", "orch.deploy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (orch.out / "built").read_text() == "built\n"
    assert (orch.out / "installed").read_text() == "installed from db1\n"
    # The same orchestration as data; Salt's outputter prints it as raetsalt did.
    (orch.out / "installed").unlink()
    again = orch.run("state.orch", "orch.deploy", "--out", "json")
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)
    [(master_id, states)] = data.items()
    assert master_id.endswith("_master")
    by_id = {s["__id__"]: s for s in states.values()}
    assert [by_id[i]["__run_num__"] for i in ("build", "install", "check", "who")] == [
        0, 1, 2, 3]
    assert all(s["result"] is True for s in states.values())
    assert by_id["build"]["changes"]["ret"] == {"web1": "built"}
    assert by_id["check"]["changes"]["ret"] == {"web1": True, "db1": True}
    assert by_id["who"]["changes"]["return"] == ["db1", "web1"]
    assert _mask(done.stdout) == _mask(salt_prints(data, 0) + "\n")
    assert "Succeeded: 4 (changed=4)\nFailed:    0\n" in done.stdout


def test_test_true_changes_nothing(orch: Orch) -> None:
    (orch.out / "installed").unlink()
    done = orch.run("state.orchestrate", "orch.deploy", "test=True", "saltenv=base")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (orch.out / "installed").exists()
    assert "Result: None" in done.stdout and "would be executed on target" in done.stdout


def test_pillar_on_the_command_line(orch: Orch) -> None:
    done = orch.run("state.orch", "orch.pillared", 'pillar={"who": "db1", "word": "hi"}',
                    "--out", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    [states] = json.loads(done.stdout).values()
    [greet] = states.values()
    assert greet["changes"]["ret"] == {"db1": "hi"}


def test_a_failing_step_fails_the_run(orch: Orch) -> None:
    done = orch.run("state.orch", "orch.failing")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Failed:    2\n" in done.stdout
    assert "One or more requisite failed" in done.stdout
    data = json.loads(orch.run("state.orch", "orch.failing", "--out", "json").stdout)
    assert _mask(done.stdout) == _mask(salt_prints(data, 1) + "\n")


def test_bad_calls_are_one_line(orch: Orch) -> None:
    done = orch.run("state.orch")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "needs the SLS" in done.stderr
    missing = orch.run("state.orch", "orch.nosuch")
    assert missing.returncode == 1
    assert "No matching sls found for 'orch.nosuch'" in missing.stdout
    bad = orch.run("state.orch", "orch.deploy", "pillar=notadict")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1
    assert "Pillar data must be formatted as a dictionary" in bad.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user")
def test_orchestrate_has_the_callers_rights(orch: Orch, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    # This test's Python lives under /root, which other users cannot read: run the same
    # orchestration once as root in this process, so that the modules it imports are
    # already loaded in the child that becomes nobody.  Root may do both steps.
    assert run_cli.main(["-c", str(orch.master_conf), "state.orch", "orch.acl"]) == 0
    capsys.readouterr()
    code, out, err = run_as("nobody", str(orch.home), run_cli.main,
                            ["-c", str(orch.master_conf), "state.orch", "orch.acl"])
    assert code == 1 and out, out + err
    assert "Succeeded: 1 (changed=1)\nFailed:    1\n" in out
    assert "publish of 'cmd.run' to 'web1' (glob) denied" in out
