"""``raetsalt -b N`` / ``-b N%``: Salt's batch mode, driven from the command line.

1. The target is pinged (``test.ping``, waiting ``-t``): the minions that answer take
   part; each expected one that does not is named (``Minion X did not respond. No job
   will be sent.``).
2. The job then runs on at most N of them at a time (``N%``: that share of the answering
   minions, at least one): whenever slots are free the next minions (in id order) get
   the job together, announced as ``\\nExecuting run on ['m1', 'm2']\\n``; returns print as
   they arrive.  A slot frees when its minion returns, or when the job's ``-t`` ran out
   for it, plus ``--batch-wait`` seconds.
3. The exit code is the largest retcode returned; 2 when no minion answered the ping
   (``ERROR: No return received``).

Unlike Salt, each sub-batch is its own job (jid); Salt reuses one jid for all of them.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from raetsalt import protocol as p

from ._auth import MasterClient
from ._common import EX_CLIENT, EX_OK, Printer
from ._publish import Command, Publication, publish, retcode_of

__all__ = ["batch_size", "run_batch"]


class BatchSpecError(ValueError):
    """``-b`` is neither a count nor a percentage."""


def batch_size(spec: str, minions: int) -> int:
    """How many minions run at once for ``-b spec`` (Salt's rule)."""
    try:
        if "%" in spec:
            share = float(spec.strip("%")) / 100.0 * minions
            size = math.ceil(share) if share < 1 else int(share)
        else:
            size = int(spec)
    except (ValueError, OverflowError):  # not a number, or an infinite share
        raise BatchSpecError(spec) from None
    if not math.isfinite(float(size)) or size < 0:
        raise BatchSpecError(spec)
    return max(1, size)


def _gather(client: MasterClient, args: argparse.Namespace, command: Command,
            timeout: float, auth: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(minions that answered the ping, expected minions that did not)."""
    ping = publish(client, command.tgt, args.tgt_type or "glob", "test.ping", [], args,
                   timeout, auth)
    if not ping.minions or not ping.jid:
        return [], []
    answered = sorted(m for m, ret in ping.returns(time.monotonic() + timeout)
                      if ret.get("return") is True)
    return answered, sorted(ping.expected - set(answered))


def run_batch(client: MasterClient, args: argparse.Namespace, command: Command,
              timeout: float, auth: dict[str, Any], printer: Printer) -> int:
    minions, down = _gather(client, args, command, timeout, auth)
    for minion in down:
        print(f"Minion {minion} did not respond. No job will be sent.", flush=True)
    if not minions:
        print("ERROR: No return received", file=sys.stderr)
        return EX_CLIENT
    try:
        size = batch_size(args.batch, len(minions))
    except BatchSpecError:
        print(f"Invalid batch data sent: {args.batch}\nData must be in the form of %10, "
              "10% or 3", flush=True)
        return EX_CLIENT
    wait = max(0.0, args.batch_wait or 0.0)
    pending = list(minions)
    active: dict[str, float] = {}  # minion -> when its job's time is up (monotonic)
    jobs: dict[str, Publication] = {}  # req -> sub-batch
    cooling: list[float] = []  # when the slots of finished minions free up
    stash: list[dict[str, Any]] = []  # returns that came while a publication was made
    worst = EX_OK
    while pending or active:
        now = time.monotonic()
        cooling = [t for t in cooling if t > now]
        free = size - len(active) - len(cooling)
        if free > 0 and pending:
            chosen, pending = pending[:free], pending[free:]
            print(f"\nExecuting run on {sorted(chosen)}\n", flush=True)
            sub = publish(client, chosen, "list", command.fun, command.arg, args, timeout,
                          auth, stash=stash)
            jobs[sub.req] = sub
            stash.extend(sub.early)  # its own first returns
            active.update(dict.fromkeys(sub.expected or chosen, time.monotonic() + timeout))
            continue
        wake = min([*active.values(), *(cooling if pending else [])], default=now)
        bodies, stash = stash or client.receive(max(0.0, wake - now)), []
        for body in bodies:
            if str(body.get("req")) not in jobs or p.share_of(body) != p.SHARE_JOB_RET:
                continue
            for who, ret in p.job_returns(body):
                if who not in active:
                    continue
                del active[who]
                code = retcode_of(ret)
                worst = max(worst, code)
                printer.show({who: ret.get("return")}, ret.get("out"), code)
                cooling.append(time.monotonic() + wait)
        now = time.monotonic()
        for minion in [m for m, until in active.items() if until <= now]:
            del active[minion]  # its time is up: nothing is printed, as in Salt's batch mode
            cooling.append(now + wait)
    return worst
