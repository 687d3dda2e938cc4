"""Salt's modules, states, pillar and ``salt://`` files over RAET, end to end: a real master
with ``file_roots`` and ``pillar_roots`` (top files) and two minions that run Salt's
loader (web1 in ``auto`` mode, db1 in ``salt`` mode), driven by the raetsalt commands.

The tests share one cluster and run in file order.  Salt (the ``salt`` extra) is the
oracle where raetsalt promises Salt's behaviour; without it these tests are skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemons.helpers import Daemon, World, make_world

from raetsalt import protocol as p
from raetsalt.config import load_node_config
from raetsalt.drivers.laneclient import CommandClient
from remote.cluster import json_docs, started_cluster

pytest.importorskip("salt")
pytestmark = pytest.mark.integration

BIG = 6 << 20
FORMULAS = Path(__file__).resolve().parent.parent / "data" / "formulas"
MASTER = """\
auto_accept: true
file_roots:
  base: [{srv}/salt]
  dev: [{srv}/dev]
pillar_roots:
  base: [{srv}/pillar]
peer:
  'web1$':
    - test.*
    - 'G@roles:db':
        - state.apply
  'db1$':
    - test.ping
"""
STATES = {
    "top.sls": "base:\n  'web*':\n    - web\n  'db*':\n    - db\n",
    "web/init.sls": """\
{out}/motd:
  file.managed:
    - source: salt://web/motd.j2
    - template: jinja
    - makedirs: True
announce:
  cmd.run:
    - name: cat {out}/motd > {out}/announced
    - unless: test -f {out}/announced
    - require:
      - file: {out}/motd
""",
    "web/motd.j2": "Welcome to {{ grains['id'] }} ({{ pillar['role'] }}): "
                   "{{ salt['pillar.get']('message') }}\n",
    "db/init.sls": "db-ok:\n  test.succeed_without_changes: []\n",
    "bad.sls": "{out}/never:\n  file.managed:\n    - source: salt://no/such/file\n",
    "_modules/mymod.py": "def hello():\n    return {'ping': __salt__['test.ping'](), "
                         "'os': __grains__['os'], 'role': __pillar__.get('role')}\n",
    "_grains/colour.py": "def colour():\n    return {'colour': 'teal'}\n",
    "slow.sls": "slow:\n  cmd.run:\n    - name: sleep 10\n",
    "rtree/a.txt": "a\n",
    "rtree/sub/b.txt": "b\n",
    "tree/a.txt": "a\n",
    "tree/sub/b.txt": "b\n",
}
PILLAR = {
    "top.sls": "base:\n  'web*':\n    - web\n  'db*':\n    - db\n",
    "web.sls": "role: web\nmessage: hello from pillar\nsecret: web-only\n",
    "db.sls": "role: db\nsecret: db-only\n",
}
LOCAL_MODULE = """\
import salt.channel.client


def whoami():
    __context__['seen'] = __context__.get('seen', 0) + 1
    return {'id': __opts__['id'], 'seen': __context__['seen'],
            'cpus': __salt__['grains.get']('num_cpus')}


def hostile(loads):
    # Raw loads to the master through Salt's request channel.
    channel = salt.channel.client.ReqChannel.factory(__opts__)
    answers = []
    for load in loads:
        try:
            answers.append({'ret': channel.send(load)})
        except Exception as exc:
            answers.append({'error': str(exc)})
    return answers
"""


@dataclass
class Cluster:
    world: World
    master_conf: Path
    confs: dict[str, Path]
    out: Path
    srv: Path
    minions: dict[str, Daemon]

    def salt(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        # -t: on a busy machine Salt's first jobs may take more than the default 5 s.
        return self.world.cli("salt", self.master_conf, "-t", "30", *args, timeout=timeout)

    def json(self, *args: str) -> dict[str, Any]:
        done = self.salt(*args, "--out", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json_docs(done.stdout)

    def call(self, minion: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.world.cli("call", self.confs[minion], *args, timeout=60.0)


def _write(root: Path, files: dict[str, str], **fmt: Any) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**fmt) if fmt else text)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with make_world() as world:
        srv, out = world.root / "srv", world.root / "out"
        _write(srv / "salt", {k: v for k, v in STATES.items() if "{out}" not in v})
        _write(srv / "salt", {k: v for k, v in STATES.items() if "{out}" in v}, out=out)
        _write(srv / "pillar", PILLAR)
        _write(srv / "dev", {"only-dev.txt": "dev\n"})
        (srv / "salt" / "big.bin").write_bytes(os.urandom(BIG))
        (srv / "salt" / "rtree" / "empty").mkdir()
        shutil.copytree(FORMULAS, srv / "salt", dirs_exist_ok=True)
        (srv / "salt" / "leak").symlink_to("/etc")
        mods = world.root / "mods"
        _write(mods, {"localmod.py": LOCAL_MODULE})
        minion_d = {"web1": f"execution_mode: auto\nmodule_dirs: [{mods}]\n",
                    "db1": "execution_mode: salt\ndisable_modules: [alternatives]\n"
                           "use_superseded: [module.run]\n"}
        with started_cluster(world, MASTER.format(srv=srv),
                             {"web1": "roles: [web]", "db1": "roles: [db]"}, minion_d) as up:
            yield Cluster(world, up.master_conf, up.confs, out, srv, up.minions)


def test_grains_are_salts_and_target(cluster: Cluster) -> None:
    grains = cluster.json("web1", "grains.items")["web1"]
    assert len(grains) >= 70 and grains["roles"] == ["web"]
    assert {"osfinger", "osmajorrelease", "virtual", "ip4_interfaces"} <= set(grains)
    both = cluster.json("-G", f"osfinger:{grains['osfinger']}", "test.ping")
    assert both == {"web1": True, "db1": True}


def test_each_minion_gets_only_its_own_pillar(cluster: Cluster) -> None:
    pillars = cluster.json("*", "pillar.items", "unmask=True")
    assert pillars["web1"] == {"role": "web", "message": "hello from pillar",
                               "secret": "web-only"}
    assert pillars["db1"] == {"role": "db", "secret": "db-only"}
    masked = cluster.json("web1", "pillar.items")["web1"]
    assert masked["secret"] == "**********"  # Salt 3008 masks pillar output by default
    assert set(cluster.json("db1", "pillar.raw")["db1"]) == {"role", "secret"}


def test_pillar_targeting(cluster: Cluster) -> None:
    done = cluster.salt("-I", "role:web", "test.ping")
    assert done.returncode == 0 and done.stdout == "web1:\n    True\n"
    assert cluster.json("-C", "I@role:db or I@role:nope", "test.ping") == {"db1": True}
    assert cluster.json("-J", "role:^w", "test.ping") == {"web1": True}


def test_state_apply_with_pillar_template_then_test_true(cluster: Cluster) -> None:
    done = cluster.salt("web1", "state.apply", "web")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (cluster.out / "motd").read_text() == (
        "Welcome to web1 (web): hello from pillar\n")
    assert (cluster.out / "announced").read_text() == (cluster.out / "motd").read_text()
    text = done.stdout
    assert text.startswith("web1:\n----------\n") and "    Function: file.managed\n" in text
    assert "Summary for web1\n------------\nSucceeded: 2 (changed=2)\nFailed:    0\n" in text
    assert "\nTotal states run:     2\nTotal run time: " in text
    again = cluster.salt("web1", "state.apply", "web", "test=True")
    assert again.returncode == 0
    assert "Succeeded: 2\nFailed:    0\n" in again.stdout and "changed=" not in again.stdout
    data = cluster.json("web1", "state.apply", "web", "test=True")["web1"]
    assert len(data) == 2 and all(s["result"] is True and s["changes"] == {}
                                  for s in data.values())


def test_state_functions(cluster: Cluster) -> None:
    highstate = cluster.json("db1", "state.highstate")["db1"]
    assert [s["__id__"] for s in highstate.values()] == ["db-ok"]
    assert cluster.json("web1", "state.sls", "web", "test=True")["web1"]
    single = cluster.json("web1", "state.single", "test.succeed_with_changes", "name=x")["web1"]
    [chunk] = single.values()
    assert chunk["result"] is True and chunk["changes"]
    shown = cluster.json("web1", "state.show_sls", "web")["web1"]
    assert set(shown) == {str(cluster.out / "motd"), "announce"}
    assert shown["announce"]["__sls__"] == "web"
    highstate_out = cluster.salt("web1", "grains.item", "os", "--out", "highstate")
    assert highstate_out.returncode == 0 and "web1:" in highstate_out.stdout


def test_failed_state_exit_codes(cluster: Cluster) -> None:
    done = cluster.salt("web1", "state.apply", "bad")
    assert done.returncode == 1 and "ERROR: Minions returned with non-zero exit code" in done.stderr
    assert "Result: False" in done.stdout and "Failed:    1\n" in done.stdout
    call = cluster.call("web1", "state.apply", "bad", "--retcode-passthrough")
    assert call.returncode == 2  # Salt's EX_STATE_FAILURE
    missing = cluster.salt("web1", "state.apply", "nosuch")
    assert missing.returncode == 1 and "No matching sls found for 'nosuch'" in missing.stdout


def test_custom_modules_synced_and_from_module_dirs(cluster: Cluster) -> None:
    synced = cluster.json("web1", "saltutil.sync_all")["web1"]
    assert synced["modules"] == ["modules.mymod"] and synced["states"] == []
    # The custom grain synced with them is live at once: for -G and in jobs (db1 has it
    # since its highstate above).
    assert synced["grains"] == ["grains.colour"]
    done = cluster.salt("-G", "colour:teal", "test.ping", "--out", "json", "--static")
    assert done.returncode == 0 and json.loads(done.stdout) == {"web1": True, "db1": True}
    assert cluster.json("web1", "grains.get", "colour") == {"web1": "teal"}
    assert cluster.json("web1", "mymod.hello")["web1"] == {"ping": True, "os": "Debian",
                                                          "role": "web"}
    local = cluster.json("web1", "localmod.whoami")["web1"]
    assert local["id"] == "web1" and local["seen"] == 1 and local["cpus"] == os.cpu_count()
    assert cluster.json("web1", "localmod.whoami")["web1"]["seen"] == 1  # a fresh job


def test_cp_serves_file_roots_only(cluster: Cluster) -> None:
    dest = cluster.world.root / "got"
    assert cluster.json("web1", "cp.get_file", "salt://web/motd.j2", str(dest)) == {
        "web1": str(dest)}
    assert dest.read_text() == STATES["web/motd.j2"]
    listed = cluster.json("web1", "cp.list_master")["web1"]
    assert "web/init.sls" in listed and "tree/sub/b.txt" in listed
    assert not [f for f in listed if f.startswith("leak")]
    got = cluster.json("web1", "cp.get_dir", "salt://tree", str(cluster.world.root / "d"))
    assert sorted(os.path.basename(f) for f in got["web1"]) == ["a.txt", "b.txt"]
    for path, why in (("salt://../../etc/shadow", "leads out of file_roots ('..' is not "
                                                  "allowed)"),
                      ("salt://leak/passwd", "leads out of file_roots (symbolic link)")):
        done = cluster.salt("web1", "cp.get_file", path, str(cluster.world.root / "x"))
        assert done.returncode == 1
        assert f"ERROR executing 'cp.get_file': {path} {why}" in done.stdout
    assert not (cluster.world.root / "x").exists()
    dev = str(cluster.world.root / "dev.txt")
    assert cluster.json("web1", "cp.envs") == {"web1": ["base", "dev"]}
    assert cluster.json("web1", "cp.get_file", "salt://only-dev.txt", dev) == {"web1": ""}
    assert cluster.json("web1", "cp.get_file", "salt://only-dev.txt", dev, "saltenv=dev") == {
        "web1": dev}
    assert Path(dev).read_text() == "dev\n"


def test_hostile_loads_from_a_minion(cluster: Cluster) -> None:
    loads = [
        {"cmd": "_pillar", "id": "db1", "grains": {"id": "db1", "roles": ["db"]}},
        {"cmd": "_serve_file", "path": "../../etc/shadow", "saltenv": "base", "loc": 0},
        {"cmd": "_serve_file", "path": "web/motd.j2", "saltenv": "base", "loc": -5},
        {"cmd": "_file_hash", "path": "web/motd.j2", "saltenv": "../../etc"},
        {"cmd": "_file_list", "saltenv": "base", "prefix": "/etc"},
        {"cmd": "_return", "jid": "20260101000000000000", "return": "forged"},
        {"cmd": "__init__"},
        {"no": "cmd"},
        # a mine write lands in the sender's own mine, whatever id the load names
        {"cmd": "_mine", "id": "db1", "data": {"forged": 1}},
        {"cmd": "_mine_get", "tgt": "*", "fun": "forged"},
    ]
    answers = cluster.json("web1", "localmod.hostile", json.dumps(loads))["web1"]
    assert answers[0] == {"ret": {"role": "web", "message": "hello from pillar",
                                  "secret": "web-only"}}  # the road's id, not the load's
    assert "leads out of file_roots" in answers[1]["error"]
    assert "loc must be a byte offset" in answers[2]["error"]
    assert "is not a saltenv name" in answers[3]["error"]
    assert "absolute" in answers[4]["error"]
    for answer, cmd in zip(answers[5:7], ["'_return'", "'__init__'"], strict=True):
        assert answer == {"error": f"{cmd} is not a command the raetsalt master serves"}
    assert answers[7] == {"error": "the request names no command"}
    assert answers[8:] == [{"ret": True}, {"ret": {"web1": 1}}]
    master_log = Path(load_node_config(cluster.master_conf, "master")["log_file"]).read_text()
    assert "Traceback" not in master_log and "salt request refused_path" in master_log


def test_large_file_streams_without_blocking_the_minion(cluster: Cluster) -> None:
    sock_dir = load_node_config(cluster.master_conf, "master")["sock_dir"]
    dest = cluster.world.root / "big"
    started = time.monotonic()
    command = [sys.executable, "-m", "raetsalt.cli.salt", "-c", str(cluster.master_conf),
               "-t", "60", "web1", "cp.get_file", "salt://big.bin", str(dest)]
    pings: list[float] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as download:
        deadline = time.monotonic() + 30
        while not dest.exists() and download.poll() is None:  # the download has begun
            assert time.monotonic() < deadline
            time.sleep(0.01)
        while download.poll() is None:
            pings.append(_roundtrip(sock_dir, "test.ping"))
        out, err = download.communicate(timeout=60)
    took = time.monotonic() - started
    assert download.returncode == 0, out + err
    want = hashlib.sha256((cluster.srv / "salt" / "big.bin").read_bytes()).hexdigest()
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == want
    print(f"\n{BIG >> 20} MiB in {took:.2f} s; {len(pings)} test.ping round trips meanwhile, "
          f"median {statistics.median(pings):.3f} s, worst {max(pings):.3f} s")
    assert len(pings) >= 3  # answered one after the other while the download ran


CALLER = """\
import json, sys, tempfile, warnings
warnings.filterwarnings("ignore")
import salt.client, salt.config
root = tempfile.mkdtemp()
opts = salt.config.apply_minion_config(
    {"id": "local", "root_dir": "/", "cachedir": root, "pki_dir": root, "sock_dir": root,
     "log_file": root + "/log", "file_client": "local", "conf_file": root + "/minion",
     "extension_modules": root + "/extmods", "log_level": "quiet",
     **json.loads(sys.argv[2] if len(sys.argv) > 2 else "{}")},
    salt.config.DEFAULT_MINION_OPTS.copy())
caller = salt.client.Caller(mopts=opts)
print(json.dumps({fun: caller.cmd(fun, *args) for fun, args in json.loads(sys.argv[1])}))
"""

KW_CALLER = CALLER.replace(
    "print(json.dumps({fun: caller.cmd(fun, *args) for fun, args in json.loads(sys.argv[1])}))",
    "import salt.utils.args\n"
    "calls = [(fun, *salt.utils.args.parse_input(args, condition=False))\n"
    "         for fun, args in json.loads(sys.argv[1])]\n"
    "print(json.dumps([caller.cmd(fun, *a, **kw) for fun, a, kw in calls]))")
"""``CALLER`` with Salt's reading of ``key=value`` words: a list of returns."""


def test_same_returns_as_salt_on_this_machine(cluster: Cluster) -> None:
    target = cluster.world.root / "stat-me"
    target.write_text("x")
    calls = [("pkg.list_pkgs", []), ("service.status", ["cron"]), ("user.info", ["root"]),
             ("file.stats", [str(target)])]
    done = subprocess.run([sys.executable, "-c", CALLER, json.dumps(calls)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout.splitlines()[-1])
    for fun, args in calls:
        assert cluster.json("web1", fun, *args)["web1"] == expected[fun], fun
    # Salt has no file.stat: the answer is Salt's (similar functions' docs), exit code 1.
    missing = cluster.salt("web1", "file.stat", str(target), "--out", "json")
    assert missing.returncode == 1
    docs = json_docs(missing.stdout)["web1"]
    assert docs["file.stat"] == "'file.stat' is not available." and "file.stats" in docs


def _roundtrip(sock_dir: str, fun: str) -> float:
    with CommandClient("master", sock_dir) as client:
        started = time.monotonic()
        req = client.request(p.SHARE_PUBLISH, tgt="web1", tgt_type="glob", fun=fun, arg=[],
                             timeout=10)
        deadline = started + 10
        while time.monotonic() < deadline:
            for body in client.receive(deadline - time.monotonic()):
                if body.get("req") == req and p.share_of(body) == p.SHARE_JOB_RET:
                    [(_, ret)] = p.job_returns(body)
                    assert ret["return"] is True
                    return time.monotonic() - started
    raise AssertionError(f"no return of {fun}")


def _loader_of(daemon: Daemon) -> list[int]:
    """The pids of a minion's children (its Salt loader process, once started)."""
    pid = daemon.popen.pid
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_salt_jobs_after_the_first_reuse_the_loaded_loader(cluster: Cluster) -> None:
    """What makes Salt's jobs start fast after the first: the loader process that
    imported Salt once forks each job; no job starts a new one."""
    sock_dir = load_node_config(cluster.master_conf, "master")["sock_dir"]
    times = [_roundtrip(sock_dir, "test.true")]  # Salt's, not native
    loader = _loader_of(cluster.minions["web1"])
    times += [_roundtrip(sock_dir, "test.true") for _ in range(5)]
    assert len(loader) == 1 and _loader_of(cluster.minions["web1"]) == loader
    print(f"\nSalt job round trips (publish -> return): {[f'{t:.3f}' for t in times]} s")


def test_peer_publish_of_state_apply_obeys_peer(cluster: Cluster) -> None:
    done = cluster.call("web1", "publish.publish", "db1", "state.apply", "db", "--out", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    [state] = json.loads(done.stdout)["local"]["db1"].values()
    assert state["__id__"] == "db-ok" and state["result"] is True
    outside = cluster.call("web1", "publish.publish", "web1", "state.apply", "web")
    assert outside.returncode == 1 and "the target is outside the allowed expression" in (
        outside.stdout)
    denied = cluster.call("db1", "publish.publish", "web1", "state.apply")
    assert denied.returncode == 1 and "no function rule allows it" in denied.stdout
    assert not (cluster.out / "denied").exists()


def test_refresh_pillar_reaches_targeting(cluster: Cluster) -> None:
    pillar = cluster.srv / "pillar" / "web.sls"
    pillar.write_text(pillar.read_text() + "stage: blue\n")
    assert cluster.json("web1", "saltutil.refresh_pillar") == {"web1": True}
    deadline = time.monotonic() + 15
    while cluster.salt("-I", "stage:blue", "test.ping").stdout != "web1:\n    True\n":
        assert time.monotonic() < deadline, "the refreshed pillar never reached the master"
    assert cluster.json("web1", "pillar.get", "stage", "unmask=True") == {"web1": "blue"}


def test_salt_mode_runs_salts_functions(cluster: Cluster) -> None:
    import salt.version

    versions = cluster.json("*", "test.version")
    assert versions == dict.fromkeys(("web1", "db1"), salt.version.__version__)  # Salt's
    done = cluster.world.cli("run", cluster.master_conf, "manage.versions", "--out", "json")
    assert json.loads(done.stdout) == {"Up to date": versions,
                                       "Master": salt.version.__version__}
    listed = cluster.json("db1", "sys.list_modules")["db1"]
    assert {"state", "pkg", "cp", "pillar"} <= set(listed)
    # Salt's sys in auto too; the CLI prints sys.doc by function, as Salt's does
    docs = cluster.json("web1", "sys.doc", "pkg.list_pkgs")
    assert "List the packages currently installed" in docs["pkg.list_pkgs"]
    text = textwrap.dedent(cluster.salt("db1", "cmd.run", "echo hi; exit 3").stdout)
    assert "hi" in text


def test_a_dead_zygote_is_restarted(cluster: Cluster) -> None:
    daemon = cluster.minions["web1"]
    [zygote] = _loader_of(daemon)
    os.kill(zygote, 9)
    daemon.expect("Salt's loader process exited (exit code -9); restarting it in 1 s", 10)
    assert cluster.json("web1", "test.true") == {"web1": True}  # waits for the new one
    assert cluster.json("web1", "test.ping") == {"web1": True}


def test_cmd_run_takes_salts_arguments_in_auto_mode(cluster: Cluster) -> None:
    """A built-in function runs only calls it takes as Salt's would; the others run
    Salt's own (web1: auto mode), compared with Salt's ``salt-call --local``."""
    # (python_shell=True: what a published job gets by default, a bare Caller not)
    calls = [("cmd.run", ["id -un", "runas=nobody"]), ("cmd.run", ["cat", "stdin=hello"]),
             ("cmd.run", ["echo $0", "shell=/bin/sh", "python_shell=True"]),
             ("cmd.run", ["echo quiet; exit 3", "ignore_retcode=True",
                          "output_loglevel=quiet", "python_shell=True"]),
             ("cmd.run", ["umask", "umask=077", "python_shell=True"])]
    done = subprocess.run([sys.executable, "-c", KW_CALLER, json.dumps(calls)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout.splitlines()[-1])
    assert expected == ["nobody", "hello", "/bin/sh", "quiet", "0077"]
    got = [cluster.json("web1", fun, *args)["web1"] for fun, args in calls]
    assert got == expected
    sanitized = cluster.json("web1", "grains.items", "sanitize=True")["web1"]
    assert sanitized["id"] == "MINION.DOMAINNAME" and len(sanitized) >= 70  # Salt's mask
    # sys.doc describes the function that runs: Salt's (runas, stdin...).
    doc = cluster.json("web1", "sys.doc", "cmd.run")["cmd.run"]
    assert "runas" in doc and "stdin" in doc


def test_synced_grains_are_live_at_once(cluster: Cluster) -> None:
    """A custom grain synced by ``saltutil.sync_grains`` (db1: salt mode; web1 got its
    with ``sync_all`` above, auto mode) is in jobs and in ``-G`` targeting right after
    the sync returns."""
    module = cluster.srv / "salt" / "_grains" / "colour.py"
    module.write_text("def colour():\n    return {'colour': 'teal', 'flavour': 'mint'}\n")
    assert cluster.json("db1", "saltutil.sync_grains") == {"db1": ["grains.colour"]}
    done = cluster.salt("-G", "flavour:mint", "test.ping")
    assert done.returncode == 0 and done.stdout == "db1:\n    True\n"
    assert cluster.json("db1", "grains.item", "flavour") == {"db1": {"flavour": "mint"}}
    # refresh_grains in salt mode too: a grain file changed on the minion.
    (cluster.confs["db1"] / "grains").write_text("shade: dark\n")
    assert cluster.json("db1", "saltutil.refresh_grains") == {"db1": True}
    done = cluster.salt("-G", "shade:dark", "test.ping")
    assert done.returncode == 0 and done.stdout == "db1:\n    True\n"


@pytest.mark.parametrize("empty", [True, False])
def test_file_recurse_test_true_is_salts(cluster: Cluster, empty: bool) -> None:
    dest = str(cluster.world.root / "recursed")
    args = ["file.recurse", f"name={dest}", "source=salt://rtree", "test=True",
            f"include_empty={empty}"]
    extra = {"file_roots": {"base": [str(cluster.srv / "salt")]}}
    done = subprocess.run([sys.executable, "-c", KW_CALLER, json.dumps([("state.single", args)]),
                           json.dumps(extra)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    [expected] = json.loads(done.stdout.splitlines()[-1])
    got = cluster.json("web1", "state.single", *args)["web1"]
    assert list(got) == list(expected)
    [(key, theirs)] = expected.items()
    ours = got[key]
    # With include_empty, Salt lists the source directory itself (``<dest>/.``).
    assert (f"{dest}/." in theirs["changes"]) is empty
    for field in ("name", "changes", "result"):
        assert ours[field] == theirs[field], field
    # Salt orders the comment's blocks by iterating sets (it varies with the hash seed).
    def blocks(comment: str) -> list[str]:
        return sorted(block.strip() for block in ("\n" + comment).split("\n#### "))

    assert blocks(ours["comment"]) == blocks(theirs["comment"])


def test_features_not_served_answer_at_once_in_one_line(cluster: Cluster) -> None:
    """No traceback, no success for work not done, no 30 s wait for an answer nobody
    gives: cp.push answers False as Salt's master with file_recv off; the minion's
    runners on a minion name what is missing."""
    pushed = cluster.world.root / "push-me"
    pushed.write_text("x")
    for minion in ("web1", "db1"):
        done = cluster.salt(minion, "cp.push", str(pushed))
        assert done.returncode == 0 and done.stdout == f"{minion}:\n    False\n", done.stdout
    cases = [("saltutil.runner", ["manage.up"], "runners are not run on raetsalt minions")]
    for fun, args, why in cases:
        for minion in ("web1", "db1"):
            done = cluster.salt(minion, fun, *args, "-t", "5")
            assert done.returncode == 1, (fun, done.stdout)
            [line] = done.stdout.splitlines()[1:]
            assert line.startswith(f"    ERROR executing '{fun}': {why}"), line
            assert "Traceback" not in done.stdout + done.stderr


def test_a_ten_second_state_returns_with_the_default_timeout(cluster: Cluster) -> None:
    """The master's timeout is 5 s; the state runs 10 s: the CLI waits for it, as Salt's
    does (db1 runs Salt's loader for everything)."""
    done = cluster.world.cli("salt", cluster.master_conf, "db1", "state.apply", "slow",
                             timeout=120.0)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Summary for db1\n------------\nSucceeded: 1 (changed=1)\nFailed:    0\n" in (
        done.stdout)


def test_salts_config_reaches_salt(cluster: Cluster) -> None:
    """Keys raetsalt leaves to Salt (db1's disable_modules, use_superseded) reach Salt's
    loader; Salt's modules see the master as configured, Salt's daemon name and a
    transport that is not ZeroMQ."""
    modules = cluster.json("*", "sys.list_modules")
    assert "alternatives" in modules["web1"] and "alternatives" not in modules["db1"]
    port = cluster.world.port  # the port the master bound (its config says 0: any)
    for key, value in (("use_superseded", ["module.run"]), ("master", "127.0.0.1"),
                       ("master_port", port), ("__cli", "salt-minion"), ("transport", "raet")):
        assert cluster.json("db1", "config.get", key) == {"db1": value}, key
    assert cluster.json("db1", "grains.get", "master") == {"db1": "127.0.0.1"}


def test_state_output_options_as_salts(cluster: Cluster) -> None:
    """``--state-output``/``--state-verbose`` print what Salt's highstate outputter prints
    with those settings, for the same return (read back from the job cache)."""
    import copy

    import salt.config
    import salt.output

    for flags, settings in ((["--state-output=terse"], {"state_output": "terse"}),
                            (["--state-output", "changes", "--state-verbose", "False"],
                             {"state_output": "changes", "state_verbose": False})):
        done = cluster.salt("web1", "state.apply", "web", "test=True", "-v", *flags)
        assert done.returncode == 0, done.stdout + done.stderr
        header, _, text = done.stdout.partition("\n\n")
        jid = header.splitlines()[0].rsplit(" ", 1)[1]
        cached = cluster.world.cli("run", cluster.master_conf, "jobs.lookup_jid", jid,
                                   "--out", "json")
        data = json.loads(cached.stdout)
        opts = copy.deepcopy(salt.config.DEFAULT_MASTER_OPTS)
        opts.update(color=False, **settings)
        assert text == salt.output.out_format(data, "highstate", opts) + "\n", flags
        if "terse" in flags[0]:  # one line per state
            assert "\n    Function: " not in text and "  Name: " in text


def test_no_deprecation_warnings_on_the_console(cluster: Cluster) -> None:
    """Salt imports modules Python deprecates (crypt): not the operator's business."""
    for name, daemon in cluster.minions.items():
        lines = daemon.drain()
        assert lines and not [line for line in lines if "DeprecationWarning" in line], name


_VOLATILE = ("duration", "start_time", "__run_num__")


@pytest.mark.parametrize("sls", ["users", "sysctl", "timezone", "ntp", "openssh.config"])
def test_formulas_as_salt_call_local(cluster: Cluster, sls: str) -> None:
    """Small formulas in the shape of five public saltstack-formulas: state.show_sls and
    state.apply test=True give what Salt's salt-call --local gives (the same state
    modules, map.jinja, includes and requisites)."""
    calls = [("state.show_sls", [sls]), ("state.apply", [sls, "test=True"])]
    extra = {"file_roots": {"base": [str(cluster.srv / "salt")]}}
    done = subprocess.run([sys.executable, "-c", KW_CALLER, json.dumps(calls),
                           json.dumps(extra)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shown, applied = json.loads(done.stdout.splitlines()[-1])
    assert isinstance(shown, dict) and shown, shown
    assert cluster.json("web1", "state.show_sls", sls)["web1"] == shown
    # (a state that fails here, as timezone without systemd, fails the same in Salt)
    ours = json_docs(cluster.salt("web1", "state.apply", sls, "test=True", "--out",
                                  "json").stdout)["web1"]
    assert set(ours) == set(applied)
    for key, theirs in applied.items():
        assert {k: v for k, v in ours[key].items() if k not in _VOLATILE} == {
            k: v for k, v in theirs.items() if k not in _VOLATILE}, key
