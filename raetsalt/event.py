"""Event bus client library with Salt's API shape, and a stand-alone bus host.

Use it as Salt's ``salt.utils.event``::

    opts = raetsalt.config.minion_config('/etc/raetsalt/minion')   # or a plain dict
    event = raetsalt.event.MinionEvent(**opts)          # uses opts['sock_dir'], opts['id']
    for data in event.iter_events(tag='mytag'):
        print(data)

    raetsalt.event.SaltEvent('master', '/var/run/raetsalt/master').fire_event({'a': 1}, 'mytag')

Each client is a yard on the node's lane (``<sock_dir>/<lane>.ev<random>.uxd``) whose
socket takes datagrams only from the manor yard, which serves the bus (``raetsalt.manor``).
Without daemons, host a bus with::

    python -m raetsalt.event serve --node minion|master --sock-dir DIR [--id ID]

When the bus cannot be reached (no daemon, or a ``sock_dir`` that is not the daemon's),
``fire_event`` returns False as in Salt, and a warning names the socket path it tried
(once per path and process), where Salt says nothing.

Differences from Salt: ``SaltEvent`` subscribes on first read unless ``listen=True``
(``MinionEvent``/``MasterEvent`` subscribe at once, as in Salt); there is no pending-tag
cache (``subscribe`` only subscribes); events larger than the lane's 16 MiB message limit
are refused (``fire_event`` returns False) instead of trimmed.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from raetsalt.bus import tag_matches
from raetsalt.drivers.uxd import UxdSocket, prepare_sock_dir
from raetsalt.errors import ConfigError, LocalError
from raetsalt.lane.engine import Lane, YardMessage
from raetsalt.manor import (
    SHARE_ACK,
    SHARE_EVENTS,
    SHARE_FIRE,
    SHARE_SUBSCRIBE,
    SHARE_UNSUBSCRIBE,
    Manor,
)
from raetsalt.paths import MANOR, lane_name_for, manor_path, resolve_group, yard_file_name
from raetsalt.routing import Route, YardAddress
from raetsalt.timefmt import salt_stamp

log = logging.getLogger(__name__)

_WARNED_PATHS: set[str] = set()
"""Bus paths already warned about in this process (bounded by _MAX_WARNED)."""
_MAX_WARNED = 64

__all__ = [
    "MasterEvent",
    "MinionEvent",
    "SaltEvent",
    "get_event",
    "lane_name_for",
    "manor_path",
    "serve",
    "tagify",
]

NODES = ("minion", "master")
def tagify(suffix: str | list[str] = "", prefix: str = "", base: str = "salt") -> str:
    """Salt's tag builder: ``salt/<prefix>/<suffix...>``."""
    parts = [base]
    if prefix:
        parts.append(prefix)
    parts.extend([suffix] if isinstance(suffix, str) else suffix)
    return "/".join(part for part in parts if part)


def _default_id() -> str:
    return socket.gethostname() or "localhost"


class SaltEvent:
    """A connection to a node's event bus.

    :param node: ``'minion'`` or ``'master'``.
    :param sock_dir: the node's socket directory; defaults to ``opts['sock_dir']``.
    :param opts: the node's opts (``id`` selects a minion's bus); keyword arguments are
        merged into it, so ``SaltEvent('minion', **opts)`` works.
    :param listen: subscribe now rather than on the first read.
    :param claim: take over, when subscribing, the events the bus held under this name
        (``raetsalt.bus.EventBus.hold``: the master's reactor process).
    """

    def __init__(
        self,
        node: str,
        sock_dir: str | None = None,
        transport: str | None = None,
        opts: Mapping[str, Any] | None = None,
        listen: bool = False,
        claim: str | None = None,
        **kwargs: Any,
    ) -> None:
        if node not in NODES:
            raise LocalError(f"node must be 'minion' or 'master', not {node!r}")
        merged: dict[str, Any] = dict(opts or {})
        merged.update(kwargs)
        self.opts = merged
        self.node = node
        self.sock_dir = sock_dir if sock_dir is not None else merged.get("sock_dir")
        if not self.sock_dir:
            raise ConfigError(f"no sock_dir for the {node} event bus")
        self.node_id = merged.get("id") or (_default_id() if node == "minion" else None)
        self.lane_name = lane_name_for(node, self.node_id)
        self.manor_path = manor_path(self.sock_dir, node, self.node_id)
        self._lane: Lane | None = None
        self._sock: UxdSocket | None = None
        self._private_dir: str | None = None
        self._subscribed = False
        self._routes: dict[str, dict[str, list[str | None]]] = {}
        self._pending: deque[tuple[str, dict[str, Any]]] = deque()
        self.claim = claim
        if listen:
            self.connect_pub()

    # -- connection ------------------------------------------------------------------------

    def _bind_dir(self) -> str:
        """Where this client's yard socket goes: sock_dir, or a private directory.

        A member of ``sock_dir_group`` may reach the manor (directory mode 0750) but not
        create files in sock_dir; its yard then lives in a directory of its own, group
        readable so the manor can answer.
        """
        assert self.sock_dir is not None
        if os.access(self.sock_dir, os.W_OK | os.X_OK):
            return self.sock_dir
        if self._private_dir is None:
            self._private_dir = tempfile.mkdtemp(prefix="rse", dir="/tmp")
            os.chown(self._private_dir, -1, os.stat(self.sock_dir).st_gid)
            os.chmod(self._private_dir, 0o750)
        return self._private_dir

    def _connect(self) -> bool:
        if self._sock is not None:
            return True
        yard = "ev" + os.urandom(4).hex()
        lane = Lane(lane_name=self.lane_name, yard_name=yard, accept=False)
        lane.add_yard(MANOR, self.manor_path)
        try:
            bind_dir = self._bind_dir()  # asserts sock_dir is set
            group = os.stat(bind_dir).st_gid if bind_dir != self.sock_dir else None
            sock = UxdSocket(
                os.path.join(bind_dir, yard_file_name(self.lane_name, yard)),
                group=group,
                connect_to=self.manor_path,
                sock_dir=self.sock_dir,
            )
        except OSError as exc:
            self._warn_unreachable(exc)
            return False
        self._lane, self._sock = lane, sock
        return True

    def _warn_unreachable(self, exc: OSError) -> None:
        path = self.manor_path
        if path in _WARNED_PATHS or len(_WARNED_PATHS) >= _MAX_WARNED:
            return
        _WARNED_PATHS.add(path)
        log.warning("the %s event bus at %s cannot be reached (%s): is the raetsalt-%s "
                    "daemon running, with this sock_dir?", self.node, path,
                    exc.strerror or exc, self.node)

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._lane = None
        self._routes.clear()
        self._subscribed = False

    def connect_pub(self, timeout: float | None = 5.0) -> bool:
        """Subscribe to the bus; waits up to ``timeout`` s for the manor to confirm."""
        if self._subscribed:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._send(SHARE_SUBSCRIBE, {"claim": self.claim} if self.claim else {},
                          timeout):
            return False
        while not self._subscribed:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._receive(remaining)
        return True

    def connect_pull(self, timeout: float | None = None) -> bool:
        """Make sure this client can fire events (its yard is bound and connected)."""
        return self._connect()

    def subscribe(self, tag: str | None = None, match_type: str | None = None) -> None:
        """Subscribe to the bus (Salt's pending-tag cache is not implemented)."""
        self.connect_pub()

    def _send(self, share: str, fields: Mapping[str, Any], timeout: float | None) -> bool:
        if self._sock is None and not self._connect():
            return False
        assert self._lane is not None and self._sock is not None
        body = {"route": self._route_wire(share), **fields}
        try:
            pages = self._lane.pack(body, MANOR)
        except (LocalError, TypeError, ValueError, OverflowError):
            return False
        try:
            if len(pages) == 1:  # the usual case: no deadline bookkeeping
                return self._sock.send_waiting(pages[0], timeout)
            deadline = None if timeout is None else time.monotonic() + timeout
            for data in pages:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not self._sock.send_waiting(data, remaining):
                    return False
        except OSError:
            # The manor went away (or was restarted): start afresh next time.
            self._disconnect()
            return False
        return True

    def _route_wire(self, share: str) -> dict[str, list[str | None]]:
        """The route from this yard to the manor's ``share`` (built once per share; only
        ever serialized, never changed)."""
        wire = self._routes.get(share)
        if wire is None:
            assert self._lane is not None
            yard = self._lane.yard_name
            wire = Route(YardAddress(None, yard, None), YardAddress(None, MANOR, share)).to_wire()
            self._routes[share] = wire
        return wire

    def _receive(self, timeout: float | None) -> None:
        assert self._sock is not None and self._lane is not None
        if not self._sock.wait_readable(timeout):
            return
        lane = self._lane
        self._sock.receive_into(lane, 0.0)
        event = lane.next_event()
        while event is not None:
            if type(event) is YardMessage:
                self._on_message(event.body)
            event = lane.next_event()

    def _on_message(self, body: dict[str, Any]) -> None:
        try:
            share = body["route"]["dst"][2]
        except (KeyError, IndexError, TypeError):
            return
        if share == SHARE_EVENTS:
            events = body.get("events")
            if not isinstance(events, list):
                return
            for item in events:
                if (
                    isinstance(item, list)
                    and len(item) == 2
                    and isinstance(item[0], str)
                    and isinstance(item[1], dict)
                ):
                    self._pending.append((item[0], item[1]))
        elif share == SHARE_ACK:
            self._subscribed = True

    # -- Salt API ----------------------------------------------------------------------------

    def fire_event(self, data: MutableMapping[str, Any], tag: str, timeout: float = 1000) -> bool:
        """Fire ``data`` under ``tag``; True once the bus has it queued.

        ``timeout`` (milliseconds, as in Salt) bounds the wait for room in the bus's
        queue.  Returns False when the bus is not running, unreachable or full.
        """
        if not str(tag):
            raise ValueError("Empty tag.")
        if type(data) is not dict and not isinstance(data, MutableMapping):
            raise ValueError(f"Dict object expected, not '{data}'.")
        data = dict(data)
        data["_stamp"] = salt_stamp(datetime.datetime.now(datetime.UTC))
        return self._send(SHARE_FIRE, {"tag": str(tag), "data": data}, timeout / 1000.0)

    def fire_master(self, data: Mapping[str, Any], tag: str, timeout: float = 1000) -> bool:
        """Ask the minion daemon to forward ``data`` under ``tag`` to the master's bus."""
        payload = {"data": dict(data), "tag": tag, "events": None, "pretag": None}
        return self.fire_event(payload, "fire_master", timeout)

    def get_event(
        self,
        wait: float = 5,
        tag: str = "",
        full: bool = False,
        match_type: str | None = None,
        no_block: bool = False,
        auto_reconnect: bool = False,
    ) -> dict[str, Any] | None:
        """The next event whose tag matches, or None after ``wait`` seconds.

        ``wait=0`` blocks forever unless ``no_block``.  Non-matching events are discarded.
        ``full=True`` returns ``{'tag': ..., 'data': ...}``.
        """
        if match_type is None:
            match_type = self.opts.get("event_match_type") or "startswith"
        tag_matches("", "", match_type)  # rejects an unknown match_type before waiting
        if no_block:
            deadline: float | None = time.monotonic()
        elif wait == 0:
            deadline = None
        else:
            deadline = time.monotonic() + wait
        while True:
            while self._pending:
                event_tag, data = self._pending.popleft()
                if tag_matches(event_tag, tag, match_type):
                    return {"tag": event_tag, "data": data} if full else data
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            if not self._subscribed:
                if not self.connect_pub(remaining if remaining is not None else 5.0):
                    if self._sock is None and remaining is not None:
                        # The bus is not up; wait out the caller's time, not spin.
                        time.sleep(min(remaining, 0.1))
                    elif self._sock is None:
                        time.sleep(0.1)
                continue
            self._receive(remaining)

    def iter_events(
        self,
        tag: str = "",
        full: bool = False,
        match_type: str | None = None,
        auto_reconnect: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """Yield matching events forever."""
        while True:
            data = self.get_event(wait=0, tag=tag, full=full, match_type=match_type)
            if data is not None:
                yield data

    def get_event_noblock(self) -> dict[str, Any] | None:
        """``{'tag', 'data'}`` of a waiting event, without filtering, or None."""
        return self.get_event(tag="", full=True, no_block=True)

    def get_event_block(self) -> dict[str, Any] | None:
        """``{'tag', 'data'}`` of the next event, without filtering, waiting for it."""
        return self.get_event(wait=0, tag="", full=True)

    def close_pub(self, release: bool = False) -> None:
        """Unsubscribe (the yard stays, so firing still works); ``release`` ends the
        hold this client claimed, for good."""
        if self._subscribed:
            self._send(SHARE_UNSUBSCRIBE, {"release": True} if release else {}, 0.1)
            self._subscribed = False
            self._pending.clear()

    def destroy(self) -> None:
        """Unsubscribe, close the yard and remove its socket file."""
        self.close_pub()
        self._disconnect()
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None

    close = destroy

    def __enter__(self) -> SaltEvent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def __del__(self) -> None:
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - nothing useful to do at interpreter shutdown
            pass


class MinionEvent(SaltEvent):
    """The minion's bus: ``MinionEvent(opts)`` or ``MinionEvent(**opts)``."""

    def __init__(self, opts: Mapping[str, Any] | None = None, listen: bool = True,
                 **kwargs: Any) -> None:
        merged = dict(opts or {})
        merged.update(kwargs)
        super().__init__("minion", sock_dir=merged.get("sock_dir"), opts=merged, listen=listen)


class MasterEvent(SaltEvent):
    """The master's bus: ``MasterEvent(sock_dir)``."""

    def __init__(self, sock_dir: str, opts: Mapping[str, Any] | None = None,
                 listen: bool = True, **kwargs: Any) -> None:
        super().__init__("master", sock_dir=sock_dir, opts=opts, listen=listen, **kwargs)


def get_event(
    node: str,
    sock_dir: str | None = None,
    transport: str | None = None,
    opts: Mapping[str, Any] | None = None,
    listen: bool = True,
    **kwargs: Any,
) -> SaltEvent:
    """Salt's factory: a ``MinionEvent``/``MasterEvent`` for ``node``."""
    merged = dict(opts or {})
    merged.update(kwargs)
    if sock_dir is None:
        sock_dir = merged.get("sock_dir")
    if node == "master":
        if sock_dir is None:
            raise ConfigError("no sock_dir for the master event bus")
        return MasterEvent(sock_dir, opts=merged, listen=listen)
    if node == "minion":
        merged["sock_dir"] = sock_dir
        return MinionEvent(merged, listen=listen)
    raise LocalError(f"node must be 'minion' or 'master', not {node!r}")


# ---------------------------------------------------------------------------- bus host


class BusHost:
    """A manor yard on a real socket: what ``serve`` runs, step by step.

    ``step(timeout)`` waits (on socket readiness or the manor's timer, never longer than
    ``timeout``), then receives, runs timers and sends.  The daemon's loop does the same
    with its own selector and the road beside it.
    """

    def __init__(
        self,
        *,
        node: str,
        sock_dir: str,
        node_id: str | None = None,
        group: str | int | None = None,
        manor: Manor | None = None,
    ) -> None:
        if node == "minion" and not node_id:
            node_id = _default_id()
        gid = resolve_group(group)
        self.path = manor_path(sock_dir, node, node_id)
        prepare_sock_dir(sock_dir, gid)
        lane = Lane(lane_name=lane_name_for(node, node_id), yard_name=MANOR)
        self.manor = manor if manor is not None else Manor(lane=lane, node=node, node_id=node_id)
        self.socket = UxdSocket(self.path, group=gid, replace_stale=True, sock_dir=sock_dir,
                                manor=True)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.socket.fileno(), selectors.EVENT_READ)
        wait_fd = self.socket.wait_fileno()
        if wait_fd is not None:
            self.selector.register(wait_fd, selectors.EVENT_READ)

    def step(self, timeout: float | None = None) -> None:
        manor = self.manor
        now = time.monotonic()
        timer = manor.get_timer()
        if timer is not None:
            due = max(0.0, timer - now)
            timeout = due if timeout is None else min(timeout, due)
        ready = self.selector.select(timeout)
        now = time.monotonic()
        if ready:
            self.socket.receive_into(manor, now)
            self.socket.release_writable(manor, now)
        manor.handle_timer(now)
        self.socket.send_all(manor.datagrams_to_send(now), manor, now)

    def close(self) -> None:
        self.selector.close()
        self.socket.close()


def serve(
    node: str,
    sock_dir: str,
    node_id: str | None = None,
    group: str | int | None = None,
    ready: Any = None,
) -> None:
    """Host a node's event bus until SIGINT/SIGTERM.  ``ready(path)`` runs once bound."""
    host = BusHost(node=node, sock_dir=sock_dir, node_id=node_id, group=group)
    stop = False
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    host.selector.register(wake_r.fileno(), selectors.EVENT_READ)

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.set_wakeup_fd(wake_w.fileno())
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if ready is not None:
            ready(host.path)
        while not stop:
            host.step()
    finally:
        signal.set_wakeup_fd(-1)
        host.close()
        wake_r.close()
        wake_w.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raetsalt.event")
    sub = parser.add_subparsers(dest="command", required=True)
    srv = sub.add_parser("serve", help="host a node's event bus without the daemons")
    srv.add_argument("--node", choices=NODES, required=True)
    srv.add_argument("--sock-dir", required=True)
    srv.add_argument("--id", dest="node_id", default=None, help="minion id (default: hostname)")
    srv.add_argument("--group", default=None, help="group that may use the bus (dir 0750)")
    args = parser.parse_args(argv)

    def ready(path: str) -> None:
        print(f"serving {path}", flush=True)

    try:
        serve(args.node, args.sock_dir, node_id=args.node_id, group=args.group, ready=ready)
    except (ConfigError, LocalError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
