"""A return of the minion's Salt scheduler, as the master takes it.

Salt's scheduled jobs return with jid ``req`` (unless the job names returners only):
the master gives each a real jid, stores it in its job cache and fires
``salt/job/<jid>/ret/<minion>``.  ``scheduled_return`` turns what the scheduler
process reported (Salt's ``handle_func`` mapping) into the road message of a
``raetsalt-call`` return, which the master already treats that way.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raetsalt import protocol as p

KEPT = ("return", "retcode", "success", "out")


def scheduled_return(estate: str | None, ret: Mapping[str, Any]) -> dict[str, Any] | None:
    """The road message for ``ret``; None when it is not a return to send (no function
    name, or Salt's ``return_job: nocache``)."""
    fun = ret.get("fun")
    if not isinstance(fun, str) or not fun or ret.get("jid") == "nocache":
        return None
    args = ret.get("fun_args")
    body: dict[str, Any] = {"jid": p.CALL_JID, "fun": fun,
                            "fun_args": list(args) if isinstance(args, list) else []}
    body.update({k: ret[k] for k in KEPT if k in ret})
    if not isinstance(body.get("retcode"), int):
        body["retcode"] = 0
    return p.road_message(estate, None, p.SHARE_RETURN, **body)
