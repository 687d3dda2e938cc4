"""The road tunables a daemon takes from its config (daemon/service.py road_config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raetsalt.config import minion_config
from raetsalt.daemon.service import road_config
from raetsalt.errors import ConfigError


def test_rekey_keys_reach_the_road() -> None:
    config = road_config({"raet_rekey_interval": 30, "raet_rekey_messages": 5000}, "minion")
    assert (config.native_rekey_interval, config.native_rekey_packets) == (30.0, 5000)
    defaults = road_config({}, "master")
    assert (defaults.native_rekey_interval, defaults.native_rekey_packets) == (120.0, 1 << 24)


def test_rekey_limits_reach_the_road() -> None:
    config = road_config(
        {"raet_rekey_reject_after": 60, "raet_rekey_reject_messages": 9000,
         "raet_rekey_min_gap": 2},
        "master",
    )
    assert config.native_reject_after == 60.0 and config.native_reject_packets == 9000
    assert config.native_rekey_min_gap == 2.0
    defaults = road_config({}, "minion")
    # Safely above the rotation they back up (120 s, 2**24 datagrams).
    assert defaults.native_reject_after == 180.0 and defaults.native_reject_packets == 1 << 25
    assert defaults.native_rekey_min_gap == 5.0


@pytest.mark.parametrize(
    "line",
    [
        "raet_rekey_interval: 0.5",
        "raet_rekey_interval: .inf",
        "raet_rekey_messages: 1",
        "raet_rekey_reject_after: 1",
        "raet_rekey_reject_after: .inf",
        "raet_rekey_reject_messages: 10",
        "raet_rekey_min_gap: -1",
    ],
)
def test_rekey_values_that_would_burn_cpu_or_never_rotate_are_refused(
    tmp_path: Path, line: str
) -> None:
    path = tmp_path / "minion"
    path.write_text(f"id: m1\n{line}\n")
    with pytest.raises(ConfigError, match="raet_rekey"):
        minion_config(path)
