"""``master_finger`` against real daemons: the minion pins the fingerprint that
``raetsalt-key -F`` prints on the master; a master with another key is refused with one
ERROR line (and the minion keeps running), the right one is served."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .helpers import World, key_tool, make_world, ping

pytestmark = pytest.mark.integration


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def _master_finger(world: World) -> str:
    done = key_tool(world.root / "ma", "-F", "--out", "json")
    assert done.returncode == 0, done.stderr
    import json

    local = json.loads(done.stdout)["local"]
    (finger,) = local.values()
    return str(finger)


def test_a_minion_pins_its_masters_fingerprint(world: World) -> None:
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    finger = _master_finger(world)
    assert len(finger.split(":")) == 32  # sha256, colon-separated pairs
    wrong = ":".join(["00"] * 32)
    minion = world.start("minion", world.minion_dir("m1", "minion1", f"master_finger: '{wrong}'\n"))
    line = minion.expect("refusing the master", timeout=15)
    assert "master_finger" in line and wrong in line and finger in line
    assert minion.popen.poll() is None
    assert not ping(world, timeout="2")
    assert sum("refusing the master" in entry for entry in minion.drain()) == 1
    minion.terminate()
    minion = world.start("minion", world.minion_dir("m1", "minion1",
                                                    f"master_finger: '{finger.upper()}'\n"))
    minion.expect("connected to the master themaster", timeout=15)
    assert ping(world)


def test_the_pin_compares_fingerprints_in_hash_type_whatever_the_colons_and_case() -> None:
    from raetsalt.daemon.policy import minion_key_policy
    from raetsalt.keep.records import Acceptance, fingerprint

    verhex, pubhex = "ab" * 32, "cd" * 32
    for hash_type in ("sha256", "sha512", "md5"):
        finger = fingerprint(verhex, hash_type)
        for written in (finger, finger.upper(), finger.replace(":", "")):
            policy = minion_key_policy({"master_finger": written, "hash_type": hash_type})
            assert policy.decide("master", verhex, pubhex, None).acceptance is \
                Acceptance.ACCEPTED
            refused = policy.decide("master", "ef" * 32, pubhex, None)
            assert refused.acceptance is Acceptance.REJECTED and refused.unpinned
            assert refused.record is None and refused.denied is None  # nothing recorded
    assert minion_key_policy({"master_finger": None}).pin is None
