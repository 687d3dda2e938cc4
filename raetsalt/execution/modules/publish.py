"""Publish commands to other minions, or run runners, through the master (peer publishing).

The master decides with its ``peer`` and ``peer_run`` options, for the minion id its road
authenticated.  Unlike Salt, a refusal is not an empty ``{}``: the function fails with
``ERROR: ... denied: <why>`` (retcode 1, so ``raetsalt-call`` exits 1) naming the function,
the target and the reason, and the master logs it and fires
``raetsalt/peer/<id>/denied``.  Results come back as each minion returns; the call ends
as soon as every expected minion answered, or at ``timeout``.  When the master does not
answer at all within ``timeout``, the return is Salt's ``'<fun>' publish timed out`` (or
``runner publish timed out``) but with retcode 1, so ``raetsalt-call`` exits 1.

How the job reaches the master: the job runs in its own process, which opens a client
yard on its minion daemon's lane (as ``raetsalt-call`` does); the daemon relays the
request over its road session (``raetsalt.services.peer``).
"""

from __future__ import annotations

import time
from typing import Any

from raetsalt import protocol as p
from raetsalt.execution.args import parse_input, yamlify
from raetsalt.execution.loader import CommandExecutionError, Context

MASTERLESS = "No access to master. If using salt-call with --local, please remove."


def _parse_arg(arg: Any) -> list[Any]:
    """Salt's publish argument rules: a string is YAML (``'[a, b]'`` is two arguments),
    anything not a list becomes one argument; then each item goes through the command
    line's rules (``name=value`` strings are keyword arguments, strings are typed)."""
    if arg is None:
        return []
    if isinstance(arg, str):
        arg = yamlify(arg)
    items = arg if isinstance(arg, list) else [arg]
    return p.pack_args(*parse_input(items))


class _Answers:
    """The answers to one request, in order, however the client batches them."""

    def __init__(self, client: Any, req: str, deadline: float) -> None:
        self.client = client
        self.req = req
        self.deadline = deadline
        self.queue: list[dict[str, Any]] = []

    def next(self, share: str) -> dict[str, Any] | None:
        """The next answer with ``share``, or None at the deadline."""
        while True:
            for index, body in enumerate(self.queue):
                if p.share_of(body) == share:
                    del self.queue[: index + 1]
                    return body
            self.queue.clear()
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.queue = [b for b in self.client.receive(min(remaining, 1.0))
                          if b.get("req") == self.req]
            if not self.queue and not self.client.daemon_alive():
                raise CommandExecutionError("the raetsalt-minion daemon went away")


def _publish(ctx: Context, tgt: Any, fun: str, arg: Any, tgt_type: str, returner: str,
             timeout: Any) -> dict[str, dict[str, Any]] | str:
    if str(fun).startswith("publish."):
        raise CommandExecutionError(
            f"'{fun}' cannot be published: publish.* functions are never peer-published")
    if ctx.master_client is None:
        return {}
    wait = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else 5.0
    deadline = time.monotonic() + wait
    client = ctx.master_client()
    try:
        req = client.request(p.SHARE_PUBLISH, tgt=tgt, tgt_type=tgt_type, fun=fun,
                             arg=_parse_arg(arg), ret=returner or "", timeout=wait)
        answers = _Answers(client, req, deadline)
        ack = answers.next(p.SHARE_PUB_ACK)
        if ack is None:
            # Salt's text, but a failure: nothing answered (our loud-denial design).
            ctx.retcode = 1
            return f"'{fun}' publish timed out"
        if "error" in ack:
            raise CommandExecutionError(str(ack["error"]))
        expected = set(ack.get("minions") or [])
        returns: dict[str, dict[str, Any]] = {}
        while expected - set(returns):
            body = answers.next(p.SHARE_JOB_RET)
            if body is None:
                break
            returns.update(p.job_returns(body))
        return returns
    finally:
        client.close()


def publish(
    tgt: Any,
    fun: str,
    arg: Any = None,
    tgt_type: str = "glob",
    returner: str = "",
    timeout: Any = 5,
    via_master: Any = None,
    expr_form: str | None = None,
    *,
    ctx: Context,
) -> Any:
    """Publish ``fun`` to the minions ``tgt`` matches and return ``{minion: return}``.

    ``tgt_type`` is any target type (glob, pcre, list, grain, grain_pcre, pillar,
    ipcidr, compound, nodegroup...; ``expr_form`` is its old name).  ``arg`` is one
    argument, a list, or a YAML string (``'[a, b]'``); ``name=value`` items are keyword
    arguments.  Returns when every targeted minion answered, or after ``timeout``
    seconds with what came back.  Fails when the master refuses (its ``peer`` option).

    CLI example::

        raetsalt-call publish.publish 'web*' test.version
        raetsalt-call publish.publish 'web* and not G@os:Ubuntu' test.ping tgt_type=compound
    """
    result = _publish(ctx, tgt, fun, arg, expr_form or tgt_type, returner, timeout)
    if isinstance(result, str):
        return result
    return {minion: ret.get("return") for minion, ret in sorted(result.items())}


def full_data(
    tgt: Any,
    fun: str,
    arg: Any = None,
    tgt_type: str = "glob",
    returner: str = "",
    timeout: Any = 5,
    expr_form: str | None = None,
    *,
    ctx: Context,
) -> Any:
    """Like ``publish.publish`` but each minion's value is its whole return:
    ``{minion: {'ret': return, 'retcode': code[, 'out': outputter]}}``."""
    result = _publish(ctx, tgt, fun, arg, expr_form or tgt_type, returner, timeout)
    if isinstance(result, str):
        return result
    out: dict[str, Any] = {}
    for minion, ret in sorted(result.items()):
        data = {"ret": ret.get("return"), "retcode": ret.get("retcode", 0)}
        if "out" in ret:
            data["out"] = ret["out"]
        out[minion] = data
    return out


def runner(fun: str, arg: Any = None, timeout: Any = 5, *, ctx: Context) -> Any:
    """Run runner ``fun`` on the master and return its result (the master's
    ``peer_run`` option decides).

    CLI example::

        raetsalt-call publish.runner manage.up
    """
    if ctx.master_client is None:
        return MASTERLESS
    wait = float(timeout) if isinstance(timeout, int | float) and timeout > 0 else 5.0
    deadline = time.monotonic() + wait
    client = ctx.master_client()
    try:
        req = client.request(p.SHARE_RUNNER, fun=fun, arg=_parse_arg(arg), timeout=wait)
        reply = _Answers(client, req, deadline).next(p.SHARE_RUN_RET)
    finally:
        client.close()
    if reply is None:
        ctx.retcode = 1
        return f"'{fun}' runner publish timed out"
    if "error" in reply:
        raise CommandExecutionError(str(reply["error"]))
    return reply.get("return")
