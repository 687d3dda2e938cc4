"""``make demo``: a master and three minions on loopback, step by step.

Every step prints the command as you would type it (``$ ...``) and what it printed.
The story: start the master and three minions, accept their keys with raetsalt-key,
run ``test.ping`` everywhere and a compound-targeted command, apply a Salt state on
minion1 (a file rendered from a ``salt://`` jinja template with its pillar, and a
command that requires it) when the ``salt`` extra is installed, let minion1 publish to
the other minions and run ``manage.up`` through the master (``peer``/``peer_run``), see
a peer call the master refuses (with its reason, the exit code and the audit event),
ask ``acl.explain`` why, watch the reactor answer each minion's start event and a job
minion1's scheduler runs every 2 s arrive (both with the ``salt`` extra), and the
``master_bus`` returner put returns on the master's bus under a
tag, start the REST API (``raetsalt-api``, Salt's rest_cherrypy API) and use it as pepper
or a web UI would, serve a second fleet from two masters (Salt's failover and hot
multi-master) and kill one of them, list the events the first master's bus carried, and
stop everything.  It all
lives in a temporary directory and takes well under a minute; ``python -m raetsalt.demo
--stay`` keeps everything running at the end (with the API's URL printed) until Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent
from raetsalt.saltbridge.modes import salt_importable

MINIONS = {
    "minion1": "os: Debian\n  roles: [web]",
    "minion2": "os: Ubuntu\n  roles: [db]",
    "minion3": "os: CentOS\n  roles: [web, db]",
}
NATIVE = ("minion2", "minion3")
"""Minions that run raetsalt's built-in functions only (no Salt loader: a faster demo)."""
STATE = """\
{out}:
  file.managed:
    - source: salt://motd/motd.j2
    - template: jinja
announce-motd:
  cmd.run:
    - name: cat {out}
    - onchanges:
      - file: {out}
"""
"""A file from a jinja template rendered with the minion's pillar and grains, and a
command that requires it (``onchanges``: it runs after the file, only when it changed)."""
TEMPLATE = ("{{ pillar['greeting'] }} from {{ grains['id'] }} ({{ grains['osfinger'] }}), "
            "team {{ pillar['team'] }}\n")
PILLAR = {"top.sls": "base:\n  'minion1':\n    - motd\n",
          "motd.sls": "greeting: Hello\nteam: blue\n"}
PEER_CONFIG = """\
peer:                     # which minions may publish what to whom
  'minion1$':
    - test.*
    - grains.item
  'minion2$':
    - 'G@roles:db':       # minion2 may only ping the db minions
        - test.ping
peer_run:                 # which minions may run which runners
  'minion1$':
    - manage.up$
"""
REACTION = """\
greet_new_minion:
  local.cmd.run:
    - tgt: {{{{ data['id'] }}}}
    - args:
      - cmd: >-
          echo "{{{{ data['id'] }}}} started; the reactor ran this"
          > {out}/reacted-{{{{ data['id'] }}}}
"""
"""The reactor file of ``salt/minion/*/start`` (Salt's jinja|yaml, ``data`` is the event's)."""
SCHEDULE = """\
schedule:                 # Salt's scheduler, in minion1's config
  heartbeat:
    function: test.echo
    args: [scheduled heartbeat]
    seconds: 2
"""
"""A job minion1 runs by itself every 2 s (Salt's scheduler; its returns reach the
master's job cache under real jids and its bus as ``salt/job/<jid>/ret/minion1``)."""

API_USER, API_PASSWORD = "demo", "demo-secret"
SALTGUI = Path(os.environ.get(
    "RAETSALT_SALTGUI",
    Path(__file__).resolve().parents[2] / "shared" / "vendor" / "saltgui" / "saltgui"))
"""Where a SaltGUI checkout's ``saltgui`` folder is (served by the API when present): by
default the shared folder beside a source checkout."""
CLI = {"raetsalt": "salt", "raetsalt-run": "run", "raetsalt-call": "call",
       "raetsalt-key": "key"}
STARTED = time.monotonic()


def step(text: str) -> None:
    print(f"\n== [{time.monotonic() - STARTED:4.1f} s] {text}", flush=True)


def unused_port() -> int:
    """A port nobody had bound a moment ago (someone may take it before the master binds
    it: ``_start_master`` then tries another)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def show(tool: str, confdir: Path, *args: str, expect: int | None = 0) -> str:
    """Run a raetsalt command, print it as typed and indent its output."""
    typed = " ".join([tool, "-c", str(confdir), *map(shlex.quote, args)])
    print(f"$ {typed}", flush=True)
    done = subprocess.run([sys.executable, "-P", "-m", f"raetsalt.cli.{CLI[tool]}", "-c",
                           str(confdir), *args], capture_output=True, text=True, timeout=60)
    for line in (done.stdout + done.stderr).rstrip().splitlines():
        print(f"    {line}")
    if done.returncode:
        print(f"    (exit code {done.returncode})")
    if expect is not None and done.returncode != expect:
        raise SystemExit(f"demo: {tool} exited {done.returncode}, expected {expect}")
    return done.stdout


def wait_events(bus: MasterEvent, want: set[str], seen: list[str], timeout: float = 15.0
                ) -> None:
    """Collect master bus events until every tag in ``want`` was seen."""
    deadline = time.monotonic() + timeout
    while want - set(seen):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SystemExit(f"demo: no {sorted(want - set(seen))} on the bus in {timeout} s")
        event = bus.get_event(wait=remaining, full=True)
        if event is not None:
            seen.append(event["tag"])


def drain(bus: MasterEvent, seen: list[str]) -> None:
    while (event := bus.get_event(wait=0.2, full=True)) is not None:
        seen.append(event["tag"])


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="rsdemo", dir="/tmp"))  # short socket paths
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        return _story(root, procs)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _story(root: Path, procs: dict[str, subprocess.Popen[bytes]]) -> int:
    master_dir = root / "master"
    master_dir.mkdir()
    srv = root / "srv"
    _write_tree(srv / "salt" / "motd", {"init.sls": STATE.format(out=root / "motd"),
                                         "motd.j2": TEMPLATE})
    _write_tree(srv / "pillar", PILLAR)
    reactor = ""
    if salt_importable():
        _write_tree(srv / "reactor", {"start.sls": REACTION.format(out=root)})
        reactor = f"reactor:\n  - 'salt/minion/*/start':\n    - {srv}/reactor/start.sls\n"
    step(f"configuration in {root}; the master's access rules"
         + (" and its reactor:" if reactor else ":"))
    for line in (PEER_CONFIG + reactor).splitlines():
        print(f"    {line}")

    step("start the master and three minions (each a daemon of its own)")
    port, bus = _start_master(master_dir, srv, procs, reactor + _api_config(root))
    opts = load_node_config(master_dir, "master")
    seen: list[str] = []
    for name, grains in MINIONS.items():
        confdir = root / name
        confdir.mkdir()
        (confdir / "minion").write_text(
            f"id: {name}\nroot_dir: {confdir}\nraet_port: 0\n"
            f"master: 127.0.0.1:{port}\nacceptance_wait_time: 1.0\nrandom_reauth_delay: 1.0\n"
            f"raet_alive_period: 2.0\ngrains:\n  {grains}\n"
            + ("execution_mode: native\n" if name in NATIVE else "")
            + (SCHEDULE if name == "minion1" and reactor else ""))
        procs[name] = _daemon("minion", confdir)
    wait_events(bus, {"salt/auth"}, seen)
    _wait_pending(master_dir, len(MINIONS))

    step("the minions' keys wait for the operator")
    show("raetsalt-key", master_dir, "-L")
    show("raetsalt-key", master_dir, "-A", "-y")
    wait_events(bus, {f"salt/minion/{m}/start" for m in MINIONS}, seen)
    print("    (every minion connected and reported its grains)")
    if reactor:
        _reactions(root)

    step("run a function on every minion")
    show("raetsalt", master_dir, "*", "test.ping")

    step("compound targeting: the web minions (by grain) except minion3 (by id)")
    show("raetsalt", master_dir, "-C", "G@roles:web and not minion3", "grains.item", "os")

    _salt_states(master_dir, srv)
    if reactor:
        _scheduled(master_dir, bus, seen)

    m1, m2 = root / "minion1", root / "minion2"
    step("peer publishing: minion1 runs test.ping on the other minions via the master")
    show("raetsalt-call", m1, "publish.publish", "minion[23]", "test.ping")
    show("raetsalt-call", m1, "publish.full_data", "G@os:CentOS", "test.version",
         "tgt_type=compound")

    step("peer_run: minion1 asks the master which minions are up")
    show("raetsalt-call", m1, "publish.runner", "manage.up")

    step("a refused peer call: minion2 may only ping the db minions")
    show("raetsalt-call", m2, "publish.publish", "minion1", "cmd.run", "id", expect=1)
    wait_events(bus, {"raetsalt/peer/minion2/denied"}, seen)
    print("    the master's log says (with the rule, which the minion is not told):")
    with open(opts["log_file"], encoding="utf-8") as handle:
        for line in handle:
            if "denied" in line:
                print(f"    {line.rstrip()}")

    step("why? acl.explain answers with the decision and the rule that made it")
    show("raetsalt-run", master_dir, "acl.explain", "minion2", "test.ping", "minion1")
    show("raetsalt-run", master_dir, "acl.explain", "minion2", "test.ping", "G@roles:db",
         "tgt_type=compound", "--out", "yaml")

    step("the operator deletes minion3's key: its session drops at once and it asks "
         "again, as a pending key (Salt's re-authentication)")
    show("raetsalt-key", master_dir, "-d", "minion3", "-y")
    _wait_pending(master_dir, 1)
    show("raetsalt-key", master_dir, "-L")
    show("raetsalt-key", master_dir, "-a", "minion3", "-y")
    _until(["salt", "-c", str(master_dir), "minion3", "test.ping", "-t", "2", "--out", "json"],
           lambda out: '"minion3": true' in out, "minion3 did not come back")
    show("raetsalt", master_dir, "minion3", "test.ping")

    _master_bus_returner(master_dir, bus, seen)
    _rest_api(master_dir, procs)
    _several_masters(root, procs)

    step("what the master's event bus carried")
    drain(bus, seen)
    counts: dict[str, int] = {}
    for tag in seen:
        parts = tag.split("/")
        key = "/".join(p if not p.isdigit() else "<jid>" for p in parts)
        counts[key] = counts.get(key, 0) + 1
    for key, count in counts.items():
        print(f"    {count:2d} x {key}")
    bus.destroy()

    if "--stay" in sys.argv[1:]:
        step(f"everything keeps running: open {API_URL[0]} (user {API_USER}, password "
             f"{API_PASSWORD}); Ctrl-C stops it")
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        except KeyboardInterrupt:
            pass

    step("stop the API, the minions and the masters (SIGTERM): each exits cleanly")
    for name in ["api", *MINIONS, *FLEET_MINIONS, "master", "west"]:
        proc = procs[name]
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        kind = {"api": "api", "master": "master", "west": "master"}.get(name, "minion")
        print(f"    raetsalt-{kind} {name}: exit {code}")
        if code != 0:
            raise SystemExit(f"demo: {name} exited {code}")
    print(f"\ndone in {time.monotonic() - STARTED:.1f} s.")
    return 0


def _reactions(root: Path) -> None:
    step("the reactor answered each minion's salt/minion/<id>/start: reactor/start.sls "
         "ran cmd.run on that minion")
    deadline = time.monotonic() + 90  # a loaded machine: the reactor's child renders Salt's SLS
    files = [root / f"reacted-{name}" for name in MINIONS]
    while not all(f.exists() and f.read_text() for f in files):
        if time.monotonic() > deadline:
            raise SystemExit("demo: the reactor did not run its jobs within 90 s")
        time.sleep(0.1)
    for path in files:
        print(f"    {path.name}: {path.read_text().strip()}")


def _scheduled(master_dir: Path, bus: MasterEvent, seen: list[str]) -> None:
    step("a scheduled job: minion1 runs test.echo every 2 s by itself (Salt's scheduler); "
         "its returns arrive on the master's bus and in its job cache")
    for line in SCHEDULE.splitlines():
        print(f"    {line}")

    def next_return(wait: float) -> str | None:
        """The tag of the next scheduled return on the bus within ``wait`` s."""
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            event = bus.get_event(wait=left, full=True)
            if event is None:
                return None
            tag, data = str(event["tag"]), event["data"]
            seen.append(tag)
            if (tag.startswith("salt/job/") and tag.endswith("/ret/minion1")
                    and data.get("fun") == "test.echo"
                    and data.get("return") == "scheduled heartbeat"):
                return tag
        return None

    earlier = 0
    while next_return(0.05) is not None:  # what arrived while the story went on
        earlier += 1
    print(f"    ({earlier} of its returns reached the bus since minion1 started; "
          "watching for the next ones)")
    tag = ""
    for _ in range(2):
        found = next_return(10.0)
        if found is None:
            raise SystemExit("demo: the scheduled job's returns did not arrive")
        tag = found
        print(f"    [{time.monotonic() - STARTED:4.1f} s] on the master's bus: {tag}")
    show("raetsalt-run", master_dir, "jobs.lookup_jid", tag.split("/")[2])


def _master_bus_returner(master_dir: Path, bus: MasterEvent, seen: list[str]) -> None:
    step("the master_bus returner: each minion's return also goes to the master's bus "
         "under a tag, for a script listening there (the event-bus seed's example)")
    show("raetsalt", master_dir, "*", "--return=master_bus", "--tag=monitoring",
         "test.echo", "procs ok", "--out", "txt")
    got: dict[str, object] = {}
    deadline = time.monotonic() + 15
    while len(got) < len(MINIONS) and time.monotonic() < deadline:
        event = bus.get_event(wait=deadline - time.monotonic(), full=True)
        if event is None:
            break
        seen.append(event["tag"])
        if event["tag"] == "monitoring":
            got[event["data"]["id"]] = event["data"]["data"]["return"]
    for minion, value in sorted(got.items()):
        print(f"    on the master's bus, tag monitoring: {minion} returned {value!r}")
    if len(got) < len(MINIONS):
        raise SystemExit("demo: the master_bus returns did not all arrive")


API_URL = [""]


def _api_config(root: Path) -> str:
    """eauth for the API's demo user (a plain-text file), and the API on a free port."""
    (root / "users.txt").write_text(f"{API_USER}:{API_PASSWORD}\n")
    gui = (f"  app: {SALTGUI / 'index.html'}\n  static: {SALTGUI / 'static'}\n"
           "  static_path: /static\n") if (SALTGUI / "index.html").exists() else ""
    return (f"external_auth:\n  file:\n    ^filename: {root / 'users.txt'}\n"
            f"    {API_USER}: ['.*', '@runner', '@wheel']\n"
            f"rest_cherrypy:\n  host: 127.0.0.1\n  port: 0\n  disable_ssl: true\n{gui}")


def _rest_api(master_dir: Path, procs: dict[str, subprocess.Popen[bytes]]) -> None:
    step("the REST API: raetsalt-api serves Salt's rest_cherrypy API on the master "
         "(pepper, SaltGUI and scripts speak it)")
    port_file = master_dir / "api.port"
    print(f"$ raetsalt-api -c {master_dir} --port-file {port_file} &", flush=True)
    procs["api"] = subprocess.Popen(
        [sys.executable, "-P", "-m", "raetsalt.api.daemon", "-c", str(master_dir), "-l", "error",
         "--port-file", str(port_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while not port_file.exists():
        if procs["api"].poll() is not None or time.monotonic() > deadline:
            raise SystemExit("demo: raetsalt-api did not start")
        time.sleep(0.05)
    url = API_URL[0] = f"http://127.0.0.1:{int(port_file.read_text())}"
    gui = " (SaltGUI)" if (SALTGUI / "index.html").exists() else ""
    print(f"    listening: open {url}/{gui} in a browser, user {API_USER}, "
          f"password {API_PASSWORD}")
    login = {"username": API_USER, "password": API_PASSWORD, "eauth": "file"}
    curl = "curl -sS -H 'Content-Type: application/json' -H 'Accept: application/json'"
    print(f"$ {curl} {url}/login -d '{json.dumps(login)}'")
    answer: Any = _post(f"{url}/login", login, {})["return"]
    print(f"    token {answer[0]['token'][:12]}..., user {answer[0]['user']}, perms "
          f"{answer[0]['perms']}")
    headers = {"X-Auth-Token": answer[0]["token"]}
    for chunk in ({"client": "local", "tgt": "*", "fun": "test.ping"},
                  {"client": "runner", "fun": "manage.up"}):
        print(f"$ {curl} -H 'X-Auth-Token: ...' {url}/ -d '{json.dumps([chunk])}'")
        print(f"    {json.dumps(_post(f'{url}/', [chunk], headers))}")


def _post(url: str, body: object, headers: dict[str, str]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json",
                                         "Accept": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=60) as response:
        data = json.loads(response.read())
    assert isinstance(data, dict)
    return data


FLEET_MINIONS = {"minion4": "failover", "minion5": "str"}
"""The second fleet's minions and their ``master_type``: minion4 holds one master at a
time (Salt's failover), minion5 holds both (Salt's hot multi-master)."""


def _several_masters(root: Path, procs: dict[str, subprocess.Popen[bytes]]) -> None:
    step("several masters: a second fleet served by two masters, east and west; minion4 "
         "lists both with master_type: failover, minion5 holds both (hot multi-master)")
    ports: dict[str, int] = {}
    for name in ("east", "west"):
        confdir = root / name
        confdir.mkdir()
        ports[name], bus = _launch_master(
            name, name, confdir, procs, "raet_alive_period: 1.0\nauto_accept: true\n")
        bus.destroy()
    print("    (east and west accept new keys themselves here: auto_accept: true)")
    listed = ", ".join(f"'127.0.0.1:{ports[name]}'" for name in ("east", "west"))
    for name, kind in FLEET_MINIONS.items():
        confdir = root / name
        confdir.mkdir()
        text = (f"id: {name}\nroot_dir: {confdir}\nraet_port: 0\n"
                f"master: [{listed}]\nmaster_type: {kind}\nraet_alive_period: 1.0\n"
                "acceptance_wait_time: 1.0\nrandom_reauth_delay: 1.0\nexecution_mode: native\n")
        (confdir / "minion").write_text(text)
        print(f"    {name}: master: [{listed}], master_type: {kind}")
        procs[name] = _daemon("minion", confdir)
    east, west = root / "east", root / "west"
    _until(["salt", "-c", str(east), "*", "test.ping", "-t", "2", "--out", "json", "--static"],
           lambda out: set(json.loads(out or "{}")) >= set(FLEET_MINIONS),
           "minion4 and minion5 did not reach east")
    show("raetsalt", east, "*", "test.ping")
    show("raetsalt", west, "*", "test.ping")
    print("    (west has only minion5: minion4 holds one master at a time)")

    step("failover: east is killed (SIGKILL); minion4's presence probes notice it and it "
         "moves to west, minion5 keeps serving west all along")
    print(f"$ kill -9 {procs['east'].pid}    # raetsalt-master -c {east}")
    procs["east"].kill()
    procs["east"].wait()
    moved = time.monotonic()
    _until(["salt", "-c", str(west), "*", "test.ping", "-t", "2", "--out", "json", "--static"],
           lambda out: set(json.loads(out or "{}")) >= set(FLEET_MINIONS),
           "minion4 did not move to west", timeout=60)
    print(f"    (minion4 answered from west {time.monotonic() - moved:.1f} s after the kill)")
    show("raetsalt", west, "*", "test.ping")


def _write_tree(root: Path, files: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)


def _salt_states(master_dir: Path, srv: Path) -> None:
    step("Salt's states over RAET: minion1 applies a state from the master's file_roots")
    if not salt_importable():
        print("    (skipped: the salt package is not installed; pip install 'raetsalt[salt]')")
        return
    for path in sorted(srv.rglob("*.s*")) + [srv / "salt" / "motd" / "motd.j2"]:
        print(f"    --- {path.relative_to(srv)}")
        for line in path.read_text().splitlines():
            print(f"    {line}")
    _wait_pillar(master_dir, "team:blue")
    show("raetsalt", master_dir, "-I", "team:blue", "test.ping")
    show("raetsalt", master_dir, "minion1", "state.apply", "motd")
    show("raetsalt", master_dir, "minion1", "state.apply", "motd", "test=True")


def _wait_pillar(master_dir: Path, target: str) -> None:
    """Until the master has compiled the pillar that ``-I target`` needs (a second or
    two after the minions connected)."""
    _until(["salt", "-c", str(master_dir), "-I", target, "test.ping", "--preview-target"],
           lambda out: bool(out.strip()), "the master did not compile the pillar")


def _wait_pending(master_dir: Path, count: int) -> None:
    """Until raetsalt-key lists ``count`` pending keys (each minion asked to join)."""
    _until(["key", "-c", str(master_dir), "-L", "--out", "json"],
           lambda out: len(json.loads(out or "{}").get("minions_pre", [])) >= count,
           "the minions' keys did not arrive")


def _until(argv: list[str], done: Callable[[str], bool], failure: str,
           timeout: float = 15.0) -> None:
    """Run ``raetsalt.cli.<argv[0]> argv[1:]`` until it exits 0 with an output ``done``
    accepts, for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = subprocess.run([sys.executable, "-P", "-m", f"raetsalt.cli.{argv[0]}", *argv[1:]],
                             capture_output=True, text=True)
        if run.returncode == 0 and done(run.stdout):
            return
        time.sleep(0.1)
    raise SystemExit(f"demo: {failure}")


def _daemon(node: str, confdir: Path) -> subprocess.Popen[bytes]:
    print(f"$ raetsalt-{node} -c {confdir} &", flush=True)
    # Warnings go to the log file (the master logs refusals there).
    return subprocess.Popen([sys.executable, "-P", "-m", f"raetsalt.cli.{node}", "-c", str(confdir),
                             "-l", "warning"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _start_master(master_dir: Path, srv: Path, procs: dict[str, subprocess.Popen[bytes]],
                  extra: str) -> tuple[int, MasterEvent]:
    """The story's master: its file and pillar roots, the access rules and ``extra``."""
    return _launch_master("master", "themaster", master_dir, procs, (
        f"raet_alive_period: 2.0\nfile_roots: {{base: [{srv}/salt]}}\n"
        f"pillar_roots: {{base: [{srv}/pillar]}}\n{PEER_CONFIG}{extra}"))


def _launch_master(key: str, name: str, confdir: Path,
                   procs: dict[str, subprocess.Popen[bytes]], config: str
                   ) -> tuple[int, MasterEvent]:
    """Write master ``name``'s config with a port and start it as ``procs[key]``; while
    it exits at once (its port was taken in the meantime: "address already in use"),
    again with another."""
    for _attempt in range(5):
        port = unused_port()
        (confdir / "master").write_text(
            f"id: {name}\nroot_dir: {confdir}\ninterface: 127.0.0.1\nraet_port: {port}\n"
            f"{config}")
        procs[key] = _daemon("master", confdir)
        bus = _connect_bus(load_node_config(confdir, "master")["sock_dir"], procs[key])
        if bus is not None:
            return port, bus
    raise SystemExit(f"demo: the master {name} did not start (see its log file)")


def _connect_bus(sock_dir: str, master: subprocess.Popen[bytes]) -> MasterEvent | None:
    """The master's bus, once the master serves it (its manor socket exists and answers);
    None if the master exited first."""
    bus = MasterEvent(sock_dir, listen=False)
    deadline = time.monotonic() + 15
    while not (os.path.exists(bus.manor_path) and bus.connect_pub(timeout=1.0)):
        if master.poll() is not None:
            bus.destroy()
            return None
        if time.monotonic() > deadline:
            raise SystemExit("demo: the master did not start its event bus")
        time.sleep(0.05)
    return bus


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
