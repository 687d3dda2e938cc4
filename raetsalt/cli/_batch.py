"""``raetsalt -b N`` / ``-b N%``: Salt's batch mode, driven from the command line.

1. The target is pinged (``test.ping``, waiting ``-t``): the minions that answer take
   part; each expected one that does not is named (``Minion X did not respond. No job
   will be sent.``).
2. The job then runs on at most N of them at a time (``N%``: that share of the answering
   minions, at least one): whenever slots are free the next minions (in id order) get
   the job together, announced as ``\\nExecuting run on ['m1', 'm2']\\n``.  Each return
   prints as it arrives, as Salt 3008 prints it: the minion's return beside the
   ``jid`` and ``retcode`` of its job (``{m1: ..., jid: ..., retcode: 0}``, with the
   return's outputter).  A minion is waited for as long as it says it still runs the
   job (``raetsalt.services.progress``), and ``-t`` seconds after it last did; one that
   does not return is printed as ``Minion did not return. [No response]`` (unless
   ``--hide-timeout``).  A slot frees when its minion returned or was given up, plus
   ``--batch-wait`` seconds.  With ``--failhard`` the first non-zero retcode stops the
   batch: no more sub-batches, and ``[ERROR   ] Batch run stopped due to failhard`` on
   stderr.
3. The exit code is the largest retcode returned, and at least 1 when a minion did not
   answer the ping or did not return; 2 when no minion answered the ping (``ERROR: No
   return received``).

As in Salt, every sub-batch is published under one jid (the first sub-batch's: the
master lets only the client that started a batch add to it), so ``jobs.lookup_jid``
shows the whole run.  Unlike Salt, a minion that did not return is printed and counted
(Salt prints nothing for it and exits 0).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

from raetsalt import protocol as p
from raetsalt.services.progress import alive_untrusted

from ._auth import MasterClient
from ._common import EX_CLIENT, EX_GENERIC, EX_OK, Printer
from ._publish import Command, Publication, no_return, publish, retcode_of

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
    answered = sorted(m for m, ret in ping.returns(time.monotonic() + timeout, timeout)
                      if ret.get("return") is True)
    return answered, sorted(ping.expected - set(answered))


@dataclass(slots=True)
class _Slot:
    """A minion running its sub-batch's job."""

    jid: str
    until: float
    """When it is reported as not returned (monotonic; later with each beat)."""


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
    active: dict[str, _Slot] = {}
    jobs: dict[str, Publication] = {}  # req -> sub-batch
    cooling: list[float] = []  # when the slots of finished minions free up
    stash: list[dict[str, Any]] = []  # returns that came while a publication was made
    worst = EX_GENERIC if down else EX_OK
    halted = False
    batch_jid = ""  # the job every sub-batch is published under (its first one's jid)

    def finished(who: str, shown: Any, out: str | None, code: int, raw: Any = None) -> None:
        nonlocal worst, halted
        slot = active.pop(who)
        worst = max(worst, code)
        # Salt's order: the return's retcode (as the minion sent it), its jid, the return.
        printer.show({"retcode": code if raw is None else raw, "jid": slot.jid, who: shown},
                     out, code)
        cooling.append(time.monotonic() + wait)
        halted |= bool(args.failhard) and code != EX_OK

    while (pending and not halted) or active:
        now = time.monotonic()
        cooling = [t for t in cooling if t > now]
        free = size - len(active) - len(cooling)
        if free > 0 and pending and not halted:
            chosen, pending = pending[:free], pending[free:]
            print(f"\nExecuting run on {sorted(chosen)}\n", flush=True)
            sub = publish(client, chosen, "list", command.fun, command.arg, args, timeout,
                          auth, stash=stash, batch=batch_jid)
            batch_jid = batch_jid or sub.jid
            jobs[sub.req] = sub
            stash.extend(sub.early)  # its own first returns
            until = time.monotonic() + timeout
            for minion in sorted(sub.expected or chosen):
                active[minion] = _Slot(sub.jid, until)
            for minion in sorted(sub.not_connected & set(active)):
                finished(minion, no_return(sub.jid, False)["return"], None, EX_GENERIC)
            continue
        wake = min([*(s.until for s in active.values()), *(cooling if pending else [])],
                   default=now)
        bodies, stash = stash or client.receive(max(0.0, wake - now)), []
        for body in bodies:
            if str(body.get("req")) not in jobs or p.share_of(body) != p.SHARE_JOB_RET:
                continue
            later = time.monotonic() + timeout
            for who in alive_untrusted(body):
                if who in active:
                    active[who].until = max(active[who].until, later)
            for who, ret in p.job_returns(body):
                if who in active:
                    finished(who, ret.get("return"), ret.get("out"), retcode_of(ret),
                             ret.get("retcode", 0))
            if halted:
                break
        if halted:
            break
        now = time.monotonic()
        for minion in sorted(m for m, slot in active.items() if slot.until <= now):
            jid = active[minion].jid
            if args.hide_timeout:
                active.pop(minion)
                cooling.append(now + wait)
                worst = max(worst, EX_GENERIC)
            else:
                finished(minion, no_return(jid, True)["return"], None, EX_GENERIC)
    if halted:
        print("[ERROR   ] Batch run stopped due to failhard", file=sys.stderr, flush=True)
    return worst
