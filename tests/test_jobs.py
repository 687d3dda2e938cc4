"""Job ids and the master's job cache."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pytest

from raetsalt.daemon.jobcache import JobCache
from raetsalt.errors import KeepError
from raetsalt.services.jids import new_jid, start_time

T0 = datetime(2026, 11, 21, 4, 27, 25, 667286, tzinfo=UTC)


def test_jid_is_salts_utc_format_and_strictly_increasing() -> None:
    assert new_jid(T0) == "20261121042725667286"
    assert start_time("20261121042725667286") == "2026, Nov 21 04:27:25.667286"
    assert new_jid(T0, last="20261121042725667286") == "20261121042725667287"
    local = T0.astimezone(datetime.now().astimezone().tzinfo)
    assert new_jid(local) == "20261121042725667286"  # always UTC


def test_load_and_returns_round_trip_with_safe_permissions(tmp_path: Path) -> None:
    cache = JobCache(tmp_path / "jobs")
    jid = new_jid(T0)
    cache.save_load(
        jid,
        {
            "fun": "test.ping",
            "arg": [],
            "tgt": "*",
            "tgt_type": "glob",
            "user": "root",
            "minions": ["a", "b"],
        },
    )
    cache.save_return(jid, "a", {"return": True, "retcode": 0, "success": True})
    assert cache.get_load(jid)["minions"] == ["a", "b"]  # type: ignore[index]
    assert cache.get_returns(jid) == {"a": {"return": True, "retcode": 0, "success": True}}
    assert cache.jids() == [jid]
    assert stat.S_IMODE(os.stat(tmp_path / "jobs" / jid).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "jobs" / jid / "a.json").st_mode) == 0o600
    # a fresh cache object (a restarted master) sees the same jobs
    assert JobCache(tmp_path / "jobs").get_returns(jid)["a"]["return"] is True


def test_crash_during_write_keeps_the_old_file(tmp_path: Path) -> None:
    cache = JobCache(tmp_path)
    jid = new_jid(T0)
    cache.save_return(jid, "a", {"return": 1})
    with mock.patch("os.replace", side_effect=OSError("disk died")), pytest.raises(OSError):
        cache.save_return(jid, "a", {"return": 2})
    assert cache.get_returns(jid) == {"a": {"return": 1}}
    assert not [p for p in (tmp_path / jid).iterdir() if p.name.endswith(".tmp")]


def test_bad_ids_and_corrupt_files_are_reported(tmp_path: Path) -> None:
    cache = JobCache(tmp_path)
    with pytest.raises(KeepError):
        cache.save_load("../etc", {})
    with pytest.raises(KeepError):
        cache.save_return(new_jid(T0), "../x", {})
    jid = new_jid(T0)
    cache.save_return(jid, "a", {"return": 1})
    (tmp_path / jid / "a.json").write_text("{broken")
    with pytest.raises(KeepError, match="a.json"):
        cache.get_returns(jid)


def test_clean_removes_only_old_jobs(tmp_path: Path) -> None:
    cache = JobCache(tmp_path)
    old, new = new_jid(T0 - timedelta(hours=30)), new_jid(T0)
    cache.save_load(old, {"fun": "x"})
    cache.save_load(new, {"fun": "y"})
    assert cache.clean(T0, keep_hours=24) == [old]
    assert cache.jids() == [new]


def test_data_json_cannot_hold_is_a_keep_error_not_a_crash(tmp_path: Path) -> None:
    cache = JobCache(tmp_path)
    deep: list[object] = []
    cur = deep
    for _ in range(5000):
        cur.append([])
        cur = cur[0]  # type: ignore[assignment]
    jid = new_jid(T0)
    with pytest.raises(KeepError, match="cannot be stored as JSON"):
        cache.save_load(jid, {"fun": "test.echo", "arg": [deep]})
    assert not [p for p in (tmp_path / jid).iterdir() if p.name.endswith(".tmp")]
