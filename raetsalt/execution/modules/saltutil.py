"""Jobs running on the minion."""

from __future__ import annotations

from typing import Any

from raetsalt.execution.loader import Context


def running(*, ctx: Context) -> list[dict[str, Any]]:
    """Return the jobs running on this minion (jid, fun, arg, pid, tgt...)."""
    return ctx.jobs()


def find_job(jid: str, *, ctx: Context) -> dict[str, Any]:
    """Return the running job with ``jid``, or ``{}`` if it is not running here."""
    return next((job for job in ctx.jobs() if str(job.get("jid")) == str(jid)), {})


def kill_job(jid: str, *, ctx: Context) -> bool:
    """Stop the running job with ``jid``; True if it was running here."""
    return ctx.kill_job(str(jid))


def refresh_grains(*, ctx: Context) -> bool:
    """Recompute this minion's grains and report them to the master (for targeting)."""
    ctx.extras["refresh_grains"] = True
    return True


def sync_grains(saltenv: Any = None, refresh: bool = True, *, ctx: Context) -> list[str]:
    """Salt syncs custom grain modules from the master here; raetsalt has none to sync,
    so this only refreshes the grains (with ``refresh``) and returns the synced modules:
    ``[]``."""
    if refresh:
        ctx.extras["refresh_grains"] = True
    return []
