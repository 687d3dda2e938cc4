"""Event-bus bookkeeping: tag matching, listeners, bounded queues, fire_master expansion.

Pure (no sockets, no clock).  The manor yard (``raetsalt.manor``) feeds it events and
drains the per-listener queues into lane pages; the client library (``raetsalt.event``)
uses ``tag_matches`` to filter what it reads.  Semantics follow Salt's event bus
(``salt.utils.event``).
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import msgpack

from raetsalt.errors import LocalError

MATCH_TYPES = ("startswith", "endswith", "find", "regex", "fnmatch")
FIRE_MASTER_TAG = "fire_master"

# Tags a minion may not fire on the master bus (Salt's ``_minion_event`` blacklist).  Salt
# applies the list only to batches; raetsalt applies it to single events as well.
MINION_BLACKLIST = (
    "salt/job/*/publish",
    "salt/job/*/new",
    "salt/job/*/return",
    "salt/key",
    "salt/cloud/*",
    "salt/run/*",
    "salt/cluster/*",
    "salt/wheel/*/new",
    "salt/wheel/*/return",
)


@lru_cache(maxsize=256)
def _regex(tag: str) -> re.Pattern[str]:
    return re.compile("^" + tag)


def tag_matches(event_tag: str, tag: str, match_type: str | None = None) -> bool:
    """Salt's tag test; ``match_type`` None means 'startswith'.

    'regex' is anchored at the start only; 'fnmatch' is a whole-string glob, so an empty
    tag matches nothing there while it matches everything for the other types.
    """
    if match_type is None or match_type == "startswith":
        return event_tag.startswith(tag)
    if match_type == "endswith":
        return event_tag.endswith(tag)
    if match_type == "find":
        return tag in event_tag
    if match_type == "regex":
        return _regex(tag).search(event_tag) is not None
    if match_type == "fnmatch":
        return fnmatch.fnmatch(event_tag, tag)
    raise LocalError(f"unknown match_type {match_type!r}; use one of {', '.join(MATCH_TYPES)}")


def is_blacklisted(tag: str) -> bool:
    """True for tags a minion is not allowed to put on the master bus."""
    return any(fnmatch.fnmatchcase(tag, pattern) for pattern in MINION_BLACKLIST)


def expand_fire_master(data: Mapping[str, Any], minion_id: str | None) -> list[dict[str, Any]]:
    """Turn a ``fire_master`` event's data into the events the master bus should see.

    Returns ``[{'tag': ..., 'data': ...}, ...]`` following Salt's ``_minion_event``:

    * batch (``events`` is a list): each item is fired under its own ``tag``, its data
      being the item's ``data`` when present, else the item itself; with a ``pretag`` a
      copy under ``<pretag>/<tag>`` comes first;
    * single (``tag`` + ``data``): the whole load ``{id, cmd, tag, data, pretag}`` is fired
      under ``tag`` (so listeners find the payload in ``['data']['data']``, as in Salt).

    Blacklisted tags and malformed items are left out.  ``minion_id`` (the node's own id)
    overrides any ``id`` the payload claims.
    """
    out: list[dict[str, Any]] = []
    pretag = data.get("pretag")
    pretag = pretag if isinstance(pretag, str) and pretag else None
    events = data.get("events")
    if isinstance(events, list):
        for item in events:
            if not isinstance(item, Mapping) or not isinstance(item.get("tag"), str):
                continue
            tag = item["tag"]
            if not tag or is_blacklisted(tag):
                continue
            payload = item.get("data", item)
            if not isinstance(payload, Mapping):
                payload = {"data": payload}
            if pretag is not None:
                out.append({"tag": f"{pretag}/{tag}", "data": dict(payload)})
            out.append({"tag": tag, "data": dict(payload)})
        return out
    tag = data.get("tag")
    if not isinstance(tag, str) or not tag or is_blacklisted(tag):
        return out
    load = {
        "id": minion_id if minion_id is not None else data.get("id"),
        "cmd": "_minion_event",
        "tag": tag,
        "data": data.get("data"),
        "pretag": pretag,
    }
    if pretag is not None:
        out.append({"tag": f"{pretag}/{tag}", "data": dict(load)})
    out.append({"tag": tag, "data": load})
    return out


def encode_event(tag: str, data: Mapping[str, Any]) -> bytes:
    """One event as msgpack ``[tag, data]``: encoded once, shared by every listener."""
    packed: bytes = msgpack.packb([tag, data], use_bin_type=True)
    return packed


def encode_batch(route: Mapping[str, Any], encoded_events: Iterable[bytes], count: int) -> bytes:
    """Body ``{route, events: [[tag, data], ...]}`` built from already encoded events.

    msgpack containers are a header followed by their items, so the events are spliced
    in as they are instead of being decoded and encoded again per listener.
    """
    packer = msgpack.Packer(use_bin_type=True)
    return b"".join(
        (
            packer.pack_map_header(2),
            packer.pack("route"),
            packer.pack(route),
            packer.pack("events"),
            packer.pack_array_header(count),
            *encoded_events,
        )
    )


@dataclass(slots=True)
class _Listener:
    max_events: int
    max_bytes: int
    queue: deque[bytes] = field(default_factory=deque)
    queued_bytes: int = 0
    lost: int = 0


class EventBus:
    """Listeners and their bounded queues of encoded events.

    A listener that does not keep up loses its oldest events once it has ``max_events``
    queued or ``max_bytes`` worth (counted per listener in ``lost`` and in
    ``stats['events_lost']``); the bus itself never waits for anybody.

    A *hold* (``hold(name)``) is a queue kept for a listener that is not there yet (the
    master's reactor process, which subscribes some time after the bus opens): events are
    queued for it, within the same bounds (losses counted in ``stats['held_lost']``),
    until a listener subscribes claiming that name and takes the queue over.  When the
    claimer goes (its yard reaped, or it unsubscribes) the hold starts again, empty, for
    the next claimer (the process restarted); ``release`` ends it.  A hold may have bounds
    of its own (``hold(name, max_events=, max_bytes=)``), which its claimer keeps: the
    automation process's ``event_return`` must not lose a burst the bus took in.
    """

    def __init__(self, *, max_events: int = 20000, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.stats: Counter[str] = Counter()
        self._listeners: dict[str, _Listener] = {}
        self._held: dict[str, _Listener] = {}
        self._holds: dict[str, tuple[int, int]] = {}
        """hold name -> its bounds (events, bytes)."""
        self._claims: dict[str, str] = {}
        """listener -> the hold it claimed."""

    def hold(self, name: str, *, max_events: int | None = None,
             max_bytes: int | None = None) -> None:
        """Keep the events from now on for the listener that will claim ``name``, within
        ``max_events``/``max_bytes`` (the bus's own bounds by default)."""
        if name not in self._holds:
            bounds = (max_events or self.max_events, max_bytes or self.max_bytes)
            self._holds[name] = bounds
            self._held[name] = _Listener(*bounds)

    def held(self, name: str) -> int:
        """Events waiting for a claimer of ``name``."""
        entry = self._held.get(name)
        return len(entry.queue) if entry is not None else 0

    def subscribe(self, listener: str, claim: str | None = None) -> None:
        """Add ``listener``; with ``claim`` (a name ``hold`` was given), the events held
        under that name are its first, and the hold is its: a claimer that comes while
        another has it (a restarted process before its old yard is reaped) takes it."""
        if listener in self._listeners:
            return
        entry = self._held.pop(claim, None) if claim is not None else None
        if entry is None:
            bounds = self._holds.get(claim) if claim is not None else None
            entry = _Listener(*(bounds or (self.max_events, self.max_bytes)))
        self._listeners[listener] = entry
        if claim is None or claim not in self._holds:
            return
        for other, name in list(self._claims.items()):
            if name == claim:  # taken over: the old claimer is an ordinary listener now
                del self._claims[other]
                previous = self._listeners.get(other)
                if previous is not None:
                    previous.max_events, previous.max_bytes = self.max_events, self.max_bytes
                    self.stats["events_lost"] += self._trim(previous)
        self._claims[listener] = claim
        self.stats["holds_claimed"] += 1

    def unsubscribe(self, listener: str, release: bool = False) -> None:
        """Remove ``listener``; the hold it claimed starts again (empty), or ends with
        ``release``."""
        self._listeners.pop(listener, None)
        claim = self._claims.pop(listener, None)
        if claim is None:
            return
        if release:
            self._holds.pop(claim, None)
        elif claim in self._holds:
            self._held[claim] = _Listener(*self._holds[claim])

    def listeners(self) -> list[str]:
        return list(self._listeners)

    def is_listening(self, listener: str) -> bool:
        return listener in self._listeners

    def lost(self, listener: str) -> int:
        entry = self._listeners.get(listener)
        return entry.lost if entry is not None else 0

    def bounds(self, listener: str) -> tuple[int, int]:
        """The events and bytes ``listener`` may have waiting (a claimed hold's own)."""
        entry = self._listeners.get(listener)
        return ((entry.max_events, entry.max_bytes) if entry is not None
                else (self.max_events, self.max_bytes))

    def queued(self, listener: str) -> int:
        entry = self._listeners.get(listener)
        return len(entry.queue) if entry is not None else 0

    def publish(self, encoded: bytes) -> None:
        """Queue one encoded event (see ``encode_event``) for every listener."""
        self.stats["events"] += 1
        size = len(encoded)
        for entry in self._listeners.values():
            entry.queue.append(encoded)
            entry.queued_bytes += size
            if len(entry.queue) > entry.max_events or entry.queued_bytes > entry.max_bytes:
                self.stats["events_lost"] += self._trim(entry)
        for held in self._held.values():
            held.queue.append(encoded)
            held.queued_bytes += size
            if len(held.queue) > held.max_events or held.queued_bytes > held.max_bytes:
                self.stats["held_lost"] += self._trim(held)

    def _trim(self, entry: _Listener) -> int:
        """Drop the oldest events beyond the bounds; how many."""
        dropped = 0
        while len(entry.queue) > entry.max_events or entry.queued_bytes > entry.max_bytes:
            entry.queued_bytes -= len(entry.queue.popleft())
            dropped += 1
        entry.lost += dropped
        return dropped

    def pending(self) -> list[str]:
        """Listeners with queued events."""
        return [name for name, entry in self._listeners.items() if entry.queue]

    def take(self, listener: str, max_bytes: int) -> list[bytes]:
        """Dequeue events for ``listener`` totalling at most ``max_bytes`` (at least one)."""
        entry = self._listeners.get(listener)
        if entry is None or not entry.queue:
            return []
        queue = entry.queue
        batch = [queue.popleft()]
        total = len(batch[0])
        while queue and total + len(queue[0]) <= max_bytes:
            item = queue.popleft()
            total += len(item)
            batch.append(item)
        entry.queued_bytes -= total
        return batch
