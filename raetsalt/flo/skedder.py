"""``SelectSkedder``: ioflo's scheduler, waiting on sockets and timers instead of sleeping.

The stock ``ioflo.base.skedding.Skedder`` sleeps a fixed period between iterations, so a
datagram waits up to one period before a behaviour sees it, and a short period burns CPU
(ioflo's ``Skedder.run`` sleeps out each period).  This subclass keeps the stock build and
the per-tasker semantics (desires, ``at PERIOD`` retimes, ABORT of the rest at the end) and
splits ``run`` into pieces a test or another loop can drive:

``start()``    put every taskable on the ready list (as ``run`` does first)
``step()``     one iteration: run every due tasker once; False when nothing runs any more
``wait()``     real time only: block in ``selectors.select`` until a watched socket is
               ready, a watched object's timer is due, the next ``at PERIOD`` tasker is
               due, or ``period`` (the *tick*) passed, whichever is first
``advance()``  set the store stamp: wall seconds since ``start`` (real), or
               ``+= period`` (simulated, ``real=False``: nothing ever waits);
               ``.realtime``/``.datetime`` are refreshed once per tick
``close()``    send ABORT to the remaining taskers, so their exit actions run

``run()`` is ``start`` then ``step``/``wait``/``advance`` until nothing runs or ``stop``
is requested, then ``close``.

How behaviours get woken: every house's store holds the ``Waiter`` at
``.skedder.waiter`` (a preload).  A behaviour that opens something with sockets calls
``waiter.watch(obj)``, where ``obj`` has ``register(selector, data)``,
``unregister(selector)`` and ``timeout() -> seconds | None`` (``raetsalt.node.Node`` and
``raetsalt.drivers.udp.RoadStack`` have exactly these), and ``waiter.unwatch(obj)``
before closing it.  The selector is level-triggered, so whatever is watched must be
serviced (drained) on every iteration by a behaviour of a running framer, or the loop
spins.  ``waiter.wake()`` (safe from a signal handler or another thread) ends a wait at
once.

Store time in real mode is ``time.monotonic()`` based, so FloScript ``timeout`` and
``elapsed`` mean real seconds however irregular the iterations are; a periodic tasker
that is late is rescheduled from now instead of catching up in a burst.  ``period`` must
stay > 0: it is the tick that evaluates time-based transitions when nothing else
happens.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from ioflo.aid.odicting import odict
from ioflo.base import skedding
from ioflo.base.globaling import ABORT, ABORTED, RUNNING, STARTED, STOP

log = logging.getLogger(__name__)

WAITER_SHARE = "skedder.waiter"
"""Store path (without the leading dot) of the ``Waiter`` in every house."""


class Wakeable(Protocol):
    """What ``Waiter.watch`` accepts."""

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None: ...

    def unregister(self, selector: selectors.BaseSelector) -> None: ...

    def timeout(self) -> float | None: ...


class Waiter:
    """The selector of one skedder, plus a self-pipe for ``wake``."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._watched: list[Wakeable] = []
        # A socketpair rather than a pipe: non-blocking on both ends, closed together.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self.wakeups = 0
        """Waits that ended because something was ready (not by time)."""

    def watch(self, obj: Wakeable) -> None:
        """Wake the skedder when ``obj``'s sockets are ready or its ``timeout()`` runs out."""
        if obj not in self._watched:
            obj.register(self.selector, obj)
            self._watched.append(obj)

    def unwatch(self, obj: Wakeable) -> None:
        """Forget ``obj`` (no error if it was not watched)."""
        if obj in self._watched:
            self._watched.remove(obj)
            obj.unregister(self.selector)

    @property
    def watched(self) -> tuple[Wakeable, ...]:
        return tuple(self._watched)

    def timeout(self) -> float | None:
        """Seconds until the earliest watched timer (None: no timer)."""
        best: float | None = None
        for obj in self._watched:
            wait = obj.timeout()
            if wait is not None and (best is None or wait < best):
                best = wait
        return best

    def wake(self) -> None:
        """End the current (or next) ``wait`` at once.  Safe in a signal handler."""
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already full (a wake is pending) or closed

    def wait(self, limit: float) -> bool:
        """Block at most ``limit`` seconds (less if a watched timer is due earlier).

        Returns True when something became ready before the time ran out.
        """
        wait = self.timeout()
        wait = limit if wait is None else min(limit, wait)
        if wait <= 0.0:
            return True
        ready = self.selector.select(wait)
        for key, _events in ready:
            if key.fileobj is self._wake_r:
                self._drain_wake()
        if ready:
            self.wakeups += 1
        return bool(ready)

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        for obj in list(self._watched):
            self.unwatch(obj)
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()


class SelectSkedder(skedding.Skedder):
    """A ``Skedder`` that waits in ``selectors`` instead of ``time.sleep``.

    Takes the stock constructor's arguments.  ``period`` is the tick (> 0).  With
    ``real=False`` nothing waits and the stamp advances by ``period`` per iteration, as
    in the stock simulated mode, so flows can be stepped deterministically in tests.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.period <= 0.0:
            raise ValueError("SelectSkedder needs a period (tick) > 0")
        self.waiter = Waiter()
        self.preloads.append((WAITER_SHARE, odict(value=self.waiter)))
        self.iterations = 0
        self._started = False
        self._closed = False
        self._stop_requested = False
        self._origin = 0.0
        self._clock_shares_at = float("-inf")

    # -- the pieces of run() -------------------------------------------------------------

    def start(self) -> None:
        """Ready every taskable of every house (``run`` calls it)."""
        if self._started:
            return
        self._started = True
        self._origin = time.monotonic() - self.stamp
        for house in self.houses:
            house.store.changeStamp(self.stamp)
            for tasker in house.taskables:
                self.addReadyTask(tasker)

    def step(self) -> bool:
        """Run every due tasker once; False when no tasker is running or started."""
        ready, stamp = self.ready, self.stamp
        more = False
        for _ in range(len(ready)):
            tasker, retime, period = ready.popleft()
            if retime > stamp:
                ready.append((tasker, retime, period))
                status = tasker.status
            else:
                try:
                    status = tasker.runner.send(tasker.desire)
                except StopIteration:
                    self.aborted.append((tasker, stamp, period))
                    continue
                if status == ABORTED:
                    self.aborted.append((tasker, stamp, period))
                else:
                    nxt = retime + tasker.period
                    if self.real and tasker.period > 0.0 and nxt <= stamp:
                        nxt = stamp + tasker.period  # late: no catch-up burst
                    ready.append((tasker, nxt, tasker.period))
            if status in (RUNNING, STARTED):
                more = True
        self.iterations += 1
        return bool(ready) and more

    def wait(self) -> bool:
        """Real time: block until something is ready or due (at most one tick).

        Simulated time: return at once.  True when a socket (or ``wake``) ended the wait.
        """
        if not self.real:
            return False
        limit = self.period
        now = time.monotonic() - self._origin
        for _tasker, retime, period in self.ready:
            if period > 0.0:
                limit = min(limit, retime - now)
        return self.waiter.wait(max(0.0, limit))

    def advance(self) -> None:
        """Move the store stamp: wall time (real) or one period (simulated).

        The stamp and ``.time`` follow every iteration; ioflo's wall-clock shares
        (``.realtime``, ``.datetime``) at most once per tick: filling them is most of an
        idle iteration's cost, and an iteration comes with every datagram."""
        if self.real:
            self.stamp = time.monotonic() - self._origin
        else:
            self.stamp += self.period
        stamp = self.stamp
        if stamp - self._clock_shares_at >= self.period:
            self._clock_shares_at = stamp
            for house in self.houses:
                house.store.changeStamp(stamp)
        else:
            for house in self.houses:
                store = house.store
                store.stamp = stamp
                store.timeShr.update(value=stamp)

    def close(self) -> None:
        """ABORT every tasker still on the ready list (their exit actions run), then
        release the selector.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        ready = self.ready
        while ready:
            tasker, _retime, _period = ready.popleft()
            try:
                tasker.runner.send(ABORT)
            except StopIteration:
                pass
            except Exception:  # noqa: BLE001 - the other taskers still get their exits
                log.exception("exit actions of %s failed", tasker.name)
        self.waiter.close()

    # -- driving ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask every framer to stop (exit actions run) at its next turn, and wake the loop.

        For a second signal when the flow's own shutdown does not finish; the flows
        normally stop themselves (``bid stop all``)."""
        self._stop_requested = True
        for house in self.houses:
            for tasker in house.taskables:
                tasker.desire = STOP
        self.waiter.wake()

    def run(self, growable: bool = False) -> None:  # noqa: ARG002 - stock signature
        """Run until no tasker is running (or KeyboardInterrupt), then ``close``."""
        self.start()
        try:
            while self.step():
                self.wait()
                self.advance()
        except KeyboardInterrupt:
            log.info("interrupted: aborting the flows")
        finally:
            self.close()

    def run_steps(self, count: int) -> bool:
        """Exactly ``count`` iterations (``step``/``wait``/``advance``); False if the flows
        ended before."""
        self.start()
        for _ in range(count):
            if not self.step():
                return False
            self.wait()
            self.advance()
        return True

    def run_until(
        self,
        predicate: Callable[[], bool],
        *,
        max_steps: int = 100_000,
        between: Callable[[], None] | None = None,
    ) -> int:
        """Iterate until ``predicate()`` holds; returns the iterations taken.

        ``between`` runs after each iteration (a test may wait on sockets there).  Raises
        ``TimeoutError`` after ``max_steps`` or ``RuntimeError`` if the flows end first.
        """
        self.start()
        for count in range(max_steps):
            if predicate():
                return count
            if not self.step():
                if predicate():
                    return count + 1
                raise RuntimeError("the flows ended before the condition held")
            if between is not None:
                between()
            self.wait()
            self.advance()
        raise TimeoutError(f"condition not met within {max_steps} iterations")


def build(
    filepath: str | os.PathLike[str],
    *,
    name: str = "raetsalt",
    period: float = 0.1,
    real: bool = True,
    behaviors: list[str] | None = None,
    preloads: list[tuple[str, Any]] | None = None,
) -> SelectSkedder:
    """Build a ``SelectSkedder`` from a flo file (ioflo's console muted).

    Raises ``RuntimeError`` when the flo does not build (ioflo only prints why, to its
    console; the message names the file).  Syntax errors raise ioflo's ``ParseError``.
    """
    from ioflo.aid.consoling import getConsole

    # ioflo writes to its own console; ``None`` keeps pytest's capture file open.
    getConsole().reinit(verbosity=getConsole().Wordage.mute, path=None)
    skedder = SelectSkedder(
        name=name,
        period=period,
        real=real,
        filepath=os.fspath(filepath),
        behaviors=behaviors if behaviors is not None else ["raetsalt.flo.behaviors"],
        preloads=[(path, odict(data)) for path, data in (preloads or [])],
    )
    if not skedder.build():
        skedder.waiter.close()
        raise RuntimeError(f"{os.fspath(filepath)}: the flow did not build")
    return skedder
