"""The pure parts of the minion's scheduler: what a scheduled return becomes on the road,
and how Salt's bus data (dates) is made sendable."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from raetsalt import protocol as p
from raetsalt.services.scheduled import scheduled_return


def test_a_scheduled_return_goes_as_a_return_the_master_gives_a_jid() -> None:
    ret = {"id": "m1", "fun": "test.ping", "fun_args": [], "schedule": "pinger",
           "jid": "req", "pid": 12, "return": True, "retcode": 0, "success": True,
           "cmd": "_return"}
    message = scheduled_return("m1-estate", ret)
    assert message is not None
    assert p.share_of(message) == p.SHARE_RETURN
    assert message["jid"] == p.CALL_JID and message["fun"] == "test.ping"
    assert message["return"] is True and message["retcode"] == 0
    assert "pid" not in message and "schedule" not in message and "cmd" not in message


def test_nocache_and_malformed_returns_are_not_sent() -> None:
    assert scheduled_return("e", {"fun": "test.ping", "jid": "nocache"}) is None
    assert scheduled_return("e", {"return": 1}) is None
    assert scheduled_return("e", {"fun": ""}) is None
    bad = scheduled_return("e", {"fun": "f", "fun_args": "x", "retcode": "1"})
    assert bad is not None and bad["fun_args"] == [] and bad["retcode"] == 0


@given(st.dictionaries(st.text(max_size=8), st.none() | st.integers() | st.text(max_size=5)
                       | st.lists(st.integers(), max_size=3), max_size=6))
def test_any_mapping_gives_a_message_or_none(ret: dict[str, object]) -> None:
    message = scheduled_return("e", ret)
    assert message is None or isinstance(message["fun"], str)


def test_dates_on_the_bus_are_salts_text() -> None:
    import pytest

    pytest.importorskip("salt")
    from raetsalt.saltbridge.saltjob import _bus_safe

    when = datetime.datetime(2026, 1, 2, 3, 4, 5, 6)
    got = _bus_safe({"schedule": {"j": {"_next_fire_time": when, "args": (1, {2})}}})
    assert got == {"schedule": {"j": {"_next_fire_time": "20260102T03:04:05.000006",
                                      "args": [1, [2]]}}}
