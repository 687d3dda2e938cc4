"""A master's part in its cluster's shared keys (``cluster_id`` with ``cluster_store``).

``ClusterKeyLink`` connects the road of this master to ``raetsalt.store.pgkeys``: the
road's key policy asks the cluster first about an undecided id (a minion accepted on
another master joins here without a re-accept), the operator's decisions made here go
to the cluster (``publish``, called by the key commands), and the decisions made on the
other masters are applied to this road as they arrive (``poll``): a pending key accepted
elsewhere lets its minion in here at once, a key deleted or rejected elsewhere ends that
minion's session here.  A key waiting for an operator here is written to the cluster as
pending (``pending``), so an operator on any master lists and decides it; a key denied
here (``denied``) is listed by every master, and a denied key deleted on any master
leaves this master's denied keys too.  A minion the
cluster accepted that moves here from another master starts its session with the allow
alone (the road's ``adopt_key``: ``engine.adopt``).
"""

from __future__ import annotations

import dataclasses
import logging
import selectors
from collections.abc import Mapping
from typing import Any

from raetsalt.errors import ConfigError, LocalError
from raetsalt.keep.policy import Action
from raetsalt.keep.records import Acceptance, KeyRef, KeyState
from raetsalt.node import Node
from raetsalt.store.pgconfig import cluster_params
from raetsalt.store.sharedkeys import local_action

log = logging.getLogger("raetsalt.daemon")


class ClusterKeyLink:
    """Shared keys on a master's node (module docstring)."""

    def __init__(self, node: Node, opts: Mapping[str, Any]) -> None:
        cluster_id = opts["cluster_id"]
        if opts.get("cluster_store") is None:
            raise ConfigError("cluster_id needs cluster_store (the cluster's PostgreSQL "
                              "database, a libpq connection string)")
        params = cluster_params(opts)
        from raetsalt.store.pgkeys import ClusterKeys

        self.node = node
        self.keys = ClusterKeys(params, str(cluster_id), str(opts["id"]))
        road = node.stack.road
        road.keys.policy = dataclasses.replace(road.keys.policy, shared=self.keys.verdict,
                                               taken=self.keys.taken)
        road.adopt_key = self.keys.accepted_key  # a minion moving here needs no join

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        selector.register(self.keys.fileno(), selectors.EVENT_READ, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        try:
            selector.unregister(self.keys.fileno())
        except (KeyError, ValueError):
            pass

    def publish(self, action: str, ref: KeyRef) -> None:
        self.keys.publish(action, ref)

    def holds(self, action: str, ref: KeyRef) -> bool:
        """Is ``ref`` a key the cluster holds that this master does not, and may an
        operator here do ``action`` on it?  A denied key denied elsewhere can only be
        deleted from here (accepting it is done where it was denied)."""
        if ref.state is KeyState.DENIED and action != Action.DELETE:
            return False
        return self.keys.holds(ref)

    def denied(self, role: str) -> None:
        """A key of ``role`` was denied here: the cluster lists this master's denied
        pairs of that id."""
        pairs = self.node.stack.road.keys.denied.get(role, ())
        if pairs:
            self.keys.deny(role, pairs)

    def joined(self, remote: str) -> None:
        """A minion joined this master: the cluster lists its key as accepted."""
        road = self.node.stack.road
        try:
            role = road.remote(remote).role or remote
        except LocalError:
            return
        record = road.keys.roles.get(role)
        if record is not None:
            self.keys.joined(role, record.verhex, record.pubhex)

    def pending(self, role: str) -> None:
        """A minion's key waits for an operator here: the cluster lists it, and an
        operator on any master may decide it."""
        record = self.node.stack.road.keys.roles.get(role)
        if record is not None and record.acceptance is Acceptance.PENDING:
            self.keys.pending(role, record.verhex, record.pubhex)

    def poll(self) -> None:
        """Apply the decisions other masters made (their minions' sessions end here at
        once when a key is deleted or rejected)."""
        stack = self.node.stack
        keys = stack.road.keys
        for shared in self.keys.take():
            todo = local_action(shared, keys.roles.get(shared.role),
                                keys.denied.get(shared.role, ()))
            if todo is None:
                continue
            action, ref = todo
            if stack.change_key(action, ref) is not None:
                log.info("key of minion %s (%s): %s by the cluster (on %s)", ref.role,
                         ref.state.value, action, shared.origin or "another master")

    def close(self) -> None:
        self.keys.close()
