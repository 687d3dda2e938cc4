"""Publishing one job through the master from the command line and reading its returns
(``raetsalt`` and its batch mode, ``raetsalt.cli._batch``, both use it)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from raetsalt import protocol as p
from raetsalt.services.progress import alive_untrusted

from ._auth import MasterClient
from ._common import EX_GENERIC, wait_for
from ._returners import returner_fields


@dataclass(slots=True)
class Command:
    """What to run, from the words after the options."""

    tgt: Any
    fun: str
    arg: list[Any] = field(default_factory=list)


def retcode_of(ret: dict[str, Any]) -> int:
    """Salt's exit code of one minion's return (the largest of a comma command's)."""
    code = ret.get("retcode", 0)
    if isinstance(code, dict):
        return max([0, *(c for c in code.values() if isinstance(c, int))])
    return code if isinstance(code, int) else EX_GENERIC


def no_return(jid: str, connected: bool) -> dict[str, Any]:
    if not connected:
        return {"return": "Minion did not return. [Not connected]", "retcode": EX_GENERIC}
    return {
        "return": "Minion did not return. [No response]\nThe minions may not have all "
        "finished running and any remaining minions will return upon completion. To look "
        "up the return data for this job later, run the following command:\n\n"
        f"raetsalt-run jobs.lookup_jid {jid}",
        "retcode": EX_GENERIC,
    }


@dataclass(slots=True)
class Publication:
    """One job published through the master, and the returns that come back for it."""

    client: MasterClient
    req: str
    jid: str
    minions: list[str]
    not_connected: set[str]
    expected: set[str]
    early: list[dict[str, Any]] = field(default_factory=list)
    """Messages that came with the acknowledgement (returns may)."""

    def returns(self, deadline: float, patience: float = 0.0
                ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(minion, return)`` as they arrive, each minion once, until all expected
        minions returned or the wait for each one left ran out: ``deadline``
        (monotonic), or ``patience`` seconds after it last said it still runs the job
        (``raetsalt.services.progress``), whichever is later."""
        seen: set[str] = set()
        until = dict.fromkeys(self.expected, deadline)
        while not self.expected <= seen:
            now = time.monotonic()
            remaining = max([until[m] for m in self.expected - seen], default=now) - now
            if remaining <= 0 and not self.early:
                return
            bodies, self.early = self.early or self.client.receive(max(0.0, remaining)), []
            for body in bodies:
                if body.get("req") != self.req or p.share_of(body) != p.SHARE_JOB_RET:
                    continue
                if patience > 0:
                    later = time.monotonic() + patience
                    for minion in alive_untrusted(body):
                        if minion in until and minion not in seen:
                            until[minion] = max(until[minion], later)
                for minion, ret in p.job_returns(body):
                    if minion not in seen:
                        seen.add(minion)
                        yield minion, ret


class Refused(Exception):
    """The master refused the publication (a bad target, a denial); the text is its."""


def publish(client: MasterClient, tgt: Any, tgt_type: str, fun: str, arg: list[Any],
            args: argparse.Namespace, timeout: float, auth: dict[str, Any], *,
            preview: bool = False, stash: list[dict[str, Any]] | None = None,
            batch: str | None = None) -> Publication:
    """Publish through the master and wait for its acknowledgement (raises ``Refused``);
    messages that arrive meanwhile are kept: this job's returns in the publication, the
    others in ``stash`` (when given).  ``batch``: a sub-batch of a batch run, under the
    jid of its first sub-batch (``""`` for the first)."""
    batching: dict[str, Any] = {} if batch is None else (
        {"jid": batch} if batch else {"batch": True})
    req = client.request(p.SHARE_PUBLISH, tgt=tgt, tgt_type=tgt_type, fun=fun, arg=arg,
                         delimiter=args.delimiter, preview=preview, timeout=timeout,
                         **batching, **returner_fields(args), **auth)
    # A PAM login may take seconds (its failure delay) before the master answers.
    early: list[dict[str, Any]] = []
    ack = wait_for(client, req, p.SHARE_PUB_ACK, 30.0 if "password" in auth else 10.0,
                   early)
    if stash is not None:
        stash.extend(b for b in early if b.get("req") != req)
    if "error" in ack:
        raise Refused(str(ack["error"]))
    minions = [str(m) for m in ack.get("minions") or []]
    missing = {str(m) for m in ack.get("missing") or []}
    return Publication(client, req, str(ack.get("jid") or ""), minions,
                       {str(m) for m in ack.get("not_connected") or []} | missing,
                       set(minions) | missing, [b for b in early if b.get("req") == req])
