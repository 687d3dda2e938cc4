"""What the masters of a cluster tell each other on their own road (pure).

Every message is a mapping with ``cluster`` naming its kind (docs/cluster.md):

``held``  ``{minions: {id: grains or None, ...}}``: the sender holds these minions'
          sessions now (sent in full to a peer whose session comes up, then as each
          minion says hello); the grains are what the origin of a job targets with.
``gone``  ``{minions: [id, ...]}``: the sender no longer holds these.
``pub``   ``{jid, minions: [id, ...], body: {...}}``: deliver this publication (the
          origin's road message to a minion, unchanged) to these minions of yours;
          their returns go back to the sender.
``ret``   ``{minion, body: {...}}``: a return (the minion's road message, unchanged)
          for a job the receiver published; the sender stored it in the cluster's job
          cache already.
``ask``   ``{}``: send me every minion you hold (``held``): the sender had taken the
          receiver for lost and forgot its minions, and it answers again.
``pillar`` ``{minions: {id: pillar, ...}}``: the pillars the sender compiled for minions
          it holds (sent with ``held`` to a peer whose session comes up, then as each
          is compiled), so the origin of a job targets them with ``-I``/``I@``.

Everything is checked here (names, sizes, shapes); what does not pass is None, for the
caller to drop and count.  ``Peers`` is the ``cluster_peers`` allow-list.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raetsalt.keep.records import name_problem
from raetsalt.services.jids import is_jid

MAX_MINIONS = 500
"""Minions named in one message at most (``held``, ``gone`` and ``pub`` are chunked)."""
HELD_CHUNK = 50
"""Minions (with their grains) per ``held`` message."""
PILLAR_CHUNK = 10
"""Minions (with their pillars) per ``pillar`` message."""
MAX_PILLAR = 64 * 1024
"""Characters of a minion's pillar (as JSON) shared at most: a larger one is not sent,
and that minion is not pillar-targeted from the other masters."""

Address = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Held:
    minions: dict[str, dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Gone:
    minions: list[str]


@dataclass(frozen=True, slots=True)
class Pub:
    jid: str
    minions: list[str]
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ret:
    minion: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ask:
    pass


@dataclass(frozen=True, slots=True)
class Pillars:
    minions: dict[str, dict[str, Any]]


PeerMessage = Held | Gone | Pub | Ret | Ask | Pillars


def _ids(value: Any) -> list[str] | None:
    if not isinstance(value, list) or len(value) > MAX_MINIONS:
        return None
    if any(name_problem(item) is not None for item in value):
        return None
    return list(value)


def parse_untrusted(body: Any) -> PeerMessage | None:
    """A peer master's message, or None (malformed: drop and count)."""
    if not isinstance(body, dict):
        return None
    kind = body.get("cluster")
    if kind == "held":
        minions = body.get("minions")
        if not isinstance(minions, dict) or len(minions) > MAX_MINIONS:
            return None
        held: dict[str, dict[str, Any] | None] = {}
        for minion, grains in minions.items():
            if name_problem(minion) is not None:
                return None
            held[minion] = grains if isinstance(grains, dict) else None
        return Held(held)
    if kind == "gone":
        ids = _ids(body.get("minions"))
        return None if ids is None else Gone(ids)
    if kind == "pub":
        ids, jid, pub = _ids(body.get("minions")), body.get("jid"), body.get("body")
        if ids is None or not isinstance(jid, str) or not is_jid(jid) \
                or not isinstance(pub, dict):
            return None
        if pub.get("jid") != jid:
            return None
        return Pub(jid, ids, pub)
    if kind == "ask":
        return Ask()
    if kind == "pillar":
        minions = body.get("minions")
        if not isinstance(minions, dict) or len(minions) > PILLAR_CHUNK:
            return None
        if any(name_problem(m) is not None or not isinstance(p, dict)
               for m, p in minions.items()):
            return None
        return Pillars(dict(minions))
    if kind == "ret":
        minion, ret = body.get("minion"), body.get("body")
        if not isinstance(minion, str) or name_problem(minion) is not None \
                or not isinstance(ret, dict):
            return None
        if not isinstance(ret.get("jid"), str):
            return None
        return Ret(minion, ret)
    return None


def held(minions: Mapping[str, dict[str, Any] | None]) -> Iterator[dict[str, Any]]:
    """``held`` messages for these minions (chunked)."""
    items = list(minions.items())
    for start in range(0, len(items), HELD_CHUNK):
        yield {"cluster": "held", "minions": dict(items[start:start + HELD_CHUNK])}


def pillars(minions: Mapping[str, dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``pillar`` messages for these minions (chunked; the caller left out the large)."""
    items = list(minions.items())
    for start in range(0, len(items), PILLAR_CHUNK):
        yield {"cluster": "pillar", "minions": dict(items[start:start + PILLAR_CHUNK])}


def gone(minions: Sequence[str]) -> Iterator[dict[str, Any]]:
    for start in range(0, len(minions), MAX_MINIONS):
        yield {"cluster": "gone", "minions": list(minions[start:start + MAX_MINIONS])}


def pub(jid: str, minions: Sequence[str], body: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for start in range(0, len(minions), MAX_MINIONS):
        yield {"cluster": "pub", "jid": jid, "minions": list(minions[start:start + MAX_MINIONS]),
               "body": dict(body)}


def ask() -> dict[str, Any]:
    return {"cluster": "ask"}


def ret(minion: str, body: Mapping[str, Any]) -> dict[str, Any]:
    return {"cluster": "ret", "minion": minion, "body": dict(body)}


class PeerConfigError(ValueError):
    """A ``cluster_peers`` entry that is not an address."""


@dataclass(frozen=True, slots=True)
class Peers:
    """``cluster_peers``: the addresses (host, port) of the other masters' roads."""

    addresses: frozenset[Address]

    @classmethod
    def parse(cls, entries: Sequence[Any], default_port: int) -> Peers:
        found: set[Address] = set()
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                raise PeerConfigError(f"cluster_peers: {entry!r} is not host or host:port")
            text = entry.strip()
            host, port = text, default_port
            if text.startswith("["):  # [v6]:port
                host, _, rest = text[1:].partition("]")
                if rest.startswith(":"):
                    port = _port(rest[1:], entry)
            elif text.count(":") == 1:
                host, _, number = text.partition(":")
                port = _port(number, entry)
            if not host:
                raise PeerConfigError(f"cluster_peers: {entry!r} has no host")
            found.add((host, port))
        return cls(frozenset(found))

    def admits(self, address: Address) -> bool:
        return (str(address[0]), int(address[1])) in self.addresses

    def to_connect(self, own: Address) -> list[Address]:
        """The peers this master starts the session with: those whose address sorts
        after its own (the others start theirs with it), so two masters never join
        each other at once."""
        return sorted(a for a in self.addresses if a > own)


def _port(text: str, entry: Any) -> int:
    try:
        port = int(text)
    except ValueError:
        raise PeerConfigError(f"cluster_peers: {entry!r} has a bad port") from None
    if not 0 < port < 65536:
        raise PeerConfigError(f"cluster_peers: {entry!r} has a bad port")
    return port
