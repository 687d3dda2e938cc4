"""Firing at a bus that is not there: False, as in Salt, and one warning naming the path
(Salt says nothing; an operator's scripts failed silently with a wrong sock_dir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raetsalt import event as event_module
from raetsalt.event import SaltEvent


def test_fire_event_to_a_missing_bus_warns_once_naming_the_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_module, "_WARNED_PATHS", set())
    bus = SaltEvent("master", str(tmp_path))
    assert bus.fire_event({"a": 1}, "my/tag") is False
    assert bus.fire_event({"a": 2}, "my/tag") is False
    bus.destroy()
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert f"the master event bus at {tmp_path}/master.manor.uxd cannot be reached " \
        "(No such file or directory)" in warnings[0].getMessage()
    # another sock_dir is another warning; a missing directory too
    other = SaltEvent("minion", str(tmp_path / "nope"), opts={"id": "m1"})
    assert other.fire_event({}, "t") is False
    other.destroy()
    assert sum(r.levelname == "WARNING" for r in caplog.records) == 2


def test_warnings_are_bounded(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_module, "_WARNED_PATHS", set())
    for n in range(event_module._MAX_WARNED + 20):
        bus = SaltEvent("master", str(tmp_path / f"d{n}"))
        assert not bus.fire_event({}, "t")
        bus.destroy()
    assert sum(r.levelname == "WARNING" for r in caplog.records) == event_module._MAX_WARNED
