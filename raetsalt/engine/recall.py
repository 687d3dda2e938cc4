"""A restarted main calls its remotes back instead of waiting for them to notice.

A main that restarts has lost every session key; its remotes find out only when they next
probe it, which a main with 10,000 remotes asks them to do after up to 20 s of silence
(``native/alive.py``), and then they all come at once.  ``Recall`` instead starts an allow
(an authenticated handshake: only the real main can make a remote take it) towards every
remote its keep knows as joined, as soon as it starts, in the keep's order: at most
``config.recall_window`` of them at a time (fewer while calls go unanswered:
``Recall.window``), each taking a token of the handshake
admission (``busy.Admission``), so the main's own calls never take more handshakes than
its rate and leave room for remotes that come on their own.  A socket backlog does not
stop the calls (it stops handshakes the remotes start): a restarted main's backlog is
mostly its remotes' probes and alives, and one call is the cheapest way to answer them
all (the alternative, per remote: probes, a signed alive, a signed "unallowed", a hello
answered "busy", and the allow at last).  A remote that is connected
or handshaking by the time its turn comes is skipped; one that does not answer (it is
gone) costs its allow's retransmissions and time-out, and no retry: it comes back on its
own schedule when it returns.

The keep holds only remotes whose address an allow validated (a join alone proves
nothing about its source address: ``Road.remote_changed``), and a call sends one hello
there; anything more is paid from what the address sends back, at most three times it
(``raetsalt.engine.guard``): recall is no amplifier for addresses a spoofer claimed.

A remote that notices first (its probe unanswered, it sends its signed alive) is called
next (``Recall.hurry``) instead of being answered "unallowed": the call is the answer,
and the remote neither starts an allow of its own nor costs the main a signed answer
and a hello refused as "busy".  Only an alive that verifies with the remote's key and
comes from the address the keep holds moves it, and only forward in a queue it is in
already (to the address the call would go to anyway), so a replayed alive at best makes
the main call a remote now that it would have called later.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Protocol

from raetsalt.engine.busy import Admitting
from raetsalt.wire.enums import TransactionKind

if TYPE_CHECKING:
    from raetsalt.engine.guard import Guard
    from raetsalt.engine.identity import LocalEstate
    from raetsalt.engine.timers import Timed

CALL_CREDIT = 512
"""Bytes a call may send to an address not validated since the restart before anything
came back from it: one allow hello (about 330 bytes), not its retransmissions."""
TICK = 0.05
"""Seconds between looks at the window while remotes are waiting for their call."""
WINDOW_START = 16.0
WINDOW_MIN = 4.0
"""Calls at a time to begin with, and at least (see ``Recall.window``)."""


class Caller(Admitting, Protocol):
    """What of the road this module uses (``Road`` implements it)."""

    guard: Guard

    @property
    def local(self) -> LocalEstate: ...

    def arm(self, owner: Timed, when: float | None) -> None: ...

    def allow(self, uid: int, now: float) -> None: ...


class Recall:
    """The remotes a restarted main still has to call (module docstring)."""

    __slots__ = ("road", "waiting", "urgent", "queued", "calling", "deadline", "window",
                 "_shrunk")

    def __init__(self, road: Caller, uids: list[int]) -> None:
        self.road = road
        self.waiting: deque[int] = deque(uids)
        self.urgent: deque[int] = deque()
        """Remotes that asked (``hurry``): called before ``waiting``."""
        self.queued: dict[int, bool] = dict.fromkeys(uids, False)
        """The remotes not called yet (True: in ``urgent`` too)."""
        self.calling: set[int] = set()
        self.deadline: float | None = None
        self.window = min(WINDOW_START, float(road.config.recall_window))
        """Calls at a time: one more for each call answered, up to ``recall_window``, and
        half as many (at most once a second) when one goes unanswered: remotes too busy
        to answer within the allow's time-out would make every call wasted work on both
        sides (the main's hello, their cookie, its nack)."""
        self._shrunk = float("-inf")

    @classmethod
    def after_restart(cls, road: Caller) -> Recall | None:
        """The recall of a main restored with joined remotes (None: nothing to call)."""
        if not road.local.main or road.config.recall_window <= 0:
            return None
        uids = [uid for uid, remote in road.remotes.items() if remote.joined]
        if not uids:
            return None
        recall = cls(road, uids)
        road.arm(recall, 0.0)  # at the first timer service, whatever the clock
        return recall

    def on_timer(self, now: float) -> None:
        road = self.road
        remotes = road.remotes
        still = {
            uid for uid in self.calling
            if uid in remotes and (txn := remotes[uid].in_progress(TransactionKind.ALLOW))
            is not None and txn.initiator
        }
        for uid in self.calling - still:
            remote = remotes.get(uid)
            if remote is not None and remote.allowed:
                self.window = min(self.window + 1.0, float(road.config.recall_window))
            elif now - self._shrunk >= 1.0:
                self.window = max(WINDOW_MIN, self.window / 2)
                self._shrunk = now
                road.stats["recall_window_halved"] += 1
        self.calling = still
        while line := self.urgent or self.waiting:
            remote = remotes.get(line[0])
            if line[0] not in self.queued:
                line.popleft()  # called already (from ``urgent``)
                continue
            if remote is None or remote.allowed or not remote.joined or any(
                t.kind in (TransactionKind.JOIN, TransactionKind.ALLOW)
                for t in remote.transactions.values()
            ):
                del self.queued[line.popleft()]  # gone, back already, or on its way
                continue
            if len(self.calling) >= self.window or not road.admission.admit(
                now, loaded_too=True
            ):
                break
            del self.queued[line.popleft()]
            if not remote.trusted:
                # The address a session validated before the restart: one hello may go
                # there; whatever else (retransmissions, the rest of the handshake) is
                # paid from what comes back (the guard's 3x), so a stale or claimed
                # address costs one datagram, and the allow's success validates it.
                road.guard.grant(remote.ha, CALL_CREDIT)
            road.stats["recall_allow"] += 1
            road.allow(remote.uid, now)
            self.calling.add(remote.uid)
        if not self.waiting:
            self.calling.clear()  # the last calls finish on their own
        road.arm(self, now + TICK if self.waiting else None)

    def hurry(self, uid: int, now: float) -> bool:
        """Call ``uid`` before the others waiting (its authenticated alive says it is
        there: module docstring); False if it is not waiting for its call."""
        hurried = self.queued.get(uid)
        if hurried is None:
            return False
        if not hurried:
            self.queued[uid] = True
            self.urgent.append(uid)
        if self.deadline is None or self.deadline > now:
            self.road.arm(self, now)
        return True
