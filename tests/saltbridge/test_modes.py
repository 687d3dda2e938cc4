"""Which functions go to Salt's loader."""

from __future__ import annotations

import pytest

from raetsalt.saltbridge.modes import runs_in_salt, uses_salt

NATIVE = {"test.ping", "cmd.run", "grains.items", "publish.publish", "saltutil.running",
          "sys.doc", "saltutil.sync_grains", "saltutil.refresh_grains"}


@pytest.mark.parametrize(("fun", "mode", "salt"), [
    ("test.ping", "auto", False), ("state.apply", "auto", True), ("mymod.hello", "auto", True),
    ("test.ping,state.apply", "auto", True), ("test.ping,cmd.run", "auto", False),
    ("test.ping", "salt", True), ("publish.publish", "salt", False),
    ("event.fire_master", "salt", False), ("saltutil.running", "salt", False),
    ("saltutil.sync_all", "salt", True), ("publish.publish,event.fire", "salt", False),
    ("state.apply", "native", False), ("sys.doc", "auto", True),
    ("saltutil.sync_grains", "auto", True), ("saltutil.refresh_grains", "auto", False),
    ("sys.doc", "native", False),
])
def test_routing(fun: str, mode: str, salt: bool) -> None:
    assert runs_in_salt(fun, mode, NATIVE) is salt


def test_modes_use_salt() -> None:
    assert uses_salt("salt", False) and uses_salt("auto", True)
    assert not uses_salt("auto", False) and not uses_salt("native", True)
