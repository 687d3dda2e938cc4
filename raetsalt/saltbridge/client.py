"""Salt's client API (``LocalClient``, ``RunnerClient``) over a raetsalt master.

Salt code that publishes or runs runners (the ``salt.state``/``salt.function``/
``salt.runner`` states of orchestrate call ``saltutil.cmd`` and ``saltutil.runner``,
which call ``salt.client.get_local_client`` and ``salt.runner.RunnerClient``) gets
these classes instead.  They speak raetsalt's command protocol (``raetsalt.protocol``:
``publish``/``pub_ack``/``job_ret`` and ``runner``/``run_ret``) over a connection the
caller opened (the lane or the master's command socket, ``raetsalt.cli._auth``) with
the caller's credentials (``auth``: eauth fields or a token, or nothing when the socket
says who is asking).  So every publication and runner they make is checked by the
master exactly as the same command typed on the command line (``publisher_acl``,
``external_auth``, the blacklist); a refusal raises Salt's ``SaltClientError`` (Salt's
``EauthAuthenticationError`` shape is not kept) with the master's reason.  As Salt's,
``cmd_iter`` does not give up on a minion at ``timeout`` while ``saltutil.find_job``
says it still runs the job (each such check restarts the wait).

Shapes are Salt's: ``cmd`` -> ``{minion: return}`` (``full_return``: ``{minion:
{ret, retcode, jid[, out]}}``); ``cmd_iter`` yields ``{minion: {ret, retcode, jid[,
out]}}`` as the returns come, and with ``expect_minions`` ``{minion: {failed: True}}``
for the targeted minions that did not return in time; ``RunnerClient.cmd`` -> the
runner's return (``full_return``: ``{return, success, jid}``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from raetsalt import protocol as p

DEFAULT_TIMEOUT = 5.0
ACK_TIMEOUT = 30.0
FIND_JOB_TIMEOUT = 5.0
"""How long a ``saltutil.find_job`` check waits (Salt's ``gather_job_timeout``)."""


class Connection(Protocol):
    """What the clients need of a master connection (``CommandClient``/``StreamClient``)."""

    def request(self, share: str, **fields: Any) -> str: ...

    def receive(self, timeout: float) -> list[dict[str, Any]]: ...


class ClientError(Exception):
    """The master refused or did not answer (raised as Salt's ``SaltClientError`` by
    the Salt-facing methods)."""


def _salt_error(text: str) -> Exception:
    try:
        import salt.exceptions
    except ImportError:
        return ClientError(text)
    error: Exception = salt.exceptions.SaltClientError(text)
    return error


class _Waiter:
    """The answers to the requests of one connection, sorted by request."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.queues: dict[str, list[dict[str, Any]]] = {}

    def next(self, req: str, shares: tuple[str, ...], deadline: float) -> dict[str, Any] | None:
        while True:
            queue = self.queues.setdefault(req, [])
            for index, body in enumerate(queue):
                if p.share_of(body) in shares:
                    del queue[: index + 1]
                    return body
            queue.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.queues.pop(req, None)
                return None
            for body in self.conn.receive(min(remaining, 1.0)):
                key = body.get("req")
                if isinstance(key, str) and key in self.queues:
                    self.queues[key].append(body)


class LocalClient:
    """Salt's ``salt.client.LocalClient`` over a raetsalt master connection."""

    def __init__(self, conn: Connection, auth: Mapping[str, Any] | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT, delimiter: str = ":") -> None:
        self.conn = conn
        self.auth = dict(auth or {})
        self.timeout = timeout
        self.delimiter = delimiter
        self._waiter = _Waiter(conn)
        self.opts: dict[str, Any] = {"timeout": timeout}

    # -- Salt's API -------------------------------------------------------------------

    def cmd_iter(self, tgt: Any, fun: str, arg: Any = (), timeout: float | None = None,
                 tgt_type: str = "glob", ret: str = "", kwarg: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> Iterator[dict[str, Any]]:
        wait = float(timeout) if timeout else self.timeout
        req, jid, expected = self._publish(tgt, tgt_type, fun, arg, kwarg, ret, wait, kwargs)
        start = time.monotonic()
        deadline = start + wait
        seen: set[str] = set()
        while not expected <= seen:
            body = self._waiter.next(req, (p.SHARE_JOB_RET,), deadline)
            if body is None:
                if (time.monotonic() - start < p.MAX_JOB_TTL
                        and self._still_running(jid, expected - seen)):
                    deadline = time.monotonic() + wait
                    continue
                break
            for minion, data in p.job_returns(body):
                if minion in seen:
                    continue
                seen.add(minion)
                yield {minion: _full(data, jid)}
        self._waiter.queues.pop(req, None)
        if kwargs.get("expect_minions"):
            for minion in sorted(expected - seen):
                yield {minion: {"failed": True}}

    def cmd(self, tgt: Any, fun: str, arg: Any = (), timeout: float | None = None,
            tgt_type: str = "glob", ret: str = "", jid: str = "", full_return: bool = False,
            kwarg: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for item in self.cmd_iter(tgt, fun, arg, timeout, tgt_type, ret, kwarg, **kwargs):
            for minion, data in item.items():
                if "failed" in data:
                    continue
                out[minion] = data if full_return else data.get("ret")
        return out

    def cmd_async(self, tgt: Any, fun: str, arg: Any = (), tgt_type: str = "glob",
                  ret: str = "", jid: str = "", kwarg: Mapping[str, Any] | None = None,
                  **kwargs: Any) -> str:
        """Publish and return the jid without waiting (Salt returns 0 on failure)."""
        try:
            return self._publish(tgt, tgt_type, fun, arg, kwarg, ret, self.timeout, kwargs)[1]
        except Exception:  # noqa: BLE001 - Salt's cmd_async answers 0 for any failure
            return "0"

    def run_job(self, tgt: Any, fun: str, arg: Any = (), tgt_type: str = "glob",
                ret: str = "", timeout: float | None = None, jid: str = "",
                kwarg: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        wait = float(timeout) if timeout else self.timeout
        _req, pub_jid, expected = self._publish(tgt, tgt_type, fun, arg, kwarg, ret, wait,
                                                kwargs)
        return {"jid": pub_jid, "minions": sorted(expected)}

    def destroy(self) -> None:
        """The connection belongs to the caller; nothing to close here."""

    def __enter__(self) -> LocalClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # -- internals --------------------------------------------------------------------

    def _still_running(self, jid: str, minions: set[str]) -> bool:
        """Salt's ``find_job`` check: whether one of ``minions`` still runs ``jid`` (then
        the wait for returns starts again, as Salt's ``cmd_iter`` does)."""
        try:
            req, _jid, expected = self._publish(sorted(minions), "list", "saltutil.find_job",
                                                [jid], None, "", FIND_JOB_TIMEOUT, {})
        except Exception:  # noqa: BLE001 - refused or unanswered: nothing runs, as far as we know
            return False
        deadline = time.monotonic() + FIND_JOB_TIMEOUT
        running, seen = False, set[str]()
        while not expected <= seen:
            body = self._waiter.next(req, (p.SHARE_JOB_RET,), deadline)
            if body is None:
                break
            for minion, data in p.job_returns(body):
                seen.add(minion)
                running = running or bool(data.get("return"))
        self._waiter.queues.pop(req, None)
        return running

    def _publish(self, tgt: Any, tgt_type: str, fun: str, arg: Any,
                 kwarg: Mapping[str, Any] | None, ret: str, wait: float,
                 extra: Mapping[str, Any]) -> tuple[str, str, set[str]]:
        args = list(arg) if isinstance(arg, list | tuple) else [arg]
        packed = p.pack_args([a for a in args if not _is_kwarg(a)], {
            **{k: v for a in args if _is_kwarg(a) for k, v in a.items()
               if k != p.KWARG_MARK},
            **dict(kwarg or {})})
        req = self.conn.request(p.SHARE_PUBLISH, tgt=tgt, tgt_type=tgt_type, fun=fun,
                                arg=packed, delimiter=self.delimiter, ret=ret or "",
                                timeout=wait, **self.auth)
        self._waiter.queues[req] = []
        ack = self._waiter.next(req, (p.SHARE_PUB_ACK,),
                                time.monotonic() + max(ACK_TIMEOUT, wait))
        if ack is None:
            self._waiter.queues.pop(req, None)
            raise _salt_error("the raetsalt master did not acknowledge the publication")
        if "error" in ack:
            self._waiter.queues.pop(req, None)
            raise _salt_error(str(ack["error"]))
        expected = {str(m) for m in ack.get("minions") or []} | {
            str(m) for m in ack.get("missing") or []}
        return req, str(ack.get("jid") or ""), expected


class RunnerClient:
    """Salt's ``salt.runner.RunnerClient`` over a raetsalt master connection: the
    runners the raetsalt master has (``raetsalt.services.runners``)."""

    def __init__(self, conn: Connection, auth: Mapping[str, Any] | None = None, *,
                 timeout: float = 60.0) -> None:
        self.conn = conn
        self.auth = dict(auth or {})
        self.timeout = timeout
        self.functions: dict[str, Any] = {}
        """Salt looks names up here for their arguments; the master knows them."""
        self._waiter = _Waiter(conn)

    def cmd(self, fun: str, arg: Any = None, pub_data: Any = None,
            kwarg: Mapping[str, Any] | None = None, print_event: bool = True,
            full_return: bool = False) -> Any:
        args = list(arg) if isinstance(arg, list | tuple) else ([] if arg is None else [arg])
        req = self.conn.request(p.SHARE_RUNNER, fun=fun, arg=p.pack_args(args, dict(
            kwarg or {})), **self.auth)
        self._waiter.queues[req] = []
        answer = self._waiter.next(req, (p.SHARE_RUN_RET,), time.monotonic() + self.timeout)
        if answer is None:
            value: Any = f"the raetsalt master did not answer runner {fun!r} in time"
            success = False
        elif "error" in answer:
            value, success = str(answer["error"]), False
        else:
            value, success = answer.get("return"), True
        if not full_return:
            if not success:
                raise _salt_error(str(value))
            return value
        return {"return": value, "success": success, "jid": ""}


def _is_kwarg(value: Any) -> bool:
    return isinstance(value, dict) and value.get(p.KWARG_MARK) is True


def _full(data: Mapping[str, Any], jid: str) -> dict[str, Any]:
    full = {"ret": data.get("return"), "retcode": data.get("retcode", 0), "jid": jid}
    if "out" in data:
        full["out"] = data["out"]
    return full
