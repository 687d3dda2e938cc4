"""Salt's own client code and engines against a running raetsalt master (real daemons).

A plain Python script (another process) imports Salt's unmodified
``salt.client.LocalClient`` with the master's config file and runs ``cmd``,
``cmd_iter`` and ``cmd_async`` + ``get_cli_returns`` on two raetsalt minions; a user
refused by ``external_auth`` gets Salt's ``AuthorizationError``; Salt's ``script`` and
``webhook`` engines, started by the master from its ``engines:``, fire events that a
listener on raetsalt's bus sees (and the reactor reacts to); a minion's ``script``
engine's events reach the master's bus.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from daemons.helpers import Daemon, World, make_world
from helpers.nosalt import one_line_without_salt

from raetsalt.config import load_node_config
from raetsalt.event import SaltEvent

pytestmark = pytest.mark.integration

SCRIPT = """\
import json, sys, time
import salt.client
import salt.exceptions

conf = sys.argv[1]
out = {}
local = salt.client.LocalClient(c_path=conf)
started = time.monotonic()
out["cmd"] = local.cmd("*", "test.ping", timeout=30)
out["cmd_seconds"] = time.monotonic() - started
out["cmd_args"] = local.cmd("minion1", "test.arg", ["a", 1], kwarg={"k": "v"}, timeout=30)
out["full"] = local.cmd("minion2", "test.echo", ["hi"], timeout=30, full_return=True)
out["iter"] = sorted(json.dumps(item, sort_keys=True)
                     for item in local.cmd_iter("*", "test.echo", ["x"], timeout=30))
jid = local.cmd_async("*", "test.ping")
out["jid"] = jid
# The returns come before get_cli_returns listens: Salt's job cache has them.
deadline = time.monotonic() + 60
while len(local.get_cache_returns(jid)) < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
out["cli"] = {k: v for item in local.get_cli_returns(jid, ["minion1", "minion2"], timeout=30)
              for k, v in item.items()}
out["none"] = local.cmd("nosuchminion", "test.ping", timeout=5)
other = salt.client.get_local_client(conf)
out["list"] = other.cmd(["minion2", "minion1"], "test.ping", tgt_type="list", timeout=30)
other.destroy()
try:
    local.cmd("*", "test.ping", eauth="file", username="bob", password="bobpw", timeout=10)
    out["denied"] = "not refused"
except salt.exceptions.AuthorizationError as exc:
    out["denied"] = "AuthorizationError: " + str(exc)
try:
    local.cmd("*", "test.ping", eauth="file", username="bob", password="wrong", timeout=10)
    out["badpw"] = "not refused"
except salt.exceptions.AuthenticationError as exc:
    out["badpw"] = "AuthenticationError"
out["alice"] = local.cmd("*", "test.ping", eauth="file", username="alice",
                         password="alicepw", timeout=30)
opts = local.opts
local.destroy()

# Salt's RunnerClient and WheelClient, unmodified, with eauth.
import salt.runner, salt.wheel
alice = {"username": "alice", "password": "alicepw", "eauth": "file"}
bob = {"username": "bob", "password": "bobpw", "eauth": "file"}
def outcome(call):
    try:
        return call()
    except salt.exceptions.SaltException as exc:
        return "raised " + type(exc).__name__ + ": " + str(exc)
runner = salt.runner.RunnerClient(opts)
out["run_up"] = outcome(lambda: sorted(runner.cmd_sync({"fun": "manage.up", **alice},
                                                       timeout=60)))
out["run_full"] = outcome(lambda: runner.cmd_sync({"fun": "manage.up", **alice},
                                                  timeout=60, full_return=True))
out["run_async"] = outcome(lambda: runner.cmd_async({"fun": "manage.up", **alice}))
out["run_lookup"] = outcome(lambda: runner.cmd_sync({"fun": "jobs.lookup_jid", "jid": jid,
                                                    **alice}, timeout=60))
out["run_fails"] = outcome(lambda: runner.cmd_sync({"fun": "test.arg", **alice}, timeout=60,
                                                   full_return=True))
out["run_bob"] = outcome(lambda: runner.cmd_sync({"fun": "manage.up", **bob}, timeout=30))
out["run_badpw"] = outcome(lambda: runner.cmd_sync(
    {"fun": "manage.up", **alice, "password": "wrong"}, timeout=30))
out["run_nocreds"] = outcome(lambda: runner.cmd_sync({"fun": "manage.up"}, timeout=30))
out["run_unknown"] = outcome(lambda: runner.cmd_sync({"fun": "nosuch.thing", **alice},
                                                     timeout=60))
wheel = salt.wheel.WheelClient(opts)
out["wheel_list"] = outcome(lambda: wheel.cmd_sync({"fun": "key.list_all", **bob}))
out["wheel_alice"] = outcome(lambda: wheel.cmd_sync({"fun": "key.list_all", **alice}))
out["wheel_nocreds"] = outcome(lambda: wheel.cmd_sync({"fun": "key.list_all"}))
# The key Salt's channel wrote for this (the master's) user: unrestricted, as on the CLI.
import getpass, os
with open(os.path.join(opts["cachedir"], "." + getpass.getuser() + "_key")) as handle:
    mykey = handle.read()
out["run_key"] = outcome(lambda: sorted(runner.cmd_sync({"fun": "manage.up", "key": mykey},
                                                        timeout=60)))
out["wheel_key"] = outcome(lambda: wheel.cmd_sync({"fun": "key.list_all", "key": mykey}))
out["wheel_badkey"] = outcome(lambda: wheel.cmd_sync({"fun": "key.list_all",
                                                      "key": "y" * 80}))
out["wheel_badtoken"] = outcome(lambda: wheel.cmd_sync({"fun": "key.list_all",
                                                        "token": "0" * 64}))
out["run_badtoken"] = outcome(lambda: runner.cmd_sync({"fun": "manage.up", "token": "0" * 64},
                                                      timeout=30))
out["wheel_badfun"] = outcome(lambda: wheel.cmd_sync({"fun": "nosuch.thing", **bob}))

# Salt's token calls (salt.auth.Resolver: the CLI's -a/-T, Salt's REST API), then the token
# in Salt's clients.
import salt.auth
resolver = salt.auth.Resolver(opts)
made = resolver.mk_token(dict(alice))
out["mk_token"] = made
out["get_token"] = resolver.get_token(made["token"])
out["run_token"] = outcome(lambda: sorted(runner.cmd_sync(
    {"fun": "manage.up", "token": made["token"]}, timeout=60)))
out["wheel_token"] = outcome(lambda: wheel.cmd_sync({"fun": "key.list_all",
                                                     "token": made["token"]}))
out["mk_badpw"] = resolver.mk_token({**alice, "password": "wrong"})
out["mk_nocreds"] = resolver.mk_token({})
out["get_badtoken"] = resolver.get_token("0" * 64)

# The channel itself: a wrong key, a request that is not Salt's, a command not served.
import salt.payload, zmq
ctx = zmq.Context()
def ask(raw):
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect("tcp://127.0.0.1:%d" % local.opts["ret_port"])
    sock.send(raw)
    answer = salt.payload.loads(sock.recv()) if sock.poll(10000) else "no answer"
    sock.close()
    return answer
load = {"cmd": "publish", "tgt": "*", "fun": "test.ping", "arg": [], "tgt_type": "glob",
        "ret": "", "jid": "", "user": "root"}
out["nokey"] = ask(salt.payload.dumps({"enc": "clear", "load": load, "version": 3}))
out["badkey"] = ask(salt.payload.dumps({"enc": "clear", "load": {**load, "key": "x" * 80},
                                        "version": 3}))
out["garbage"] = ask(bytes([0xC1, 0xC1]) + b" not msgpack")
out["aes"] = ask(salt.payload.dumps({"enc": "aes", "load": "x"}))
out["runner"] = ask(salt.payload.dumps({"enc": "clear", "load": {"cmd": "runner"}}))
out["runner_nofun"] = ask(salt.payload.dumps({"enc": "clear", "load": {
    "cmd": "runner", "fun": ["x"], **alice}}))
out["other"] = ask(salt.payload.dumps({"enc": "clear", "load": {"cmd": "_auth"}}))
# The key written for a publisher_acl user (what Salt's LocalClient sends when that user
# runs it): published as that user, under that user's rules.
with open(os.path.join(opts["cachedir"], ".nobody_key")) as handle:
    nobody = {**load, "key": handle.read(), "user": "nobody"}
out["acl_ping"] = ask(salt.payload.dumps({"enc": "clear", "load": nobody, "version": 3}))
out["acl_run"] = ask(salt.payload.dumps({"enc": "clear", "load": {
    **nobody, "fun": "cmd.run", "arg": ["id"]}, "version": 3}))
out["acl_runner"] = ask(salt.payload.dumps({"enc": "clear", "load": {
    "cmd": "runner", "fun": "manage.up", "key": nobody["key"]}}))
ctx.term()
print(json.dumps(out, default=str))
"""

REACTION = """\
hooked:
  local.cmd.run:
    - tgt: minion1
    - arg:
      - touch {out}/hooked-{{ tag.split('/')[-1] }}
"""
HOOK_SCRIPT = """\
#!/bin/sh
echo '{"tag": "custom/script/beat", "data": {"n": 1}}'
"""


def _master_config(world: World, ret_port: int, webhook_port: int) -> str:
    users = world.root / "users"
    users.write_text("alice:alicepw\nbob:bobpw\n")
    hook = world.root / "beat.sh"
    hook.write_text(HOOK_SCRIPT)
    hook.chmod(0o755)
    (world.root / "out").mkdir(exist_ok=True)
    reaction = world.root / "hooked.sls"
    reaction.write_text(REACTION.replace("{out}", str(world.root / "out")))
    return textwrap.dedent(f"""\
        auto_accept: true
        reactor:
          - 'salt/engines/hook/*':
            - {reaction}
        salt_local_clients: true
        ret_port: {ret_port}
        publisher_acl:
          nobody:
            - test.ping
        external_auth:
          file:
            ^filename: {users}
            alice:
              - test.*
              - '@runner'
            bob:
              - '@wheel'
        engines:
          - script:
              cmd: {hook}
              interval: 1
          - webhook:
              address: 127.0.0.1
              port: {webhook_port}
        """)


def _start(world: World) -> tuple[Daemon, int, int]:
    """A master whose request channel and webhook bound their ports (random high ports,
    tried again when one is taken)."""
    for _ in range(10):
        ret_port, hook_port = random.sample(range(20000, 60000), 2)
        conf = world.master_dir(_master_config(world, ret_port, hook_port))
        master = world.start("master", conf)
        line = master.peek(("Salt's event sockets in", "request channel not served"), 60)
        assert line is not None, master.drain()
        if "not served" not in line:
            return master, ret_port, hook_port
        master.terminate()
        world.daemons.remove(master)
    raise AssertionError("no free port pair in 10 tries")


def _minions(world: World) -> list[Daemon]:
    minions = []
    for name in ("minion1", "minion2"):
        minion = world.start("minion", world.minion_dir(name, name))
        minion.expect("connected to the master themaster", timeout=60)
        minions.append(minion)
    return minions


def test_local_client_script_and_engines() -> None:
    pytest.importorskip("salt")
    with make_world() as world:
        master, _ret_port, hook_port = _start(world)
        _minions(world)
        sock_dir = load_node_config(world.root / "ma", "master")["sock_dir"]
        bus = SaltEvent("master", sock_dir)

        # The script engine fires custom/script/beat every second.
        seen = bus.get_event(wait=60, tag="custom/script/beat", full=True)
        assert seen is not None and seen["data"]["n"] == 1, "\n".join(master.drain())

        # The webhook engine: a POST -> salt/engines/hook/<path> on raetsalt's bus.
        deadline = time.monotonic() + 60
        while True:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{hook_port}/deploy/web", data=b'{"ref": "main"}',
                    method="POST")
                urllib.request.urlopen(request, timeout=5).read()
                break
            except OSError:
                assert time.monotonic() < deadline, master.drain()
                time.sleep(0.2)  # the engine process is still loading Salt's modules
        hook = bus.get_event(wait=30, tag="salt/engines/hook/deploy/web", full=True)
        assert hook is not None, master.drain()
        assert b'"ref"' in hook["data"]["body"] or '"ref"' in str(hook["data"]["body"])
        # ...and the reactor reacts to it as to any event (a job on minion1)
        marker = world.root / "out" / "hooked-web"
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline, "\n".join(master.drain())
            time.sleep(0.05)  # polling the file the reaction makes
        bus.destroy()

        done = subprocess.run([sys.executable, "-c", SCRIPT, str(world.root / "ma" / "master")],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:] + "\n".join(master.drain()[-30:])
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["cmd"] == {"minion1": True, "minion2": True}
        assert out["cmd_args"]["minion1"]["args"] == ["a", 1]
        assert out["cmd_args"]["minion1"]["kwargs"]["k"] == "v"
        assert out["full"]["minion2"]["ret"] == "hi"
        assert out["full"]["minion2"]["retcode"] == 0
        assert out["full"]["minion2"]["jid"]
        items = [json.loads(i) for i in out["iter"]]
        assert {next(iter(i)) for i in items} == {"minion1", "minion2"}
        assert all(next(iter(i.values()))["ret"] == "x" for i in items)
        assert out["jid"] and out["cli"] == {"minion1": {"ret": True},
                                             "minion2": {"ret": True}}
        assert out["none"] == {}
        assert out["list"] == {"minion1": True, "minion2": True}
        assert out["denied"].startswith("AuthorizationError"), out
        assert out["badpw"] == "AuthenticationError", out
        assert out["alice"] == {"minion1": True, "minion2": True}
        refused = {"error": {"name": "AuthenticationError",
                             "message": "Authentication error occurred."}}
        assert out["nokey"] == refused and out["badkey"] == refused
        assert out["garbage"] == "bad load" and out["aes"] == "bad load"
        assert out["run_up"] == ["minion1", "minion2"], out
        assert out["run_full"]["data"]["return"] == ["minion1", "minion2"], out
        assert out["run_full"]["data"]["success"] is True
        assert out["run_full"]["data"]["fun"] == "runner.manage.up"
        assert out["run_full"]["data"]["user"] == "alice"
        assert set(out["run_async"]) == {"tag", "jid"}, out
        assert out["run_async"]["tag"] == f"salt/run/{out['run_async']['jid']}"
        # arguments reach the runner (an old-style keyword here)
        assert out["run_lookup"] == {"minion1": True, "minion2": True}, out
        # Salt's test.arg runner is not one of raetsalt's: the master's refusal is the
        # job's return, as a failed runner's in Salt
        assert out["run_fails"]["data"]["success"] is False, out
        assert "not available" in out["run_fails"]["data"]["return"], out
        assert out["run_bob"].startswith("raised EauthAuthenticationError"), out
        assert "for user bob" in out["run_bob"]
        assert out["run_badpw"].startswith("raised EauthAuthenticationError"), out
        user_refused = 'raised SaltException: Authentication failure of type "user" occurred'
        assert out["run_nocreds"] == user_refused, out
        assert out["run_unknown"].startswith("raised CommandExecutionError"), out
        # Salt's WheelClient.cmd_sync gives the master's whole answer
        assert out["wheel_list"]["data"]["return"]["minions"] == ["minion1", "minion2"], out
        assert out["wheel_list"]["data"]["success"] is True
        assert out["wheel_list"]["data"]["user"] == "bob"
        assert out["wheel_list"]["tag"] == out["wheel_list"]["data"]["tag"]
        assert out["wheel_alice"].startswith("raised EauthAuthenticationError"), out
        assert "for user alice" in out["wheel_alice"]
        assert out["wheel_nocreds"] == user_refused, out
        assert out["run_key"] == ["minion1", "minion2"], out
        assert out["wheel_key"]["data"]["return"]["minions"] == ["minion1", "minion2"], out
        assert out["wheel_badkey"] == user_refused, out
        token_refused = ('raised TokenAuthenticationError: Authentication failure of type '
                         '"token" occurred.')
        assert out["wheel_badtoken"] == token_refused, out
        assert out["run_badtoken"] == token_refused, out
        assert out["wheel_badfun"]["data"]["success"] is False, out
        assert "is not available" in out["wheel_badfun"]["data"]["return"]
        made = out["mk_token"]
        assert set(made) == {"start", "expire", "name", "eauth", "token"}, made
        assert made["name"] == "alice" and made["eauth"] == "file"
        assert made["expire"] > made["start"]
        assert out["get_token"] == made
        assert out["run_token"] == ["minion1", "minion2"], out
        assert out["wheel_token"].startswith("raised TokenAuthenticationError"), out
        assert out["mk_badpw"] == "" and out["mk_nocreds"] == ""
        assert out["get_badtoken"] == {}
        assert out["runner"]["error"]["name"] == "UserAuthenticationError"
        assert out["runner_nofun"]["error"]["name"] == "SaltInvocationError"
        assert out["other"]["error"]["name"] == "SaltInvocationError"
        assert sorted(out["acl_ping"]["load"]["minions"]) == ["minion1", "minion2"], out
        assert out["acl_ping"]["load"]["jid"]
        assert out["acl_run"]["error"]["name"] == "AuthorizationError", out
        assert "nobody" in out["acl_run"]["error"]["message"], out
        assert out["acl_runner"]["error"]["name"] == "AuthorizationError", out
        assert not [line for line in master.drain() if "Traceback" in line]
        assert master.terminate() == 0


def test_without_salt_engines_are_one_clear_line(tmp_path: Path) -> None:
    with make_world() as world:
        conf = world.master_dir("salt_local_clients: true\nengines:\n  - webhook: {}\n")
        one_line_without_salt(tmp_path, lambda: world.start("master", conf),
                              "salt_local_clients and engines: ignored")


def test_a_minion_engine_fires_to_the_masters_bus() -> None:
    pytest.importorskip("salt")
    with make_world() as world:
        beat = world.root / "minion-beat.sh"
        beat.write_text("#!/bin/sh\necho '{\"tag\": \"custom/minion/beat\", "
                        "\"data\": {\"n\": 2}}'\n")
        beat.chmod(0o755)
        master = world.start("master", world.master_dir("auto_accept: true\n"))
        master.expect("serving on", timeout=30)
        salty = world.minion_dir("salty", "salty", textwrap.dedent(f"""\
            engines:
              - script:
                  cmd: {beat}
                  interval: 1
            """))
        text = (salty / "minion").read_text()
        (salty / "minion").write_text(text.replace("execution_mode: native",
                                                   "execution_mode: salt"))
        minion = world.start("minion", salty)
        minion.expect("connected to the master themaster", timeout=60)
        sock_dir = load_node_config(world.root / "ma", "master")["sock_dir"]
        bus = SaltEvent("master", sock_dir)
        seen = bus.get_event(wait=90, tag="custom/minion/beat", full=True)
        bus.destroy()
        assert seen is not None, "\n".join(minion.drain())
        # as a Salt master fires a minion's event.send: the whole load under its tag
        assert seen["data"]["data"] == {"n": 2, "id": "salty"}, seen
        assert seen["data"]["id"] == "salty" and seen["data"]["tag"] == "custom/minion/beat"
        assert not [line for line in minion.drain() if "Traceback" in line]
        assert minion.terminate() == 0
