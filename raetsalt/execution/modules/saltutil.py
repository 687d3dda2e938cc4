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
