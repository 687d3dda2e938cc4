"""More of Salt's ``manage`` and ``jobs`` runners, with Salt 3008's return shapes:
``manage.versions``, ``jobs.last_run``, ``jobs.list_jobs_filter``, ``jobs.master``.

``manage.versions`` asks every minion that is up for ``test.version`` (Salt's, where the
minion runs Salt's loader) and sorts them as Salt does against the master's version: the
installed Salt's when there is one (``master_version``), else raetsalt's.  A minion that
is down is not asked; it is left out, as Salt leaves out the minions that do not answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .ports import Gather, RunnerContext

VERSION_LABELS = {-2: "Minion offline", -1: "Minion requires update", 0: "Up to date",
                  1: "Minion newer than master", 2: "Master"}
_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:(rc|a|b)(\d+))?")


def version_key(text: str) -> tuple[int, ...] | None:
    """A comparable key of a Salt version (``3008.4``, ``3007.0rc1``...), None when the
    text is not one.  A release candidate sorts before its release, as in Salt."""
    found = _VERSION.match(text.strip())
    if found is None:
        return None
    major, minor, bugfix, pre, number = found.groups()
    stage = {"a": 0, "b": 1, "rc": 2}.get(pre or "", 3)
    return (int(major), int(minor or 0), int(bugfix or 0), stage, int(number or 0))


def master_version() -> str:
    """The version the master compares with: the installed Salt's, else raetsalt's."""
    from importlib import metadata

    try:
        return metadata.version("salt")
    except metadata.PackageNotFoundError:
        from raetsalt import __version__

        return __version__


def manage_versions(master: RunnerContext) -> Gather:
    """Check the version of the active minions: ``Up to date``, ``Minion requires
    update``, ``Minion newer than master``, ``Minion offline`` (an answer that is no
    version) and ``Master``, as Salt's manage.versions sorts them."""
    mine = master_version()
    ours = version_key(mine)

    def finish(returns: dict[str, Any]) -> dict[str, Any]:
        status: dict[int, dict[str, Any]] = {}
        for minion, value in returns.items():
            theirs = version_key(value) if isinstance(value, str) else None
            if theirs is None or ours is None:
                diff, shown = -2, False
            else:
                diff, shown = (theirs > ours) - (theirs < ours), value
            status.setdefault(diff, {})[minion] = shown
        out: dict[str, Any] = {}
        for diff, minions in status.items():
            out[VERSION_LABELS[diff]] = {m: minions[m] for m in sorted(minions)}
        out[VERSION_LABELS[2]] = mine
        return out

    return Gather("test.version", finish)


def more_runners(list_jobs: Callable[..., dict[str, Any]], print_job: Callable[..., Any],
                 format_job: Callable[..., dict[str, Any]]) -> dict[str, Callable[..., Any]]:
    """These runners by name; the ``jobs`` ones are built on ``raetsalt.services.runners``'
    ``jobs_list_jobs``, ``jobs_print_job`` and its job formatting (given, so that this
    module does not import that one back)."""

    def jobs_last_run(master: RunnerContext, ext_source: Any = None, outputter: Any = None,
                      metadata: Any = None, function: Any = None, target: Any = None,
                      display_progress: bool = False) -> Any:
        """The most recent job (highest jid) that matches ``function``/``target``
        (globs), as ``jobs.print_job`` shows it; False when there is none."""
        if metadata and not isinstance(metadata, dict):
            return False
        found = list_jobs(master, search_function=function, search_target=target)
        if not found:
            return False
        return print_job(master, sorted(found)[-1])

    def jobs_list_jobs_filter(master: RunnerContext, count: Any, filter_find_job: bool = True,
                              ext_source: Any = None, outputter: Any = None,
                              display_progress: bool = False) -> dict[str, Any]:
        """The ``count`` most recent jobs (without ``saltutil.find_job`` ones), as Salt's
        local job cache lists them."""
        wanted = int(count)
        out: dict[str, Any] = {}
        for jid in sorted(master.cache.jids(), reverse=True):
            if len(out) >= wanted:
                break
            load = master.cache.get_load(jid)
            if load is None or (filter_find_job and load.get("fun") == "saltutil.find_job"):
                continue
            out[jid] = format_job(jid, load, minions=False)
        return dict(sorted(out.items()))

    def jobs_master(master: RunnerContext) -> list[Any]:
        """The runners running on the master: none (raetsalt's runners answer at once)."""
        return []

    return {
        "manage.versions": manage_versions,
        "jobs.last_run": jobs_last_run,
        "jobs.list_jobs_filter": jobs_list_jobs_filter,
        "jobs.master": jobs_master,
    }
