"""The minion's job service, sans-IO, and how one job turns into Salt's return.

``MinionJobs`` decides; the daemon does: a publication from the master (road share
``fun``) or a ``raetsalt-call`` request (lane share ``call``) becomes a ``Spawn`` action
when it is meant for this minion (``match_self`` on its id and live grains; anything else
is ignored, as in Salt), the daemon starts the job in its own process
(``raetsalt.daemon.executor``) and reports back ``on_started``/``on_finished``, which
answer with ``ToMaster`` (the return) or ``ToClient`` (the ``raetsalt-call`` reply).
After every (re)connection, and whenever its grains change, the minion says hello to the
master with its grains (``on_connected``, ``set_grains``); its first hello to each master
also carries the time its daemon started, so that every master fires one and the same
``salt/minion/<id>/start``.  After every (re)connection it also asks for the master's
clock (``ask_clock``): the answer bounds how far the master's clock is from the
minion's (``MasterClock``).  A publication whose deadline has passed is dropped, never
run late (``raetsalt.protocol``, "Job deadlines"): each drop is counted in
``MinionJobs.dropped`` and logged (at most one line per ``DROP_LOG_INTERVAL``).

``execute`` runs one job in the current process and builds Salt's return:
``{return, retcode, success}``; a failure is ``success: False`` with ``out: 'nested'`` and
retcode 1: an unknown function (``'x.y' is not available.``), arguments that do not fit
(``Passed invalid arguments to x.y: ...`` plus its docstring), or an exception (``The
minion function caused an exception: <traceback>``).  ``retcode`` is what the function set
in ``ctx.retcode``, or 1 when it returned a mapping whose ``result`` or ``success`` is
false (Salt's rule).
"""

from __future__ import annotations

import inspect
import logging
import math
import traceback
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from raetsalt import protocol as p
from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, TargetError
from raetsalt.execution.loader import (
    CommandExecutionError,
    Context,
    InvalidArguments,
    Loader,
    UnknownFunction,
)
from raetsalt.execution.returners import MAX_NAME, ret_kwargs_untrusted
from raetsalt.protocol import ToClient
from raetsalt.targeting import match_self

from .progress import SHARE_RUNNING, Beats

log = logging.getLogger(__name__)

EX_GENERIC = 1

HOLD_MAX = 5.0
"""Longest wait (s) of a publication for the master's first ``clock`` answer."""
MAX_HELD = 64
"""Publications held at once; beyond, a new one is judged by the minion's own clock."""
LATE_TOLERANCE = 0.5
"""Seconds a publication may be late, on the most favourable reading of the clocks."""
CLOCK_GOOD = 0.2
"""Below this uncertainty (s) the minion stops asking the master for its clock."""
CLOCK_PROBES = 3
"""Extra ``clock_req`` per connection while the estimate is worse than ``CLOCK_GOOD``."""
CLOCK_DRIFT = 1e-4
"""How fast (s/s) two clocks may drift apart: an old estimate widens by this much."""
DROP_LOG_INTERVAL = 10.0
MAX_MASTERS_GREETED = 256
"""Masters remembered as greeted (the first hello says the minion started)."""


class JobDrop(StrEnum):
    """Why the minion dropped a publication (the keys of ``MinionJobs.dropped``)."""

    EXPIRED = "expired"
    """Its deadline (``expires``, on the master's clock) had passed."""
    TTL_RAN_OUT = "ttl_ran_out"
    """It waited here (for the master's clock) longer than its ``ttl``."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """Everything a job process needs (it is built before the fork)."""

    jid: str
    fun: str
    arg: list[Any]
    tgt: Any = ""
    tgt_type: str = "glob"
    user: str = ""
    ret: str = ""
    """The returners to give the return to (``raetsalt.execution.returners``)."""
    ret_config: str = ""
    ret_kwargs: dict[str, Any] = field(default_factory=dict)
    kind: str = "publish"
    """``'publish'`` (from the master), ``'call'`` (``raetsalt-call``) or ``'local'``
    (the minion's own, e.g. the mine's refresh: nothing is returned)."""
    yard: str | None = None
    """The client yard of a call."""
    req: str | None = None

    def proc_data(self, pid: int | None) -> dict[str, Any]:
        """The job as ``saltutil.running`` lists it (Salt's proc data)."""
        return {"jid": self.jid, "fun": self.fun, "arg": self.arg, "tgt": self.tgt,
                "tgt_type": self.tgt_type, "user": self.user, "ret": self.ret, "pid": pid}


@dataclass(frozen=True, slots=True)
class ToMaster:
    """Send ``body`` over the road to the master (``to``: that master estate, when the
    minion serves several at once; None: the master the job came from, or the main one)."""

    body: dict[str, Any]
    to: str | None = None


@dataclass(frozen=True, slots=True)
class Spawn:
    """Start ``spec`` in a process of its own."""

    spec: JobSpec


@dataclass(frozen=True, slots=True)
class SaveGrains:
    """Persist these static grains (set by ``grains.setval``)."""

    grains: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RefreshGrains:
    """Recompute the grains (``saltutil.sync_grains``/``refresh_grains``) and pass them to
    ``MinionJobs.set_grains``."""


@dataclass(frozen=True, slots=True)
class Refresh:
    """A job asked Salt's minion to reload ``what`` (``'pillar'`` or ``'modules'``;
    ``raetsalt.saltbridge``)."""

    what: str


Action = ToMaster | ToClient | Spawn | SaveGrains | RefreshGrains | Refresh


@dataclass(slots=True)
class _Running:
    spec: JobSpec
    pid: int | None = None


@dataclass(frozen=True, slots=True)
class _Deadline:
    """A publication's deadline: ``ttl`` seconds from when the master sent it, which is
    ``expires`` on the master's wall clock."""

    ttl: float
    expires: float


@dataclass(frozen=True, slots=True)
class MasterClock:
    """What the minion knows of the master's clock: ``master - ours`` lies in
    ``[low, high]``, as measured at our wall time ``at``.

    One exchange that left at ``t1`` and came back at ``t2`` with the master's time ``m``
    says the offset is between ``m - t2`` and ``m - t1``; each new exchange narrows the
    range (``narrowed``), and a range ages by ``CLOCK_DRIFT``.  A new range that does not
    meet the old one means a clock was stepped: the new one is taken alone."""

    low: float
    high: float
    at: float

    @classmethod
    def measured(cls, sent: float, received: float, master_time: float) -> MasterClock:
        return cls(master_time - max(sent, received), master_time - sent, received)

    def bounds(self, now_wall: float) -> tuple[float, float]:
        slack = CLOCK_DRIFT * abs(now_wall - self.at)
        return self.low - slack, self.high + slack

    def narrowed(self, new: MasterClock) -> MasterClock:
        low, high = self.bounds(new.at)
        low, high = max(low, new.low), min(high, new.high)
        return new if low > high else MasterClock(low, high, new.at)

    @property
    def uncertainty(self) -> float:
        return self.high - self.low


@dataclass(slots=True)
class _Held:
    """A publication waiting for the master's clock, and when (monotonic) it came."""

    spec: JobSpec
    deadline: _Deadline
    received: float


def _finite(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _deadline_untrusted(body: Mapping[str, Any]) -> _Deadline | None:
    """The deadline of a publication; None when it has none (an older master)."""
    ttl, expires = _finite(body.get("ttl")), _finite(body.get("expires"))
    if ttl is None or expires is None or not 0 < ttl <= p.MAX_JOB_TTL:
        return None
    return _Deadline(ttl, expires)


@dataclass(slots=True)
class JobOutcome:
    """What a job process reports: Salt's return plus what the parent must apply."""

    ret: dict[str, Any]
    missing_fun: bool = False
    grains_set: dict[str, Any] = field(default_factory=dict)
    refresh_grains: bool = False
    refresh: list[str] = field(default_factory=list)
    """What else the job asked to reload (``Refresh``)."""
    grains_now: dict[str, Any] | None = None
    """The minion's grains computed again by the job (Salt's, after a sync): they are
    taken, and told the master, before the job's return goes out."""

    def to_wire(self) -> dict[str, Any]:
        wire = {"ret": self.ret, "missing_fun": self.missing_fun,
                "grains_set": self.grains_set, "refresh_grains": self.refresh_grains,
                "refresh": self.refresh}
        if self.grains_now is not None:
            wire["grains_now"] = self.grains_now
        return wire

    @classmethod
    def from_wire_untrusted(cls, data: Any) -> JobOutcome:
        if not isinstance(data, dict) or not isinstance(data.get("ret"), dict):
            raise BadPacket("not a job outcome", DropReason.BODY)
        grains = data.get("grains_set")
        refresh = data.get("refresh")
        return cls(
            ret=data["ret"],
            missing_fun=data.get("missing_fun") is True,
            grains_set=grains if isinstance(grains, dict) else {},
            refresh_grains=data.get("refresh_grains") is True,
            refresh=[r for r in refresh if r in ("pillar", "modules")][:2]
            if isinstance(refresh, list) else [],
            grains_now=data["grains_now"] if isinstance(data.get("grains_now"), dict)
            else None,
        )


class MinionJobs:
    """The jobs of one minion.

    :param minion_id: this minion's id (what targets match).
    :param grains: its grains now (``set_grains`` replaces them).
    :param estate: its road estate name (for routes).
    """

    def __init__(self, minion_id: str, grains: dict[str, Any], *, estate: str | None = None,
                 started: float | None = None, utc_offset: int = 0) -> None:
        self.minion_id = minion_id
        self.grains = grains
        self.pillar: dict[str, Any] = {}
        """This minion's pillar, as the master last sent it (``I@`` targets)."""
        self.estate = estate
        self.running: dict[str, _Running] = {}
        self.dropped: Counter[JobDrop] = Counter()
        self.clock: MasterClock | None = None
        """The master's clock as far as it is known (kept across reconnections)."""
        self.started = started
        """When this minion's daemon started (Unix seconds), told each master in the
        first hello so that every master fires the same start event; None: not told."""
        self.utc_offset = utc_offset
        """This minion's time zone then (seconds east of UTC): the start event's text."""
        self._greeted: dict[str | None, None] = {}
        """The masters that had their first hello (None: the one master, unnamed)."""
        self._hellos_held: dict[str | None, None] = {}
        """The masters whose hello waits for Salt's grains (``hold_hello``)."""
        self._asked_at: float | None = None
        """When the clock_req now waiting for its answer left (wall clock)."""
        self._probes = 0
        self._held: dict[str, _Held] = {}
        self._drop_log_at = -math.inf
        self._drops_unlogged = 0
        self.beats = Beats()
        """Published jobs running here: the master hears they still run
        (``raetsalt.services.progress``)."""

    # -- master ---------------------------------------------------------------------------

    def on_connected(self, master: str | None = None) -> list[Action]:
        """The session with ``master`` (its estate name; None: the one master) is (again)
        up: report the grains.  The first hello to each master in this daemon's life says
        the minion started, and when (the master fires ``salt/minion/<id>/start``)."""
        start = master not in self._greeted
        if start:
            self._greeted[master] = None
            while len(self._greeted) > MAX_MASTERS_GREETED:
                del self._greeted[next(iter(self._greeted))]
        return [ToMaster(self._hello(start), master)]

    def hold_hello(self, master: str | None) -> None:
        """The session with ``master`` is up but its hello waits (for Salt's grains)."""
        self._hellos_held[master] = None
        while len(self._hellos_held) > MAX_MASTERS_GREETED:
            del self._hellos_held[next(iter(self._hellos_held))]

    def release_hellos(self) -> list[Action]:
        """The hellos held by ``hold_hello`` (the one master's when none was held)."""
        held = list(self._hellos_held) or [None]
        self._hellos_held.clear()
        return [action for master in held for action in self.on_connected(master)]

    def ask_clock(self, now_wall: float) -> list[Action]:
        """The session with the master is (again) up: ask for its clock (``now_wall`` is
        ours, Unix seconds).  Publications that come before the answer wait for it."""
        self._asked_at = now_wall
        self._probes = 0
        return [ToMaster(p.road_message(self.estate, None, p.SHARE_CLOCK_REQ))]

    def on_clock(self, body: Mapping[str, Any], now: float, now_wall: float) -> list[Action]:
        """The master's clock, answering our clock_req: narrow the estimate, judge the
        held publications, ask again while the estimate is poor."""
        master_time = _finite(body.get("time"))
        if self._asked_at is None or master_time is None:
            return []
        measured = MasterClock.measured(self._asked_at, now_wall, master_time)
        self.clock = measured if self.clock is None else self.clock.narrowed(measured)
        self._asked_at = None
        held, self._held = self._held, {}
        actions: list[Action] = []
        for job in held.values():
            actions.extend(self._judge(job, now, now_wall))
        if self.clock.uncertainty > CLOCK_GOOD and self._probes < CLOCK_PROBES:
            self._probes += 1
            self._asked_at = now_wall
            actions.append(ToMaster(p.road_message(self.estate, None, p.SHARE_CLOCK_REQ)))
        return actions

    def set_grains(self, grains: dict[str, Any]) -> list[Action]:
        """New grains; the master hears of them when they changed."""
        if grains == self.grains:
            return []
        self.grains = grains
        return [ToMaster(self._hello(False))] if self._greeted else []

    def on_publish(self, body: Mapping[str, Any], now: float, now_wall: float
                   ) -> list[Action]:
        """A publication from the master; ``[Spawn]`` when it is meant for this minion and
        its deadline has not passed (``now`` monotonic, ``now_wall`` Unix seconds)."""
        try:
            jid = p.text_untrusted(body, "jid")
            fun = p.text_untrusted(body, "fun")
            arg = p.list_untrusted(body, "arg")
            tgt, tgt_type, delimiter = p.target_untrusted(body)
            user = p.text_untrusted(body, "user", default="")
            ret = p.text_untrusted(body, "ret", default="")
            ret_config = p.text_untrusted(body, "ret_config", default="")
        except BadPacket as exc:
            log.debug("bad publication ignored: %s", exc)
            return []
        if jid in self.running or jid in self._held:
            return []
        try:
            if not match_self(tgt, tgt_type, self.minion_id, self.grains, delimiter=delimiter,
                              pillar=self.pillar):
                return []
        except TargetError as exc:
            log.debug("publication %s ignored: %s", jid, exc)
            return []
        spec = JobSpec(jid, fun, arg, tgt, tgt_type, user, ret, ret_config[:MAX_NAME],
                       ret_kwargs_untrusted(body.get("ret_kwargs")))
        deadline = _deadline_untrusted(body)
        if deadline is None:
            return self._start(spec)
        job = _Held(spec, deadline, now)
        if self.clock is None and self._asked_at is not None and len(self._held) < MAX_HELD:
            self._held[jid] = job
            return []
        return self._judge(job, now, now_wall)

    def get_timer(self) -> float | None:
        """When the first held publication stops waiting for the master's clock, or a
        running job's beat is due."""
        times = [j.received + min(j.deadline.ttl, HOLD_MAX) for j in self._held.values()]
        beat = self.beats.next_due()
        if beat is not None:
            times.append(beat)
        return min(times, default=None)

    def handle_timer(self, now: float, now_wall: float) -> list[Action]:
        """Judge the held publications that waited long enough, by our own clock; tell
        the master which jobs still run."""
        actions: list[Action] = [
            ToMaster(p.road_message(self.estate, None, SHARE_RUNNING, jids=jids))
            for jids in self.beats.due(now)]
        for jid, job in list(self._held.items()):
            if job.received + min(job.deadline.ttl, HOLD_MAX) <= now:
                del self._held[jid]
                actions.extend(self._judge(job, now, now_wall))
        return actions

    def _judge(self, job: _Held, now: float, now_wall: float) -> list[Action]:
        low = self.clock.bounds(now_wall)[0] if self.clock is not None else 0.0
        late = now_wall + low - job.deadline.expires  # the least it can be late
        if now - job.received > job.deadline.ttl:
            self._drop(job, JobDrop.TTL_RAN_OUT, now,
                       f"it waited here longer than its time-to-live ({job.deadline.ttl:g} s)")
            return []
        if late > LATE_TOLERANCE:
            self._drop(job, JobDrop.EXPIRED, now, f"its deadline passed {late:.1f} s ago "
                       "(the master could not reach this minion in time)")
            return []
        self.beats.started(job.spec.jid, job.deadline.ttl, now)
        return self._start(job.spec)

    def _start(self, spec: JobSpec) -> list[Action]:
        self.running[spec.jid] = _Running(spec)
        return [Spawn(spec)]

    def _drop(self, job: _Held, reason: JobDrop, now: float, why: str) -> None:
        self.dropped[reason] += 1
        if now < self._drop_log_at + DROP_LOG_INTERVAL:
            self._drops_unlogged += 1
            return
        more = f" ({self._drops_unlogged} more dropped since the last such line)" \
            if self._drops_unlogged else ""
        log.warning("job %s (%s) dropped, not run: %s%s", job.spec.jid, job.spec.fun[:80], why,
                    more)
        self._drop_log_at = now
        self._drops_unlogged = 0

    # -- raetsalt-call ----------------------------------------------------------------------

    def on_call(self, yard: str, body: Mapping[str, Any], jid: str) -> list[Action]:
        """A ``raetsalt-call`` request from client ``yard``; ``jid`` is a fresh local jid."""
        req = body.get("req")
        if not isinstance(req, str):
            return []
        try:
            fun = p.text_untrusted(body, "fun")
            arg = p.list_untrusted(body, "arg")
        except BadPacket as exc:
            return [ToClient(yard, p.lane_reply(self.estate, yard, p.SHARE_CALL_RET, req=req,
                                                error=str(exc), code=EX_GENERIC))]
        spec = JobSpec(jid, fun, arg, "salt-call", "glob", "", "", kind="call", yard=yard,
                       req=req)
        self.running[jid] = _Running(spec)
        return [Spawn(spec)]

    def start_local(self, spec: JobSpec) -> list[Action]:
        """Run a job of the minion's own (``kind='local'``)."""
        return self._start(spec)

    # -- job processes ------------------------------------------------------------------

    def on_started(self, jid: str, pid: int) -> None:
        job = self.running.get(jid)
        if job is not None:
            job.pid = pid

    def on_spawn_failed(self, jid: str, reason: str) -> list[Action]:
        """The job process could not be started: report it like a failed job."""
        ret = {"return": f"The minion could not start the job: {reason}",
               "retcode": EX_GENERIC, "success": False, "out": "nested"}
        return self.on_finished(jid, JobOutcome(ret))

    def on_finished(self, jid: str, outcome: JobOutcome | None) -> list[Action]:
        """Job ``jid`` ended; ``None`` when it died without a result (killed): nothing is
        returned then, as in Salt."""
        job = self.running.pop(jid, None)
        self.beats.finished(jid)
        if job is None:
            return []
        actions: list[Action] = []
        if outcome is None:
            if job.spec.kind == "call" and job.spec.yard is not None:
                actions.append(ToClient(job.spec.yard, p.lane_reply(
                    self.estate, job.spec.yard, p.SHARE_CALL_RET, req=job.spec.req,
                    error="the job ended without a result (killed?)", code=EX_GENERIC)))
            return actions
        spec = job.spec
        ret = outcome.ret
        if outcome.grains_now is not None:
            actions.extend(self.set_grains(outcome.grains_now))  # the hello goes first
        if outcome.grains_set:
            actions.append(SaveGrains(dict(outcome.grains_set)))
            actions.extend(self.set_grains({**self.grains, **outcome.grains_set}))
        if outcome.refresh_grains:
            actions.append(RefreshGrains())
        actions.extend(Refresh(what) for what in outcome.refresh)
        if spec.kind == "local":
            if not ret.get("success", True):
                log.warning("%s (local job %s) failed: %s", spec.fun, spec.jid,
                            str(ret.get("return"))[:300])
            return actions  # nobody waits for it; not in the master's job cache
        body = {"jid": spec.jid if spec.kind == "publish" else p.CALL_JID, "fun": spec.fun,
                "fun_args": spec.arg, **ret}
        if spec.kind == "call":
            assert spec.yard is not None
            record = {"jid": spec.jid, "id": self.minion_id, "fun": spec.fun,
                      "fun_args": spec.arg, **ret}
            actions.append(ToClient(spec.yard, p.lane_reply(
                self.estate, spec.yard, p.SHARE_CALL_RET, req=spec.req, ret=record,
                missing_fun=outcome.missing_fun)))
        actions.append(ToMaster(p.road_message(self.estate, None, p.SHARE_RETURN, **body)))
        return actions

    def proc_list(self) -> list[dict[str, Any]]:
        """``saltutil.running``'s view of the jobs (started ones only)."""
        return [job.spec.proc_data(job.pid) for job in self.running.values()
                if job.pid is not None]

    def _hello(self, start: bool) -> dict[str, Any]:
        if start and self.started is not None:
            return p.road_message(self.estate, None, p.SHARE_HELLO, grains=self.grains,
                                  start=True, start_time=self.started,
                                  utc_offset=self.utc_offset)
        return p.road_message(self.estate, None, p.SHARE_HELLO, grains=self.grains, start=start)


# ---------------------------------------------------------------------------- one job


def returner_fields(spec: JobSpec) -> dict[str, Any]:
    """What the returners of ``spec`` need to know of it (also the zygote's wire shape)."""
    return {"jid": spec.jid, "fun": spec.fun, "arg": spec.arg, "ret": spec.ret,
            "ret_config": spec.ret_config, "ret_kwargs": spec.ret_kwargs}


def pub_kwargs(spec: JobSpec, pid: int) -> dict[str, Any]:
    """The ``__pub_*`` keyword arguments a function taking ``**kwargs`` receives."""
    if spec.kind == "call":
        return {"__pub_fun": spec.fun, "__pub_jid": spec.jid, "__pub_pid": pid,
                "__pub_tgt": "salt-call"}
    return {"__pub_user": spec.user, "__pub_arg": spec.arg, "__pub_fun": spec.fun,
            "__pub_jid": spec.jid, "__pub_tgt": spec.tgt, "__pub_tgt_type": spec.tgt_type,
            "__pub_ret": spec.ret}


def execute(loader: Loader, spec: JobSpec, ctx: Context, pid: int) -> JobOutcome:
    """Run ``spec`` now, here, and build Salt's return (see the module docstring).

    A comma command (``test.ping,test.echo``) runs each function in order with its own
    argument list (``arg`` is then one list per function, as Salt publishes it) and
    returns ``{fun: return}`` with ``retcode``/``success`` mappings by function."""
    if "," in spec.fun:
        return _execute_multi(loader, spec, ctx, pid)
    grains_set: dict[str, Any] = {}
    ctx.save_grains = lambda values: grains_set.update(values)
    ctx.retcode = 0
    args, kwargs = p.unpack_args(spec.arg)
    kwargs.update(pub_kwargs(spec, pid))
    missing = False
    try:
        value = loader.call(spec.fun, args, kwargs, ctx)
    except UnknownFunction as exc:
        missing = True
        ret = {"return": _missing_fun(loader, spec.fun, str(exc)), "retcode": EX_GENERIC,
               "success": False, "out": "nested"}
    except InvalidArguments as exc:
        doc = inspect.getdoc(loader.functions[spec.fun]) or ""
        ret = {"return": f"{exc}\n{doc}", "retcode": EX_GENERIC, "success": False,
               "out": "nested"}
    except CommandExecutionError as exc:
        ret = {"return": f"ERROR: {exc}", "retcode": EX_GENERIC, "success": False,
               "out": "nested"}
    except Exception:  # noqa: BLE001 - any failure of the function is its return
        ret = {"return": f"The minion function caused an exception: {traceback.format_exc()}",
               "retcode": EX_GENERIC, "success": False, "out": "nested"}
    else:
        retcode = ctx.retcode if isinstance(ctx.retcode, int) else EX_GENERIC
        if retcode == 0 and isinstance(value, dict):
            try:
                if not all(value.get(k, True) for k in ("result", "success")):
                    retcode = EX_GENERIC
            except Exception:  # noqa: BLE001 - Salt's own guard
                pass
        ret = {"return": value, "retcode": retcode, "success": retcode == 0}
    return JobOutcome(ret=ret, missing_fun=missing, grains_set=grains_set,
                      refresh_grains=bool(ctx.extras.get("refresh_grains")))


def _execute_multi(loader: Loader, spec: JobSpec, ctx: Context, pid: int) -> JobOutcome:
    funs = [f.strip() for f in spec.fun.split(",")]
    groups = spec.arg if len(spec.arg) == len(funs) and all(
        isinstance(a, list) for a in spec.arg) else [[] for _ in funs]
    returns: dict[str, Any] = {}
    retcodes: dict[str, Any] = {}
    successes: dict[str, bool] = {}
    outcome = JobOutcome(ret={})
    for fun, arg in zip(funs, groups, strict=True):
        one = execute(loader, replace(spec, fun=fun, arg=arg), ctx, pid)
        returns[fun] = one.ret.get("return")
        retcodes[fun] = one.ret.get("retcode", 0)
        successes[fun] = bool(one.ret.get("success", True))
        outcome.grains_set.update(one.grains_set)
        outcome.refresh_grains |= one.refresh_grains
    outcome.ret = {"return": returns, "retcode": retcodes, "success": all(successes.values())}
    return outcome


def _missing_fun(loader: Loader, fun: str, message: str) -> Any:
    """Salt answers an unknown function with the docs of similar ones when there are any."""
    similar = {name: inspect.getdoc(func) or "" for name, func in loader.functions.items()
               if name.startswith(fun)}
    if similar:
        similar[fun] = message
        return similar
    return message
