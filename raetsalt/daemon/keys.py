"""The operator's key decisions reach a running master as commands over the lane.

``raetsalt-key`` (as root or the master's user: its yard must sit directly in
``sock_dir``, as for every lane request the master trusts) sends the keys it listed and
what to do with them::

    {share: "key", req, action: "accept"|"reject"|"delete"|"gen_accept", keys: [{role,
     state, verhex, pubhex}, ...]}         ->  key_ret {req, stale: [index of each key
                                                   no longer stored as listed]}

(``gen_accept``: keys ``raetsalt-api`` made for an id the master holds no key of,
recorded accepted; stale when the id has one.)
    {share: "key", req, action: "status"}            ->  key_ret {req, pending,
                                                           max_pending, dropped, limited}

The master applies each decision to its road at once (``RoadStack.change_key``: a pending
join is answered, a deleted or rejected key ends that minion's session) and answers once
the keep writer has made the change durable, so the key tool's "Key for minion X
accepted." is true on disk as well as in the running master.  If the keep cannot be
written the answer says so (``error``); the decision stands in memory meanwhile.
"""

from __future__ import annotations

import logging
import selectors
from collections.abc import Callable, Mapping
from typing import Any

from raetsalt import protocol as p
from raetsalt.keep.policy import Action
from raetsalt.keep.records import KeyRef, KeyState, name_problem
from raetsalt.node import Node

log = logging.getLogger("raetsalt.daemon")

SHARE_KEY = "key"
SHARE_KEY_RET = "key_ret"
MAX_KEYS = 100_000
"""Keys one command may name (the pending limit is 1,000 by default)."""
_STATES = {state.value: state for state in KeyState}


def refs_untrusted(keys: object) -> list[KeyRef] | None:
    """The keys of a command, or None if the list is malformed."""
    if not isinstance(keys, list) or len(keys) > MAX_KEYS:
        return None
    refs = []
    for item in keys:
        if not isinstance(item, dict):
            return None
        role, word = item.get("role"), item.get("state")
        state = _STATES.get(word) if isinstance(word, str) else None
        verhex, pubhex = item.get("verhex"), item.get("pubhex")
        if name_problem(role) is not None or state is None:
            return None
        if not isinstance(verhex, str) or not isinstance(pubhex, str):
            return None
        refs.append(KeyRef(str(role), state, verhex, pubhex))
    return refs


class KeyService:
    """Serves the ``key`` share on a master's node (module docstring).

    :param trusted: who owns a lane yard (None: not trusted), ``AccessGate.lane_requester``.
    :param send: delivers an answer to a client yard.
    :param decided: told of each decision applied here (a cluster shares them:
        ``raetsalt.daemon.clusterkeys``).
    """

    def __init__(
        self,
        node: Node,
        trusted: Callable[[str], object | None],
        send: Callable[[str, dict[str, Any]], None],
        decided: Callable[[str, KeyRef], None] | None = None,
        elsewhere: Callable[[str, KeyRef], bool] | None = None,
    ) -> None:
        self.node = node
        self.trusted = trusted
        self.send = send
        self.decided = decided
        """Told of each decision applied (the cluster's shared keys)."""
        self.elsewhere = elsewhere
        """May this action on this key, one the cluster holds but this master does not,
        go to the cluster?  (The master holding that minion, or those listing that
        denied key, apply it.)"""
        self._waiting: list[tuple[int, str, dict[str, Any]]] = []
        self._attempts = 0  # the writer's commit attempts seen here

    # Wakeable: the keep writer says when a change is durable.
    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        writer = self.node.stack.writer
        if writer is not None:
            selector.register(writer.fileno(), selectors.EVENT_READ, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        writer = self.node.stack.writer
        if writer is not None:
            try:
                selector.unregister(writer.fileno())
            except (KeyError, ValueError):
                pass

    def on_request(self, yard: str, body: Mapping[str, Any]) -> None:
        req = body.get("req")
        if not isinstance(req, str):
            return
        if self.trusted(yard) is None:
            self._answer(yard, req, error="key commands are taken only from yards in the "
                                           "master's sock_dir (run raetsalt-key as its user)")
            return
        action = body.get("action")
        stack = self.node.stack
        if action == "status":
            stats, keys = stack.road.stats, stack.road.keys
            self._answer(yard, req, pending=keys.pending, max_pending=keys.max_pending,
                         dropped=stats["drop_pending_limit"], limited=stats["drop_rate_limit"])
            return
        refs = refs_untrusted(body.get("keys"))
        if action not in Action.ALL or refs is None:
            self._answer(yard, req, error=f"malformed key command {action!r}")
            return
        stale: list[int] = []
        sequence = 0
        for index, ref in enumerate(refs):
            changed = stack.change_key(str(action), ref)
            if changed is None and self.decided is not None and self.elsewhere is not None \
                    and self.elsewhere(str(action), ref):
                self.decided(str(action), ref)
                log.info("key of minion %s (%s): %s by the operator, for the cluster",
                         ref.role, ref.state.value, action)
                continue
            if changed is None:
                stale.append(index)
                continue
            sequence = changed
            if self.decided is not None:
                self.decided(str(action), ref)
            log.info("key of minion %s (%s): %s by the operator", ref.role, ref.state.value,
                     action)
        if sequence == 0:  # nothing for this keep to write (refused, or the cluster's)
            self._answer(yard, req, stale=stale)
            return
        self._waiting.append((sequence, yard, {"req": req, "stale": stale}))
        self.poll()

    def poll(self) -> None:
        """Answer the commands whose changes are on disk (or cannot get there now)."""
        writer = self.node.stack.writer
        if writer is None:
            return
        if writer.attempts == self._attempts:
            return  # no commit since we looked (the usual case: no read, no wake-up byte)
        # A commit woke the loop: read its byte, or the descriptor stays readable.  The
        # writer sends the byte before it counts the attempt, so it is there to read.
        self._attempts = writer.attempts
        writer.drain_wake()
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        for sequence, yard, answer in waiting:
            if writer.committed >= sequence:
                self._answer(yard, **answer)
            elif writer.failing is not None:
                self._answer(yard, **answer, error=f"not saved yet: {writer.failing}")
            else:
                self._waiting.append((sequence, yard, answer))

    def _answer(self, yard: str, req: str, **fields: Any) -> None:
        self.send(yard, p.lane_reply(self.node.stack.road.name, yard, SHARE_KEY_RET, req=req,
                                     **fields))
