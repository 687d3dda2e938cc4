"""The minion's side of peer publishing, sans-IO: relaying ``publish``/``runner`` requests
of local clients (the ``publish`` execution module, running in a job process) to the
master, and the master's answers back.  Salt's request channel in a job process
(``salt_req``, ``raetsalt.saltbridge.channel``) is relayed the same way.

A client yard on the minion's lane sends ``publish`` or ``runner`` with the same fields
as on the master's lane; ``PeerRelay`` gives the request a relay id (``rid``), forwards it
over the road as ``peer_publish``/``peer_runner`` and remembers ``rid -> (yard, req)``.
The master answers with ``peer_ack``/``peer_ret``/``peer_run_ret`` carrying the ``rid``;
the relay turns each into the lane answer (``pub_ack``/``job_ret``/``run_ret`` with the
client's ``req``).  The relay adds nothing about identity: the master takes the minion's
id from the road (the authenticated role), whatever the payload says.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raetsalt import protocol as p
from raetsalt.protocol import ToClient

from .minion import ToMaster

log = logging.getLogger(__name__)

RELAY_GRACE = 30.0
"""How long a relay entry outlives the time-out its request asked for."""
MAX_RELAYS = 1024
"""Relays in flight at most (a runaway job cannot grow the daemon without bound)."""

NOT_CONNECTED = "the minion is not connected to its master; the request was not sent"

_REQUESTS = {p.SHARE_PUBLISH: p.SHARE_PEER_PUBLISH, p.SHARE_RUNNER: p.SHARE_PEER_RUNNER,
             p.SHARE_SALT_REQ: p.SHARE_SALT_REQ}
_ERROR_ANSWER = {p.SHARE_PUBLISH: p.SHARE_PUB_ACK, p.SHARE_RUNNER: p.SHARE_RUN_RET,
                 p.SHARE_SALT_REQ: p.SHARE_SALT_RET}
_FINAL_ANSWERS = frozenset({p.SHARE_RUN_RET, p.SHARE_SALT_RET})
"""Lane answers after which nothing more comes for the request."""


@dataclass(slots=True)
class _Relay:
    yard: str
    req: str
    expires: float


class PeerRelay:
    """Relays of one minion daemon (``estate``: its road estate name, for routes)."""

    def __init__(self, estate: str | None = None) -> None:
        self.estate = estate
        self._relays: dict[str, _Relay] = {}
        self._counter = 0

    @staticmethod
    def serves(share: str | None) -> bool:
        """A lane share this relay handles."""
        return share in _REQUESTS

    def on_request(self, yard: str, share: str, body: Mapping[str, Any], now: float,
                   connected: bool) -> list[ToMaster | ToClient]:
        """A client's ``publish``/``runner`` request on the minion's lane."""
        req = body.get("req")
        if not isinstance(req, str) or share not in _REQUESTS:
            return []
        self._expire(now)
        if not connected or len(self._relays) >= MAX_RELAYS:
            why = NOT_CONNECTED if not connected else "too many peer requests in flight"
            return [ToClient(yard, p.lane_reply(self.estate, yard, _ERROR_ANSWER[share],
                                                req=req, error=why))]
        self._counter += 1
        rid = str(self._counter)
        timeout = body.get("timeout")
        wait = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else 5.0
        self._relays[rid] = _Relay(yard, req, now + wait + RELAY_GRACE)
        # Everything but the lane bookkeeping goes on; the master ignores what it does
        # not know (an ``id`` field included: the road says who we are).
        fields = {k: v for k, v in body.items() if k not in ("route", "req", "rid")}
        return [ToMaster(p.road_message(self.estate, None, _REQUESTS[share], rid=rid,
                                        **fields))]

    def on_answer(self, share: str, body: Mapping[str, Any]) -> list[ToMaster | ToClient]:
        """The master's ``peer_ack``/``peer_ret``/``peer_run_ret``."""
        lane_share = p.LANE_ANSWERS.get(share)
        rid = body.get("rid")
        relay = self._relays.get(rid) if isinstance(rid, str) else None
        if lane_share is None or relay is None or not isinstance(rid, str):
            log.debug("peer answer %s for unknown relay %r dropped", share, rid)
            return []
        if lane_share in _FINAL_ANSWERS or (lane_share == p.SHARE_PUB_ACK and (
                "error" in body or not body.get("minions"))):
            del self._relays[rid]  # nothing more will come for this request
        fields = {k: v for k, v in body.items() if k not in ("route", "rid", "req")}
        return [ToClient(relay.yard, p.lane_reply(self.estate, relay.yard, lane_share,
                                                  req=relay.req, **fields))]

    def forget_client(self, yard: str) -> None:
        """The client yard is gone: drop its relays."""
        for rid in [r for r, relay in self._relays.items() if relay.yard == yard]:
            del self._relays[rid]

    def pending(self) -> int:
        return len(self._relays)

    def _expire(self, now: float) -> None:
        for rid in [r for r, relay in self._relays.items() if relay.expires <= now]:
            del self._relays[rid]
