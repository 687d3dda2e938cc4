"""The event-bus blog's scripts, with ``salt`` replaced by ``raetsalt``,
run as separate processes against a bus host.
"""

from __future__ import annotations

import ast
import os
import textwrap

from .helpers import Proc, start_bus, start_script

LISTEN_MINION = """\
# needed for config to opts processing
import os
import raetsalt.syspaths as syspaths
import raetsalt.config

# get opts from minion config file
opts = raetsalt.config.minion_config(os.path.join(syspaths.CONFIG_DIR, 'minion'))

# debug to STDOUT
import raetsalt.log
raetsalt.log.setup_console_logger('all')

# event libary for events
import raetsalt.utils.event

# opts must have the valid minion ID else it binds to invalid socket
event = raetsalt.utils.event.MinionEvent(**opts)

tag = '{tag}'

print('Listening for events tagged \\'{{}}\\' on Salt Minion bus.'.format(tag))

# generator iterator yields events forever, we filter on tag
for data in event.iter_events(tag=tag):
    print(data)
"""

EMIT_MINION = """\
import os
import raetsalt.syspaths as syspaths
import raetsalt.config

opts = raetsalt.config.minion_config(os.path.join(syspaths.CONFIG_DIR, 'minion'))

import raetsalt.log
raetsalt.log.setup_console_logger('all')

import raetsalt.utils.event

tag = '{tag}'
data = {{'message': '{message}'}}

payload = {{
    'id': opts['id'],
    'tag': tag,
    'data': data,
}}

print (payload)

# opts must valid minion ID else it binds to invalid socket
event = raetsalt.utils.event.SaltEvent('minion', **opts)

# Fire event payload with tag
print(event.fire_event(payload, tag))
"""

LISTEN_MASTER = """\
import raetsalt.log
raetsalt.log.setup_console_logger('all')

import raetsalt.utils.event

# create event object, attach to master socket
event = raetsalt.utils.event.MasterEvent('{sock_dir}')

tag = '{tag}'

print('Listening for events tagged \\'{{}}\\' on Salt Master bus.'.format(tag))

for data in event.iter_events(tag=tag):
    print(data)
"""

EMIT_MASTER = """\
import raetsalt.log
raetsalt.log.setup_console_logger('all')

import raetsalt.utils.event

payload = {{'message': '{message}'}}

sock_dir = '{sock_dir}'

# create event object, attach to master socket
event = raetsalt.utils.event.SaltEvent('master', sock_dir)

# post the event
print(event.fire_event(payload, '{tag}'))
"""

EMIT_FORWARD = """\
import os
import raetsalt.syspaths as syspaths
import raetsalt.config

opts = raetsalt.config.minion_config(os.path.join(syspaths.CONFIG_DIR, 'minion'))

import raetsalt.log
raetsalt.log.setup_console_logger('all')

import raetsalt.utils.event

tag = 'mytag'

# a list of event ret objects
events = [
    {'message':'a drap in the bucket', 'tag': tag },
    {'message':'a drep in the bucket', 'tag': tag },
    {'message':'a drip in the bucket', 'tag': tag },
    {'message':'a drop in the bucket', 'tag': tag },
    {'message':'a drup in the bucket', 'tag': tag },
]

# multi event example, supports a list of event ret objects
payload = {
    'id': opts['id'],
    'events': events,
    'tag': None,
    'pretag': None,
    'data': None
}

print (payload)

event = raetsalt.utils.event.SaltEvent('minion', **opts)

# Fire event payload with 'fire_master' tag
print(event.fire_event(payload, 'fire_master'))
"""


def write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w") as handle:
        handle.write(textwrap.dedent(text))
    return path


def minion_env(short_dir: str) -> tuple[str, dict[str, str]]:
    """A config dir whose ``minion`` file sets sock_dir and id, as the blog's set-up has."""
    sock_dir = os.path.join(short_dir, "m")
    confdir = os.path.join(short_dir, "etc")
    os.makedirs(confdir)
    write(confdir, "minion", f"id: web1.example.com\nsock_dir: {sock_dir}\n")
    return sock_dir, {"RAETSALT_CONFIG_DIR": confdir}


def received(proc: Proc) -> dict:
    line = proc.readline(10)
    assert line is not None, "listener printed nothing"
    return ast.literal_eval(line)


def run_emitter(procs: list[Proc], path: str, env: dict[str, str] | None = None) -> Proc:
    emitter = start_script(procs, path, env)
    assert emitter.wait(20) == 0
    return emitter


def test_minion_bus_listen_and_emit(procs: list[Proc], short_dir: str) -> None:
    sock_dir, env = minion_env(short_dir)
    start_bus(procs, "minion", sock_dir, "web1.example.com")
    listener = start_script(
        procs, write(short_dir, "l1.py", LISTEN_MINION.format(tag="mytag")), env
    )
    listener.expect("Listening for events tagged 'mytag' on Salt Minion bus.")
    other = start_script(
        procs, write(short_dir, "l2.py", LISTEN_MINION.format(tag="othertag")), env
    )
    other.expect("Listening for events tagged 'othertag'")

    first = EMIT_MINION.format(tag="mytag", message="a drop in the bucket")
    emitter = run_emitter(procs, write(short_dir, "e1.py", first), env)
    assert emitter.readline(5) is not None  # the payload print
    assert emitter.readline(5) == "True"
    got = received(listener)
    assert got["data"] == {"message": "a drop in the bucket"}
    assert got["tag"] == "mytag" and got["id"] == "web1.example.com" and "_stamp" in got

    # Exactly once: the next thing the listener prints is the next event, not a repeat.
    second = EMIT_MINION.format(tag="mytag", message="second")
    run_emitter(procs, write(short_dir, "e2.py", second), env)
    assert received(listener)["data"] == {"message": "second"}
    # The other listener saw none of the above: its first line is its own marker event.
    mark = EMIT_MINION.format(tag="othertag", message="mark")
    run_emitter(procs, write(short_dir, "e3.py", mark), env)
    assert received(other)["data"] == {"message": "mark"}


def test_master_bus_listen_and_emit(procs: list[Proc], short_dir: str) -> None:
    sock_dir = os.path.join(short_dir, "master")
    start_bus(procs, "master", sock_dir)
    listener = start_script(procs, write(short_dir, "l1.py",
                                         LISTEN_MASTER.format(sock_dir=sock_dir, tag="mytag")))
    listener.expect("Listening for events tagged 'mytag' on Salt Master bus.")
    other = start_script(procs, write(short_dir, "l2.py",
                                      LISTEN_MASTER.format(sock_dir=sock_dir, tag="othertag")))
    other.expect("Listening for events tagged 'othertag'")
    emitter = run_emitter(procs, write(short_dir, "e1.py", EMIT_MASTER.format(
        sock_dir=sock_dir, tag="mytag", message="a drop in the bucket")))
    assert emitter.readline(5) == "True"
    got = received(listener)
    assert got["message"] == "a drop in the bucket" and "_stamp" in got
    run_emitter(procs, write(short_dir, "e2.py", EMIT_MASTER.format(
        sock_dir=sock_dir, tag="mytag", message="second")))
    assert received(listener)["message"] == "second"
    run_emitter(procs, write(short_dir, "e3.py", EMIT_MASTER.format(
        sock_dir=sock_dir, tag="othertag", message="mark")))
    assert received(other)["message"] == "mark"


def test_multi_event_fire_master_payload_is_accepted(procs: list[Proc], short_dir: str) -> None:
    sock_dir, env = minion_env(short_dir)
    start_bus(procs, "minion", sock_dir, "web1.example.com")
    listener = start_script(
        procs, write(short_dir, "l.py", LISTEN_MINION.format(tag="fire_master")), env
    )
    listener.expect("Listening for events tagged 'fire_master'")
    emitter = run_emitter(procs, write(short_dir, "f.py", EMIT_FORWARD), env)
    assert emitter.readline(5) is not None
    assert emitter.readline(5) == "True"
    got = received(listener)
    assert [e["message"] for e in got["events"]] == [
        f"a dr{v}p in the bucket" for v in "aeiou"
    ]
    assert got["tag"] is None and got["pretag"] is None
