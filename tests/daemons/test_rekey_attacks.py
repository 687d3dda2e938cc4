"""The report's two attacks on native key rotation, against real daemons on loopback
(docs/native-profile.md, "Key rotation"; the FakeNet replays are
tests/engine/native/test_rekey_limits.py):

* someone on the path drops only the key frames' datagrams (67 bytes), so no rotation
  completes while everything else passes: the session must be ended after
  ``raet_rekey_reject_after``, with one WARNING line, and handshaken again;
* an accepted minion offers the next key as soon as a rotation is done: the master must
  answer at most one rotation per ``raet_rekey_min_gap``.

The limits are set to their smallest allowed values so the tests are quick; they wait
on log lines and on what the relay saw, never on a fixed sleep."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raetsalt.engine.native.frames import KEY_FRAME, PREFIX, TAG

from .helpers import Daemon, World, make_world, ping
from .relay import DOWN, UP, Relay

pytestmark = pytest.mark.integration

ROGUE = Path(__file__).resolve().with_name("rogue_minion.py")
KEY_DATAGRAM = PREFIX.size + KEY_FRAME.size + TAG
"""A datagram carrying a KEY_OFFER or KEY_ACCEPT alone (67 bytes)."""
# The smallest values the config allows: a rotation every 10 s, refused after 15.
REKEY = "raet_rekey_interval: 10\nraet_rekey_reject_after: 15\n"


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def _first_line(daemons: list[Daemon], fragment: str, timeout: float = 120.0) -> str | None:
    """The first log line with ``fragment`` of any of ``daemons`` (a hang detector)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for daemon in daemons:
            line = daemon.peek((fragment,), timeout=0.2)
            if line is not None:
                return line
    return None


def _through(relay: Relay, confdir: Path, port: int) -> None:
    """Point the minion of ``confdir`` at the relay instead of the master."""
    config = confdir / "minion"
    config.write_text(config.read_text().replace(f":{port}\n", f":{relay.port}\n"))


def test_dropping_only_key_frames_ends_the_session_and_it_is_handshaken_again(
    world: World,
) -> None:
    master = world.start("master", world.master_dir("auto_accept: true\n" + REKEY))
    master.expect("serving on")
    with Relay(world.port, lambda direction, data: len(data) != KEY_DATAGRAM) as relay:
        confdir = world.minion_dir("m1", "minion1", REKEY)
        _through(relay, confdir, world.port)
        minion = world.start("minion", confdir)
        minion.expect("connected to the master themaster", timeout=30)
        assert ping(world)
        # No rotation can complete: the first end whose key is 15 s old ends the session.
        ended = "native session with "
        line = _first_line([master, minion], ended)
        assert line is not None and "[WARNING" in line and "no key rotation completed" in line
        assert relay.dropped[UP] + relay.dropped[DOWN] > 0  # the key offers kept coming
        # Handshaken again: the minion answers through the new session.
        assert ping(world, timeout="30")
        for daemon in (master, minion):
            lines = daemon.drain()
            assert len([x for x in lines if ended in x]) <= 2  # one per ended session
            assert not any("Traceback" in x for x in lines)


def test_a_minion_forcing_rotations_gets_at_most_one_per_minimum_gap(world: World) -> None:
    gap = 1.0
    master = world.start("master", world.master_dir(
        f"auto_accept: true\n{REKEY}raet_rekey_min_gap: {gap}\n"))
    master.expect("serving on")
    confdir = world.minion_dir("rogue", "rogue")
    seconds = 8.0
    rogue = subprocess.run([sys.executable, str(ROGUE), str(confdir), "rekey", str(seconds)],
                           capture_output=True, text=True, timeout=120)
    assert rogue.returncode == 0, rogue.stderr
    words = rogue.stdout.split()  # ... rotations N in SECONDS s
    assert words[-5] == "rotations", rogue.stdout
    rotations, took = int(words[-4]), float(words[-2])
    # The rogue offered the next key as soon as each rotation was done (338 a second
    # were answered before the limit): the master answered one per gap at most.
    assert 1 <= rotations <= took / gap + 1, rogue.stdout
    lines = master.drain()
    assert any("rekey_rate" in x for x in lines), lines[-5:]  # the early offers, counted
    assert master.popen.poll() is None
    assert not any("Traceback" in x for x in lines)
