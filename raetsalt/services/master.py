"""The master's job service, sans-IO: publications, returns, runners.

``MasterJobs`` takes what arrives (a minion's hello or return over the road, a client's
publish or runner request over the lane, the passing of time) and answers with actions
for the daemon to carry out: ``ToMinion`` (a road message), ``ToClient`` (a lane message
to a client yard) and ``Fire`` (an event on the master bus).  It reads no clock and
touches no socket or file: the job cache and the minion data cache come in as the small
interfaces of ``raetsalt.services.ports`` (``JobStore``, ``GrainsStore``), and what it
needs to know about the road comes through a ``Roster``.  The message formats are in
``raetsalt.protocol``.

Expected minions: the master expands a target over the accepted minions and the grains
each reported in its last hello (``match_bounds``).  ``definite`` matches are the expected
returners, stored with the job; the publication goes to every *possible* match (a minion
whose grains are not known yet may match) that is connected now, with its deadline, and
each minion decides for itself.  The road never holds a job for a minion that is away:
the client is told at once which expected minions are not connected.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any

from raetsalt import acl
from raetsalt import protocol as p
from raetsalt.errors import BadPacket, KeepError, QuotaExceeded, TargetError
from raetsalt.log import Throttle, clip
from raetsalt.protocol import Requester, ToClient, returner_options_untrusted
from raetsalt.services.grainpool import GrainPool
from raetsalt.targeting import MinionFacts, expand_nodegroup, match_bounds
from raetsalt.timefmt import salt_stamp

from . import progress
from .jids import is_jid, new_jid
from .ports import Gather, GrainsStore, JobStore, MinionState, Roster
from .runners import run_runner

log = logging.getLogger(__name__)

_RETURN_KEYS = ("return", "retcode", "success", "out")
# How long a client's interest in a job's returns outlives the time-out it asked for.
_WATCH_GRACE = 30.0
_CLEAN_EVERY = 3600.0


@dataclass(frozen=True, slots=True)
class ToMinion:
    """Send ``body`` over the road to the minion whose role is ``minion``."""

    minion: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Fire:
    """Fire an event on the master bus (``data`` already has ``_stamp``)."""

    tag: str
    data: dict[str, Any]


Action = ToMinion | ToClient | Fire


@dataclass(frozen=True, slots=True)
class PeerGrant:
    """A minion's ``publish.publish`` or ``publish.runner`` that the ``peer``/``peer_run``
    rules allowed (made only by ``MasterJobs.check_peer``; ``serve_peer`` carries it
    out)."""

    minion: str
    rid: str
    runner: bool
    body: Mapping[str, Any]
    decision: acl.Decision


class HelloDrop(StrEnum):
    """What of a minion's hello was not taken (``MasterJobs.stats``)."""

    START_TIME = "hello_bad_start_time"  # not a plausible time: the master's own is used
    UTC_OFFSET = "hello_bad_utc_offset"  # not a time zone offset: the start time in UTC


START_AHEAD = 3600.0
"""Seconds a minion's start time may be ahead of the master's clock (clock skew)."""
START_BEHIND = 400 * 86400.0
"""Seconds a minion's start time may be behind the master's clock (its uptime, when it
greets a master for the first time long after it started: a failover)."""
MAX_UTC_OFFSET = 18 * 3600
"""The largest time zone offset a minion may report (ISO 8601's bound), seconds."""


def start_time_untrusted(value: Any, now: float) -> float | None:
    """A hello's ``start_time`` (Unix seconds) when it is a number within
    [``now - START_BEHIND``, ``now + START_AHEAD``], else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > 2**53:
        return None
    start = float(value)
    if not math.isfinite(start) or not now - START_BEHIND <= start <= now + START_AHEAD:
        return None
    return start


def utc_offset_untrusted(value: Any) -> int | None:
    """A hello's ``utc_offset`` (seconds east of UTC, whole minutes as time zones are),
    else None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if abs(value) > MAX_UTC_OFFSET or value % 60:
        return None
    return value


def _shown(value: Any) -> str:
    """A bad value for a log line: a number as it is, anything else by its type."""
    if isinstance(value, float) or (isinstance(value, int) and abs(value) < 2**64):
        return repr(value)
    return type(value).__name__


class ReturnDrop(StrEnum):
    """Why a minion's return went no further than it did (``MasterJobs.stats``)."""

    MALFORMED = "return_malformed"  # no usable jid, fun or fun_args: dropped
    UNKNOWN_JOB = "return_unknown_job"  # not a job of this master (or too old): dropped
    REPEATED = "return_repeated"  # a second return for one job: stored, not sent again
    QUOTA = "return_quota"  # over a per-minion quota (services.quota): dropped


@dataclass(frozen=True, slots=True)
class Sink:
    """Where the answers to one request go: the client yard ``yard`` on the lane, or
    the peer ``minion`` over the road; ``req`` is the client's ``req`` or the minion's
    relay id (``rid``)."""

    req: str
    yard: str | None = None
    minion: str | None = None

    def answer(self, estate: str | None, share: str, **fields: Any) -> Action:
        """``share`` is the lane share (``pub_ack``...); a peer gets its road twin."""
        if self.minion is not None:
            return ToMinion(self.minion, p.road_message(
                estate, None, p.PEER_ANSWERS[share], rid=self.req, **fields))
        assert self.yard is not None
        return ToClient(self.yard, p.lane_reply(estate, self.yard, share, req=self.req,
                                                **fields))


@dataclass(slots=True)
class _Watch:
    """A client (or peer minion) waiting for the returns of a job it published."""

    sink: Sink
    expected: set[str]
    expires: float
    returned: set[str] = field(default_factory=set)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Returns not sent to the client yet (``MasterJobs.answer_returns``)."""
    wait: float = 0.0
    """The client's ``-t``: its interest lasts this long (and a grace) after a beat."""
    alive: set[str] = field(default_factory=set)
    """Minions that said they still run the job, not told the client yet."""


@dataclass(slots=True)
class _Batch:
    """A batch run's job: who started it (only they publish more under its jid) and
    the minions of its sub-batches so far (what its load lists)."""

    yard: str
    requester: Requester
    minions: set[str] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)


@dataclass(slots=True)
class _Gathering:
    gather: Gather
    sink: Sink
    expected: set[str]
    deadline: float
    returns: dict[str, Any] = field(default_factory=dict)


def minion_target(tgt: Any, tgt_type: str, nodegroups: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The target as minions get it: nodegroups expanded into a compound expression
    (minions know no nodegroups, as in Salt)."""
    if tgt_type == "nodegroup":
        return " ".join(expand_nodegroup(str(tgt), nodegroups)), "compound"
    if tgt_type == "compound":
        tokens = tgt.split() if isinstance(tgt, str) else [str(t) for t in tgt]
        if any(t.startswith("N@") for t in tokens):
            out: list[str] = []
            for token in tokens:
                out.extend(expand_nodegroup(token[2:], nodegroups) if token.startswith("N@")
                           else [token])
            return " ".join(out), "compound"
    return tgt, tgt_type


class MasterJobs:
    """Jobs, returns and runners of one master.

    :param opts: the master's opts (``timeout``, ``nodegroups``, ``keep_jobs``, ``id``).
    :param cache: the job cache.
    :param roster: the road's view of the minions.
    :param data_cache: where reported grains are kept across restarts (optional).
    :param utcnow: the wall clock (aware UTC) for jids and ``_stamp``s (the daemon's).
    :param unrestricted: local user names that skip publisher_acl (the blacklist still
        applies to them, as in Salt).
    """

    def __init__(
        self,
        opts: Mapping[str, Any],
        cache: JobStore,
        roster: Roster,
        *,
        estate: str | None = None,
        data_cache: GrainsStore | None = None,
        utcnow: Callable[[], datetime],
        unrestricted: Collection[str] = ("root",),
    ) -> None:
        self.opts = opts
        self.unrestricted = frozenset(unrestricted)
        self._denial_log = Throttle(60.0, burst=20)
        self._quota_log = Throttle(60.0)
        """Returns dropped or not stored: one line a minute per minion, counting."""
        """Refusals are logged, but at most 20 a minute per requester (then counted)."""
        """Local users publisher_acl does not restrict (root, the master's own user)."""
        self.cache = cache
        self.roster = roster
        self.estate = estate
        self.data_cache = data_cache
        self.utcnow = utcnow
        self.grain_pool = GrainPool()
        """One copy of the grain values minions report alike (``services.grainpool``)."""
        loaded = data_cache.load_all() if data_cache else {}
        self.grains: dict[str, dict[str, Any]] = {
            minion: self.grain_pool.share(grains) for minion, grains in loaded.items()
        }
        """Minion id -> the grains it last reported."""
        self.pillars: Mapping[str, Mapping[str, Any]] = {}
        """Minion id -> the pillar the master compiled for it (pillar targeting; kept by
        ``raetsalt.saltbridge.service.SaltRequests``)."""
        self.last_jid: str | None = None
        self.stats: Counter[str] = Counter()
        """Returns dropped or not sent again, by ``ReturnDrop``."""
        self._watches: dict[str, _Watch] = {}
        self._answering: set[str] = set()
        """The jids of the watches with returns to send (``answer_returns``)."""
        self._gatherings: dict[str, _Gathering] = {}
        self._jobs: dict[str, float] = {}
        """jid -> when it was published (jobs whose returns are accepted)."""
        self._batches: dict[str, _Batch] = {}
        """jid -> the batch run it is: its client (only) may publish further sub-batches
        under it (``batch`` and ``jid`` in a publication)."""
        self._next_clean: float | None = None
        self.fleet_grains: Callable[[str], dict[str, Any] | None] = lambda minion: None
        """The grains of a minion another master of the cluster holds (what that master
        reported), for targeting here; None: unknown."""
        self.fleet_pillar: Callable[[str], Mapping[str, Any] | None] = lambda minion: None
        """The pillar of a minion another master of the cluster holds, as it compiled it."""
        self.mine_reader: Callable[[Any, Any, str], dict[str, Any]] | None = None
        """Reads the mine for the ``mine.get`` runner (``raetsalt.services.mine``)."""

    # -- road ---------------------------------------------------------------------------

    def on_hello(self, minion: str, body: Mapping[str, Any]) -> list[Action]:
        """A minion (authenticated as ``minion``) reported its grains."""
        grains = body.get("grains")
        if not isinstance(grains, dict):
            return []
        if self.grains.get(minion) != grains:  # (a reconnection reports the same: no copy)
            self.grains[minion] = self.grain_pool.share(grains)
            if self.data_cache is not None:
                try:
                    self.data_cache.save(minion, grains)
                except (OSError, KeepError) as exc:
                    log.warning("grains of %s not cached: %s", minion, exc)
        if body.get("start") is not True:
            return []
        tag = f"salt/minion/{minion}/start"
        when = self._start_time(minion, body)
        data = {
            "id": minion,
            "cmd": "_minion_event",
            "pretag": None,
            "tag": tag,
            "data": f"Minion {minion} started at {when.ctime()}",
            "_stamp": salt_stamp(when),
        }
        return [Fire(tag, data)]

    def _start_time(self, minion: str, body: Mapping[str, Any]) -> datetime:
        """When the minion's daemon started, in its own time zone, from its hello (every
        master a minion greets then fires the same start event); the master's clock (in
        its own zone) when the hello has no start time or a bad one (counted, logged)."""
        now = self.utcnow()
        raw = body.get("start_time")
        if raw is None:
            return now.astimezone()  # a minion from before start times
        start = start_time_untrusted(raw, now.timestamp())
        if start is None:
            self.stats[HelloDrop.START_TIME] += 1
            times = self._quota_log.note(HelloDrop.START_TIME, now.timestamp())
            if times:
                log.warning("the start time in the hello of %s is not believable (%s): "
                            "its start event has this master's time (%d since the last "
                            "report)", clip(minion), _shown(raw), times)
            return now.astimezone()
        offset = utc_offset_untrusted(body.get("utc_offset", 0))
        if offset is None:
            self.stats[HelloDrop.UTC_OFFSET] += 1
            offset = 0
        return datetime.fromtimestamp(start, timezone(timedelta(seconds=offset)))

    def on_clock_req(self, minion: str) -> list[Action]:
        """The master's clock for ``minion`` (the answer to its ``clock_req``), so that it
        can judge publication deadlines.  (The silence the master asks of its minions
        before they probe it travels in the road's own frames: the native HINT.)"""
        return [ToMinion(minion, p.road_message(self.estate, None, p.SHARE_CLOCK,
                                                time=self.utcnow().timestamp()))]

    def on_return(self, minion: str, body: Mapping[str, Any], *, store: bool = True,
                  fire: bool = True) -> list[Action]:
        """A minion's job return.  The id is the road's, never the payload's.  In a
        cluster the master holding the minion stores a return for a job published on
        another master (``fire`` False: the origin fires it) and the origin takes it
        from there (``store`` False: it is stored)."""
        try:
            jid = p.text_untrusted(body, "jid")
            fun = p.text_untrusted(body, "fun", default="")
            fun_args = p.list_untrusted(body, "fun_args")
        except BadPacket as exc:
            self.stats[ReturnDrop.MALFORMED] += 1
            log.debug("bad return from %s: %s", minion, exc)
            return []
        gathering = self._gatherings.get(jid)
        if gathering is not None:
            gathering.returns[minion] = body.get("return")
            if gathering.expected <= set(gathering.returns):
                return self._finish_gathering(jid)
            return []
        call_load: dict[str, Any] | None = None
        if jid == p.CALL_JID:  # its job is recorded once its return is accepted
            jid = self._new_jid()
            call_load = {"tgt": minion, "tgt_type": "list", "fun": fun, "arg": fun_args,
                         "user": minion, "minions": [minion], "missing": []}
        elif not is_jid(jid) or (jid not in self._jobs and self.cache.get_load(jid) is None):
            self.stats[ReturnDrop.UNKNOWN_JOB] += 1
            log.debug("return from %s for unknown job %r dropped", minion, jid)
            return []
        ret = {k: body[k] for k in _RETURN_KEYS if k in body}
        ret.setdefault("retcode", 0)
        ret.setdefault("success", ret["retcode"] == 0)
        try:
            if store:
                self.cache.save_return(jid, minion, {**ret, "fun": fun, "fun_args": fun_args})
        except QuotaExceeded as exc:  # nothing is kept for it: bounded memory
            self.stats[ReturnDrop.QUOTA] += 1
            times = self._quota_log.note(minion, self.utcnow().timestamp())
            if times:
                log.warning("returns of %s dropped: %s (%d since the last report)",
                            clip(minion), exc, times)
            return []
        except (OSError, KeepError) as exc:
            times = self._quota_log.note(("store", minion), self.utcnow().timestamp())
            if times:
                log.error("return of %s for %s not stored: %s (%d since the last report)",
                          clip(minion), jid, exc, times)
        if call_load is not None:
            try:
                self._save_load(jid, call_load)
            except (OSError, KeepError) as exc:
                log.error("job %s of %s not stored: %s", jid, clip(minion), exc)
        watch = self._watches.get(jid)
        if watch is not None:
            if minion in watch.returned:
                self.stats[ReturnDrop.REPEATED] += 1  # stored and fired, sent once
            else:
                watch.returned.add(minion)
                watch.pending[minion] = ret
                self._answering.add(jid)
        if not fire:
            return []
        load = {"id": minion, "jid": jid, **ret, "fun": fun, "fun_args": fun_args,
                "cmd": "_return", "_stamp": salt_stamp(self.utcnow())}
        return [Fire(f"salt/job/{jid}/ret/{minion}", load)]

    def on_running(self, minion: str, body: Mapping[str, Any], now: float) -> list[Action]:
        """A minion still runs these jobs (``raetsalt.services.progress``): the client
        waiting for one hears it with its next returns, and waits on."""
        for jid in progress.running_jids_untrusted(body):
            watch = self._watches.get(jid)
            if watch is None or minion not in watch.expected or minion in watch.returned:
                continue
            watch.expires = max(watch.expires, now + watch.wait + _WATCH_GRACE)
            watch.alive.add(minion)
            self._answering.add(jid)
        return []

    def answer_returns(self, room: Callable[[Sink], bool] = lambda sink: True
                       ) -> list[Action]:
        """Send each waiting client the returns that came for it since the last call, many
        to a message, but only to a client ``room`` says is keeping up (the daemon looks at
        what is still queued for it): while it is not, its returns wait here, so a slow
        reader gets fewer, larger messages, and nothing is dropped for want of room.  The
        daemon calls this once per pass of its loop."""
        actions: list[Action] = []
        for jid in list(self._answering):
            watch = self._watches.get(jid)
            if watch is None:  # expired, or its client went away
                self._answering.discard(jid)
                continue
            if room(watch.sink):
                self._answering.discard(jid)
                waiting = list(watch.pending.items())
                watch.pending.clear()
                for start in range(0, len(waiting), p.RETURNS_PER_MESSAGE):
                    returns = [list(item) for item in
                               waiting[start:start + p.RETURNS_PER_MESSAGE]]
                    actions.append(watch.sink.answer(self.estate, p.SHARE_JOB_RET, jid=jid,
                                                     returns=returns))
                alive = sorted(watch.alive - watch.returned)
                watch.alive.clear()
                actions.extend(watch.sink.answer(self.estate, p.SHARE_JOB_RET, jid=jid,
                                                 returns=[], alive=ids)
                               for ids in progress.chunks(alive))
            if not watch.pending and watch.expected <= watch.returned:
                del self._watches[jid]
        return actions

    def returns_waiting(self) -> bool:
        """Some client has returns ``answer_returns`` has not sent yet."""
        return bool(self._answering)

    # -- lane and peers -----------------------------------------------------------------

    def on_publish(
        self, requester: Requester, yard: str, body: Mapping[str, Any], now: float
    ) -> list[Action]:
        """A client's publish request (``raetsalt`` CLI); ``requester`` is who the daemon
        established the client is (publisher_acl / external_auth apply)."""
        req = body.get("req")
        if not isinstance(req, str):
            return []
        return self._publish(requester, Sink(req, yard=yard), body, now)

    def check_peer(self, minion: str, share: str, body: Mapping[str, Any], now: float
                   ) -> PeerGrant | list[Action]:
        """The ``peer`` (share ``peer_publish``) or ``peer_run`` (``peer_runner``) decision
        on a minion's request, the only one made on it: a ``PeerGrant`` when it may go on
        (``serve_peer`` publishes or runs it, deciding nothing again), else what to answer
        (the refusal and the denial event; the error of a malformed request; nothing for
        a request without a ``rid``, which cannot be answered).  ``minion`` is the road's
        authenticated role; an ``id`` in the payload is ignored."""
        rid = body.get("rid")
        if not isinstance(rid, str):
            return []
        requester = Requester("minion", minion)
        sink = Sink(rid, minion=minion)
        runner = share == p.SHARE_PEER_RUNNER
        try:
            fun = p.text_untrusted(body, "fun")
            arg = p.list_untrusted(body, "arg")
            if runner:
                decision = self._authorize_runner(requester, fun, arg)
                what: dict[str, Any] = {"fun": fun}
            else:
                tgt, tgt_type, delimiter = p.target_untrusted(body)
                table = self.minion_table()
                match_bounds(tgt, tgt_type, table, self.opts.get("nodegroups") or {},
                             delimiter=delimiter)
                decision = self._authorize_publish(requester, fun, arg, tgt, tgt_type, table)
                what = {"fun": fun, "tgt": tgt, "tgt_type": tgt_type}
        except (BadPacket, TargetError):
            # Answered with the error the publishing path gives a malformed request; it
            # stops there, before any decision (and would be refused if it got further).
            unparsed = acl.Decision(False, "the request does not parse")
            if runner:
                return self._runner(requester, sink, body, now, unparsed)
            return self._publish(requester, sink, body, now, unparsed)
        if not decision.allowed:
            answer = p.SHARE_RUN_RET if runner else p.SHARE_PUB_ACK
            return self._denied(requester, sink, answer, decision, now, **what)
        return PeerGrant(minion, rid, runner, body, decision)

    def serve_peer(self, grant: PeerGrant, now: float) -> list[Action]:
        """Publish (or run) what ``check_peer`` allowed, answering the minion."""
        requester = Requester("minion", grant.minion)
        sink = Sink(grant.rid, minion=grant.minion)
        if grant.runner:
            return self._runner(requester, sink, grant.body, now, grant.decision)
        return self._publish(requester, sink, grant.body, now, grant.decision)

    def on_peer_publish(self, minion: str, body: Mapping[str, Any], now: float) -> list[Action]:
        """A minion's ``publish.publish`` (road share ``peer_publish``): ``check_peer``,
        then ``serve_peer`` (the daemon's flow runs them as two steps)."""
        return self._on_peer(minion, p.SHARE_PEER_PUBLISH, body, now)

    def on_runner(
        self, requester: Requester, yard: str, body: Mapping[str, Any], now: float
    ) -> list[Action]:
        """A client's runner request (``raetsalt-run``)."""
        req = body.get("req")
        if not isinstance(req, str):
            return []
        return self._runner(requester, Sink(req, yard=yard), body, now)

    def on_peer_runner(self, minion: str, body: Mapping[str, Any], now: float) -> list[Action]:
        """A minion's ``publish.runner`` (road share ``peer_runner``; ``peer_run``):
        ``check_peer``, then ``serve_peer``."""
        return self._on_peer(minion, p.SHARE_PEER_RUNNER, body, now)

    def _on_peer(self, minion: str, share: str, body: Mapping[str, Any], now: float
                 ) -> list[Action]:
        decided = self.check_peer(minion, share, body, now)
        if isinstance(decided, PeerGrant):
            return self.serve_peer(decided, now)
        return decided

    def minion_table(self) -> dict[str, MinionFacts]:
        """Every accepted minion -> its reported grains and its pillar (None: unknown)."""
        return {m: MinionFacts(self.grains[m] if m in self.grains else self.fleet_grains(m),
                               self.pillars[m] if m in self.pillars else self.fleet_pillar(m))
                for m in self.roster.accepted()}

    def adopt_job(self, jid: str, now: float) -> None:
        """A job another master of the cluster published, delivered here to the minions
        this master holds: their returns are accepted (and stored) here."""
        self._jobs.setdefault(jid, now)

    def _publish(
        self, requester: Requester, sink: Sink, body: Mapping[str, Any], now: float,
        decided: acl.Decision | None = None,
    ) -> list[Action]:
        """Publish a job; ``decided`` is the access decision already made on it (a peer's,
        by ``check_peer``), else it is made here."""
        def fail(message: str, **extra: Any) -> list[Action]:
            return [sink.answer(self.estate, p.SHARE_PUB_ACK, error=message, **extra)]

        try:
            tgt, tgt_type, delimiter = p.target_untrusted(body)
            fun = p.text_untrusted(body, "fun")
            arg = p.list_untrusted(body, "arg")
            ret_to = p.text_untrusted(body, "ret", default="")
            returner_extra = returner_options_untrusted(body)
            batch_of = p.text_untrusted(body, "jid", default="")
        except BadPacket as exc:
            return fail(str(exc))
        if not fun:
            return fail("no function given")
        batch = self._batches.get(batch_of) if batch_of else None
        if batch_of and (batch is None or (batch.yard, batch.requester) != (sink.yard,
                                                                               requester)):
            return fail(f"job {clip(batch_of, 40, bare=True)} is no batch of this client's")
        nodegroups = self.opts.get("nodegroups") or {}
        table = self.minion_table()
        try:
            bounds = match_bounds(tgt, tgt_type, table, nodegroups, delimiter=delimiter)
            sent_tgt, sent_type = minion_target(tgt, tgt_type, nodegroups)
        except TargetError as exc:
            return fail(f"Invalid target: {clip(str(exc), 200, bare=True)}")
        decision = (decided if decided is not None
                    else self._authorize_publish(requester, fun, arg, tgt, tgt_type, table))
        if not decision.allowed:
            return self._denied(requester, sink, p.SHARE_PUB_ACK, decision, now, fun=fun, tgt=tgt,
                                tgt_type=tgt_type)
        if self._restricted(requester):
            # Publish exactly what was checked: ``k=v`` strings become keyword arguments.
            arg = acl.normalized_arg(fun, arg)
        minions = sorted(bounds.definite)
        if body.get("preview") and sink.minion is None:
            return [sink.answer(self.estate, p.SHARE_PUB_ACK, minions=minions)]
        missing: list[str] = []
        if tgt_type == "list":
            listed = tgt.split(",") if isinstance(tgt, str) else list(tgt)
            missing = sorted({m for m in listed if m and m not in table})
        if not minions:
            # Salt: "No minions matched the target. No command was sent, no jid was assigned."
            return [sink.answer(self.estate, p.SHARE_PUB_ACK, jid="", minions=[],
                                missing=missing, not_connected=[])]
        jid = batch_of or self._new_jid()
        user = requester.name
        load = {"tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": arg, "user": user,
                "minions": minions, "missing": missing}
        if batch is None and body.get("batch") is True and sink.yard is not None:
            batch = _Batch(sink.yard, requester)
        if batch is not None:  # a batch's job lists the minions of all its sub-batches
            batch.minions.update(minions)
            batch.missing.update(missing)
            load["minions"], load["missing"] = sorted(batch.minions), sorted(batch.missing)
        try:
            self._save_load(jid, load)
        except (OSError, KeepError) as exc:
            return fail(f"the job cache cannot store the job: {exc}")
        self._jobs[jid] = now
        if batch is not None:
            self._batches[jid] = batch
        actions: list[Action] = [Fire(f"salt/job/{jid}/new",
                                      {"jid": jid, **load, "_stamp": salt_stamp(self.utcnow())})]
        timeout = body.get("timeout")
        wait = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else float(
            self.opts.get("timeout", 5))
        wait = min(wait, p.MAX_JOB_TTL)
        pub = {"jid": jid, "tgt": sent_tgt, "tgt_type": sent_type, "fun": fun, "arg": arg,
               "delimiter": delimiter, "user": user, "ret": ret_to, **returner_extra,
               **self._deadline(wait)}
        not_connected = []
        for minion in sorted(bounds.possible):
            # Only a minion that is connected now gets the job: the road would otherwise
            # hold it and deliver it when the minion comes back, after the client has
            # reported it as not connected (Salt's minion misses such a job too).
            if self.roster.state(minion).up:
                actions.append(ToMinion(minion, p.road_message(self.estate, None, p.SHARE_FUN,
                                                               **pub)))
            elif minion in bounds.definite:
                not_connected.append(minion)
        watch = self._watches.get(jid) if batch_of else None
        if watch is None:
            self._watches[jid] = _Watch(sink, set(minions), now + wait + _WATCH_GRACE,
                                        wait=wait)
        else:  # the earlier sub-batches' minions still running: one watch for the job
            watch.sink = sink
            watch.expected |= set(minions)
            watch.expires = max(watch.expires, now + wait + _WATCH_GRACE)
            watch.wait = max(watch.wait, wait)
        actions.append(sink.answer(self.estate, p.SHARE_PUB_ACK, jid=jid, minions=minions,
                                   missing=missing, not_connected=not_connected))
        return actions

    def _runner(
        self, requester: Requester, sink: Sink, body: Mapping[str, Any], now: float,
        decided: acl.Decision | None = None,
    ) -> list[Action]:
        """Run a runner; ``decided`` as for ``_publish``."""
        try:
            fun = p.text_untrusted(body, "fun")
            raw = p.list_untrusted(body, "arg")
        except BadPacket as exc:
            return [sink.answer(self.estate, p.SHARE_RUN_RET, error=str(exc))]
        decision = decided if decided is not None else self._authorize_runner(requester, fun, raw)
        if not decision.allowed:
            return self._denied(requester, sink, p.SHARE_RUN_RET, decision, now, fun=fun)
        if self._restricted(requester):
            args, kwargs = acl.parse_args(raw)  # run exactly what was checked
        else:
            args, kwargs = p.unpack_args(raw)
        try:
            result = run_runner(self, fun, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - a runner's failure is the client's answer
            log.debug("runner %s failed", fun, exc_info=True)
            return [sink.answer(self.estate, p.SHARE_RUN_RET,
                                error=str(exc) or type(exc).__name__)]
        if isinstance(result, Gather):
            return self._start_gathering(result, sink, now)
        return [sink.answer(self.estate, p.SHARE_RUN_RET, **{"return": result})]

    # -- access control -------------------------------------------------------------------

    def _restricted(self, requester: Requester) -> bool:
        """Access rules apply to ``requester`` (all but root and the master's user)."""
        return requester.kind != "user" or requester.name not in self.unrestricted

    def _authorize_publish(
        self, requester: Requester, fun: str, arg: list[Any], tgt: Any, tgt_type: str,
        table: Mapping[str, Any],
    ) -> acl.Decision:
        nodegroups = self.opts.get("nodegroups") or {}
        if requester.kind == "minion":
            return acl.check_peer(self.opts.get("peer"), requester.name, fun, arg, tgt,
                                  tgt_type, table, nodegroups)
        if requester.kind == "eauth":
            listed = acl.check_blacklist(self.opts.get("publisher_acl_blacklist"),
                                         requester.name, fun)
            return listed or acl.check_eauth(
                self._eauth_config(requester), requester.backend or "", requester.name,
                requester.groups, fun, arg, tgt, tgt_type, table, "publish",
                nodegroups=nodegroups, permissive=bool(self.opts.get("permissive_acl")))
        return acl.check_publisher_acl(
            self.opts.get("publisher_acl"), requester.name, requester.groups, fun, arg, tgt,
            tgt_type, table, self.opts.get("publisher_acl_blacklist"),
            unrestricted=self.unrestricted, nodegroups=nodegroups,
            permissive=bool(self.opts.get("permissive_acl")))

    def _authorize_runner(self, requester: Requester, fun: str, arg: list[Any]
                          ) -> acl.Decision:
        if requester.kind == "minion":
            return acl.check_peer_run(self.opts.get("peer_run"), requester.name, fun, arg=arg)
        if requester.kind == "eauth":
            listed = acl.check_blacklist(self.opts.get("publisher_acl_blacklist"),
                                         requester.name)
            return listed or acl.check_eauth(
                self._eauth_config(requester), requester.backend or "", requester.name,
                requester.groups, fun, arg, kind="runner",
                permissive=bool(self.opts.get("permissive_acl")))
        return acl.check_publisher_acl_runner(
            self.opts.get("publisher_acl"), requester.name, requester.groups, fun, arg,
            self.opts.get("publisher_acl_blacklist"), unrestricted=self.unrestricted,
            permissive=bool(self.opts.get("permissive_acl")))

    def _eauth_config(self, requester: Requester) -> Mapping[str, Any]:
        """``external_auth``, or only the rules kept in the requester's token."""
        if requester.acl is not None and requester.backend:
            return {requester.backend: {requester.name: list(requester.acl)}}
        return self.opts.get("external_auth") or {}

    def _denied(self, requester: Requester, sink: Sink, share: str, decision: acl.Decision,
                now: float, **what: Any) -> list[Action]:
        """Refuse loudly: the requester gets what was denied and why (never the rules),
        the log and the bus (``raetsalt/<check>/<who>/denied``) get the rule too."""
        fun = what.get("fun")
        if share == p.SHARE_RUN_RET:
            head = f"runner {clip(fun)}"
        else:
            head = (f"publish of {clip(fun)} to {clip(what.get('tgt'))} "
                    f"({clip(what.get('tgt_type'), bare=True)})")
        check = {"minion": "peer", "eauth": "eauth"}.get(requester.kind, "publisher_acl")
        message = f"{'peer ' if check == 'peer' else ''}{head} denied: {decision.reason}"
        times = self._denial_log.note((check, requester.name), now)
        if times:  # loud, but one requester cannot flood the log
            log.warning("%s %s: %s (rule: %s)%s", check, requester.name, message,
                        decision.rule or "none matched",
                        f" [{times} denials since the last report]" if times > 1 else "")
        data = {"id": requester.name, "kind": "runner" if share == p.SHARE_RUN_RET
                else "publish", "check": check, **what, "reason": decision.reason,
                "rule": decision.rule, "_stamp": salt_stamp(self.utcnow())}
        if requester.backend:
            data["eauth"] = requester.backend
        return [sink.answer(self.estate, share, error=message, denied=True),
                Fire(f"raetsalt/{check}/{requester.name}/denied", data)]

    # -- time ---------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The earliest time ``handle_timer`` has work, or None."""
        times = [g.deadline for g in self._gatherings.values()]
        times.extend(w.expires for w in self._watches.values())
        if self._next_clean is not None:
            times.append(self._next_clean)
        return min(times) if times else None

    def handle_timer(self, now: float) -> list[Action]:
        actions: list[Action] = []
        for jid in [j for j, g in self._gatherings.items() if g.deadline <= now]:
            actions.extend(self._finish_gathering(jid))
        for jid in [j for j, w in self._watches.items() if w.expires <= now]:
            del self._watches[jid]
        for jid in [j for j, t in self._jobs.items() if t + 86400.0 <= now]:
            del self._jobs[jid]
            self._batches.pop(jid, None)
        if self._next_clean is None:
            self._next_clean = now + _CLEAN_EVERY
        elif self._next_clean <= now:
            self._next_clean = now + _CLEAN_EVERY
            keep = float(self.opts.get("keep_jobs", 24) or 0)
            if keep > 0:
                removed = self.cache.clean(self.utcnow(), keep)
                if removed:
                    log.info("job cache: removed %d jobs older than %s h", len(removed), keep)
        return actions

    def serving(self, yard: str) -> bool:
        """Returns or a runner's result may still come for client ``yard``."""
        return any(w.sink.yard == yard for w in self._watches.values()) or any(
            g.sink.yard == yard for g in self._gatherings.values())

    def forget_client(self, yard: str) -> None:
        """A client yard went away: stop sending it returns."""
        for jid in [j for j, w in self._watches.items() if w.sink.yard == yard]:
            del self._watches[jid]
        for jid in [j for j, b in self._batches.items() if b.yard == yard]:
            del self._batches[jid]

    # -- runner support -----------------------------------------------------------------

    def minion_states(self, minions: Iterable[str] | None = None) -> dict[str, MinionState]:
        """Road state of the accepted minions (or of ``minions``), by id."""
        ids = self.roster.accepted() if minions is None else list(minions)
        return {m: self.roster.state(m) for m in ids}

    def mine_get(self, tgt: Any, fun: Any, tgt_type: str) -> dict[str, Any]:
        """The mine of the minions ``tgt`` matches (the ``mine.get`` runner)."""
        return {} if self.mine_reader is None else self.mine_reader(tgt, fun, tgt_type)

    def targeted(self, tgt: Any, tgt_type: str) -> list[str]:
        """Accepted minions that ``tgt`` matches (master side)."""
        return sorted(match_bounds(tgt, tgt_type, self.minion_table(),
                                   self.opts.get("nodegroups") or {}).definite)

    # -- internals ----------------------------------------------------------------------

    def _deadline(self, ttl: float) -> dict[str, float]:
        """A publication's deadline: ``ttl`` (how long the publisher waits) and
        ``expires``, the master's wall-clock time (Unix seconds) when that wait ends."""
        return {"ttl": ttl, "expires": self.utcnow().timestamp() + ttl}

    def _new_jid(self) -> str:
        jid = new_jid(self.utcnow(), self.last_jid)
        self.last_jid = jid
        return jid

    def _save_load(self, jid: str, load: dict[str, Any]) -> None:
        self.cache.save_load(jid, load)
        self._jobs.setdefault(jid, float("-inf"))

    def _start_gathering(self, gather: Gather, sink: Sink, now: float) -> list[Action]:
        expected = {m for m, s in self.minion_states().items() if s.up}
        if not expected:
            return [sink.answer(self.estate, p.SHARE_RUN_RET, **{"return": gather.finish({})})]
        jid = self._new_jid()
        self._gatherings[jid] = _Gathering(gather, sink, expected,
                                           now + float(self.opts.get("timeout", 5)))
        pub = {"jid": jid, "tgt": sorted(expected), "tgt_type": "list", "fun": gather.fun,
               "arg": gather.arg, "delimiter": ":", "user": "root", "ret": "",
               **self._deadline(float(self.opts.get("timeout", 5)))}
        return [ToMinion(m, p.road_message(self.estate, None, p.SHARE_FUN, **pub))
                for m in sorted(expected)]

    def _finish_gathering(self, jid: str) -> list[Action]:
        gathering = self._gatherings.pop(jid)
        try:
            value = gathering.gather.finish(gathering.returns)
        except Exception as exc:  # noqa: BLE001
            return [gathering.sink.answer(self.estate, p.SHARE_RUN_RET, error=str(exc))]
        return [gathering.sink.answer(self.estate, p.SHARE_RUN_RET, **{"return": value})]
