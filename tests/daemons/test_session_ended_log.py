"""A session the road ends (native/rekey.py limits, native/recovery.py's optimistic-ack
check) is one WARNING line in the daemon's log, saying why."""

from __future__ import annotations

import logging

import pytest

from raetsalt.daemon.service import log_session_ended
from raetsalt.engine.events import SessionEnded


@pytest.mark.parametrize(
    ("reason", "words"),
    [("key_expired", "no key rotation completed"), ("optimistic_ack", "never sent")],
)
def test_an_ended_session_is_one_warning(
    caplog: pytest.LogCaptureFixture, reason: str, words: str
) -> None:
    with caplog.at_level(logging.DEBUG, logger="raetsalt.daemon"):
        log_session_ended(SessionEnded("m1", reason, "detail\nwith a newline"))
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "m1" in record.getMessage() and words in record.getMessage()
    assert "\n" not in record.getMessage()
