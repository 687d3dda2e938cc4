"""The master's runners: ``manage.*`` and ``jobs.*``, answering in the shapes Salt's own
runners return.

Presence, not pings: ``manage.up``/``down``/``status`` read the road's state instead of
publishing ``test.ping`` and waiting (Salt's way).  A minion is *up* when its session is
allowed and it answers the road's alive probes: every ``raet_alive_period`` seconds of
silence the master probes it, and a probe unanswered for the road's alive time-out
(2 s) makes it *down*.  So the answer comes at once, a minion that just stopped is
reported down within ``raet_alive_period`` + 2 s, and a minion busy with a long job is
still up (jobs run in their own processes; the road keeps being serviced).  The
arguments ``timeout`` and ``gather_job_timeout`` are accepted and ignored.
``manage.present``/``joined``/``allowed``/``alived`` keep their RAET-era meaning (the
road's flags) with 3008's return shape (a sorted list, ``{id: ip}`` with ``show_ip``).

``jobs.active`` does what Salt does: it asks every minion that is up for
``saltutil.running`` (waiting at most the master's ``timeout``) and merges the answers
with the returns in the job cache.

Runners see the master as a ``raetsalt.services.ports.RunnerContext`` (the road's view,
the job cache, the opts), never ``MasterJobs`` itself: ``master`` imports this module,
not the other way round.  Unlike Salt, that internal publication is not
stored in the job cache, and runner calls are not recorded as jobs.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import Any

from raetsalt import acl

from .jids import is_jid, start_time
from .ports import Gather, RunnerContext
from .runners_more import more_runners

Runner = Callable[..., Any]


class RunnerNotFound(Exception):
    """No runner of that name ('x.y' is not available.)."""


# ---------------------------------------------------------------------------- manage


def _select(master: RunnerContext, tgt: Any, tgt_type: str) -> list[str]:
    if tgt == "*" and tgt_type == "glob":
        return sorted(master.roster.accepted())
    return master.targeted(tgt, tgt_type)


def _status(master: RunnerContext, tgt: Any = "*", tgt_type: str = "glob") -> dict[str, list[str]]:
    states = master.minion_states(_select(master, tgt, tgt_type))
    return {
        "up": sorted(m for m, s in states.items() if s.up),
        "down": sorted(m for m, s in states.items() if not s.up),
    }


def manage_status(
    master: RunnerContext,
    output: bool = True,
    tgt: Any = "*",
    tgt_type: str = "glob",
    timeout: Any = None,
    gather_job_timeout: Any = None,
) -> dict[str, list[str]]:
    return _status(master, tgt, tgt_type)


def manage_up(
    master: RunnerContext,
    tgt: Any = "*",
    tgt_type: str = "glob",
    timeout: Any = None,
    gather_job_timeout: Any = None,
) -> list[str]:
    return _status(master, tgt, tgt_type)["up"]


def manage_down(
    master: RunnerContext,
    removekeys: bool = False,
    tgt: Any = "*",
    tgt_type: str = "glob",
    timeout: Any = None,
    gather_job_timeout: Any = None,
) -> list[str]:
    if removekeys:
        raise ValueError("removekeys is not supported here; use raetsalt-key -d")
    return _status(master, tgt, tgt_type)["down"]


def _listing(
    master: RunnerContext, chosen: Callable[[Any], bool], subset: Any, show_ip: bool
) -> Any:
    states = master.minion_states()
    ids = sorted(m for m, s in states.items() if chosen(s))
    if subset:
        wanted = set(subset if isinstance(subset, list) else str(subset).split(","))
        ids = [m for m in ids if m in wanted]
    if show_ip:
        return {m: states[m].ip for m in ids}
    return ids


def _state_runner(test: Callable[[Any], bool]) -> Runner:
    def runner(master: RunnerContext, subset: Any = None, show_ip: bool = False) -> Any:
        return _listing(master, test, subset, show_ip)

    return runner


_STATE_TESTS: dict[str, Callable[[Any], bool]] = {
    "present": lambda s: s.up,
    "joined": lambda s: s.joined,
    "allowed": lambda s: s.allowed,
    "alived": lambda s: s.alive,
}


def manage_list_state(
    master: RunnerContext, subset: Any = None, show_ip: bool = False, state: str | None = None
) -> Any:
    test = _STATE_TESTS.get(state or "present")
    if test is None:
        raise ValueError(f"unknown state {state!r}; use one of {', '.join(_STATE_TESTS)}")
    return _listing(master, test, subset, show_ip)


def manage_list_not_state(
    master: RunnerContext, subset: Any = None, show_ip: bool = False, state: str | None = None
) -> Any:
    test = _STATE_TESTS.get(state or "present")
    if test is None:
        raise ValueError(f"unknown state {state!r}; use one of {', '.join(_STATE_TESTS)}")
    return _listing(master, lambda s: not test(s), subset, show_ip)


# ---------------------------------------------------------------------------- jobs


def _format_job(jid: str, load: dict[str, Any] | None, *, minions: bool) -> dict[str, Any]:
    """Salt's ``_format_jid_instance``."""
    if not load:
        return {"Error": "Cannot contact returner or no job with this jid",
                "StartTime": start_time(jid)}
    out: dict[str, Any] = {
        "Function": load.get("fun", "unknown-function"),
        "Arguments": list(load.get("arg", [])),
        "Target": load.get("tgt", "unknown-target"),
        "Target-type": load.get("tgt_type", "list"),
        "User": load.get("user", "root"),
    }
    if "metadata" in load:
        out["Metadata"] = load["metadata"]
    if minions and "minions" in load:
        out["Minions"] = list(load["minions"])
    out["StartTime"] = start_time(jid)
    return out


def _result(master: RunnerContext, jid: str) -> dict[str, dict[str, Any]]:
    return {
        minion: {k: ret[k] for k in ("return", "retcode", "success", "out") if k in ret}
        for minion, ret in master.cache.get_returns(jid).items()
    }


def _check_jid(jid: Any) -> str:
    text = str(jid)
    if not is_jid(text):
        raise ValueError(f"not a jid: {text!r}")
    return text


def _globs(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return [v for v in str(value).split(",") if v]


def _matches(value: Any, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(str(value), g) for g in globs)


def jobs_list_jobs(
    master: RunnerContext,
    ext_source: Any = None,
    outputter: Any = None,
    search_metadata: Any = None,
    search_function: Any = None,
    search_target: Any = None,
    start_time: Any = None,
    end_time: Any = None,
    display_progress: bool = False,
) -> dict[str, Any]:
    functions, targets = _globs(search_function), _globs(search_target)
    out: dict[str, Any] = {}
    for jid in master.cache.jids():
        load = master.cache.get_load(jid)
        if load is None:
            continue
        if functions and not _matches(load.get("fun"), functions):
            continue
        if targets:
            tgt = load.get("tgt")
            values = tgt if isinstance(tgt, list) else [tgt]
            if not any(_matches(v, targets) for v in values):
                continue
        if start_time is not None and jid < _jid_bound(start_time):
            continue
        if end_time is not None and jid > _jid_bound(end_time):
            continue
        out[jid] = _format_job(jid, load, minions=False)
    return out


def _jid_bound(value: Any) -> str:
    """A jid-comparable bound from a jid or a date text (digits kept, zero-padded)."""
    digits = "".join(c for c in str(value) if c.isdigit())
    return (digits + "0" * 20)[:20]


def jobs_list_job(
    master: RunnerContext, jid: Any, ext_source: Any = None, display_progress: bool = False
) -> dict[str, Any]:
    jid = _check_jid(jid)
    out: dict[str, Any] = {"jid": jid}
    out.update(_format_job(jid, master.cache.get_load(jid), minions=True))
    out["Result"] = _result(master, jid)
    return out


def jobs_print_job(master: RunnerContext, jid: Any, ext_source: Any = None) -> dict[str, Any]:
    jid = _check_jid(jid)
    entry = _format_job(jid, master.cache.get_load(jid), minions=True)
    entry["Result"] = _result(master, jid)
    return {jid: entry}


def jobs_lookup_jid(
    master: RunnerContext,
    jid: Any,
    ext_source: Any = None,
    returned: bool = True,
    missing: bool = False,
    display_progress: bool = False,
) -> dict[str, Any]:
    data = jobs_list_job(master, jid)
    returns = data.get("Result", {})
    out: dict[str, Any] = {}
    if returned:
        out = {minion: ret.get("return") for minion, ret in returns.items()}
    if missing:
        for minion in data.get("Minions", []):
            if minion not in returns:
                out[minion] = "Minion did not return"
    first = next(iter(returns.values()), None)
    outputter = first.get("out") if isinstance(first, dict) else None
    if outputter:
        return {"outputter": outputter, "data": out}
    return out


def jobs_exit_success(
    master: RunnerContext, jid: Any, ext_source: Any = None, minions: Any = None
) -> dict[str, bool]:
    data = jobs_list_job(master, jid)
    result = data.get("Result", {})
    out = {m: bool(result.get(m, {}).get("return")) for m in data.get("Minions", [])}
    out.update({m: True for m, r in result.items() if r.get("return")})
    return out


def jobs_active(master: RunnerContext, display_progress: bool = False) -> Gather:
    def finish(running: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for minion, jobs in sorted(running.items()):
            if not isinstance(jobs, list):
                continue
            for job in jobs:
                if not isinstance(job, dict) or not isinstance(job.get("jid"), str):
                    continue
                jid = job["jid"]
                if jid not in out:
                    out[jid] = _format_job(jid, job, minions=False) if is_jid(jid) else {}
                    out[jid].update({"Running": [], "Returned": []})
                out[jid]["Running"].append({minion: job.get("pid")})
        for jid, entry in out.items():
            if is_jid(jid):
                entry["Returned"] = sorted(master.cache.get_returns(jid))
        return out

    return Gather("saltutil.running", finish)


# ---------------------------------------------------------------------------- acl


def acl_explain(
    master: RunnerContext,
    who: str,
    fun: str,
    target: Any = None,
    tgt_type: str = "glob",
    arg: Any = None,
    user: bool = False,
    groups: Any = None,
) -> dict[str, Any]:
    """Why the master would allow or deny a request, and the config rule that decided.

    ``acl.explain MINION FUN TARGET [tgt_type=...] [arg=[...]]``: may minion ``MINION``
    publish ``FUN`` to ``TARGET`` (``peer``)?  Without ``TARGET``: may it run runner
    ``FUN`` (``peer_run``)?  With ``user=True`` ``WHO`` is a local user and
    ``publisher_acl`` decides (``groups``: its groups).  Uses this master's config and
    the grains the minions reported.
    """
    opts = master.opts
    table = master.minion_table()
    nodegroups = opts.get("nodegroups") or {}
    group_list = [str(g) for g in groups] if isinstance(groups, list) else (
        str(groups).split(",") if groups else [])
    out: dict[str, Any] = {}
    if target is None:
        if user:
            decision = acl.check_publisher_acl_runner(
                opts.get("publisher_acl"), who, group_list, fun, arg,
                opts.get("publisher_acl_blacklist"), unrestricted=master.unrestricted)
            out["check"] = "publisher_acl (runner)"
        else:
            decision = acl.check_peer_run(opts.get("peer_run"), who, fun, arg=arg)
            out["check"] = "peer_run"
    else:
        if user:
            decision = acl.check_publisher_acl(
                opts.get("publisher_acl"), who, group_list, fun, arg, target, tgt_type, table,
                opts.get("publisher_acl_blacklist"), unrestricted=master.unrestricted,
                nodegroups=nodegroups)
            out["check"] = "publisher_acl"
        else:
            decision = acl.check_peer(opts.get("peer"), who, fun, arg, target, tgt_type, table,
                                      nodegroups)
            out["check"] = "peer"
        try:
            out["targets"] = master.targeted(target, tgt_type)
        except Exception as exc:  # noqa: BLE001 - an invalid target is part of the answer
            out["targets"] = f"invalid target: {exc}"
    out.update({"allowed": decision.allowed, "reason": decision.reason,
                "rule": decision.rule})
    return out


def mine_get(master: RunnerContext, tgt: Any, fun: Any, tgt_type: str = "glob"
             ) -> dict[str, Any]:
    """Salt's ``mine.get`` runner: the mine values of ``fun`` (a name, a comma-separated
    string or a list) of the minions ``tgt`` matches, read on the master (no
    ``mine_get`` rules: who may run runners is ``publisher_acl``'s matter), in the
    shapes of the ``mine.get`` execution function."""
    return master.mine_get(tgt, fun, tgt_type)


RUNNERS: dict[str, Runner] = {
    "manage.status": manage_status,
    "manage.up": manage_up,
    "manage.down": manage_down,
    "manage.list_state": manage_list_state,
    "manage.list_not_state": manage_list_not_state,
    "jobs.list_jobs": jobs_list_jobs,
    "jobs.list_job": jobs_list_job,
    "jobs.print_job": jobs_print_job,
    "jobs.lookup_jid": jobs_lookup_jid,
    "jobs.exit_success": jobs_exit_success,
    "jobs.active": jobs_active,
    "acl.explain": acl_explain,
    "mine.get": mine_get,
}


RUNNERS.update(more_runners(jobs_list_jobs, jobs_print_job, _format_job))


def _negated(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda state: not test(state)


for _name, _test in _STATE_TESTS.items():
    RUNNERS[f"manage.{_name}"] = _state_runner(_test)
    RUNNERS[f"manage.not_{_name}"] = _state_runner(_negated(_test))


def run_runner(master: RunnerContext, fun: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Call runner ``fun``; raises ``RunnerNotFound``, ``TypeError`` for bad arguments,
    or whatever the runner raises.  A ``Gather`` result means "ask the minions first"."""
    runner = RUNNERS.get(fun)
    if runner is None:
        raise RunnerNotFound(f"'{fun}' is not available.")
    kwargs = {k: v for k, v in kwargs.items() if not k.startswith("__")}
    try:
        return runner(master, *args, **kwargs)
    except TypeError as exc:
        if "argument" in str(exc):
            raise TypeError(f"Passed invalid arguments to {fun}: {exc}") from None
        raise
