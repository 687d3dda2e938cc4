"""The part of Salt's client API the reactor needs, backed by a running raetsalt master.

Salt's names and call shapes, over the master's lane (the user must be able to use the
master's ``sock_dir``: root or the master's user, as for Salt's ``LocalClient``)::

    from raetsalt.clients import LocalClient, RunnerClient, WheelClient
    local = LocalClient(opts)                   # a master config dict: sock_dir, timeout
    jid = local.cmd_async('web*', 'cmd.run', ['uptime'])   # '' when nothing matched
    local.cmd('web*', 'test.ping')              # {'web1': True, ...} (who returned)
    RunnerClient(opts).cmd('manage.up')         # ['web1', ...]
    WheelClient(opts).cmd('key.accept', match='web*')      # {'minions': ['web3']}

Errors: ``DaemonUnavailable`` when the master cannot be reached or does not answer,
``ClientError`` when it refuses (the text is the master's).  Differences from Salt: the
jid of ``cmd_async`` is ``''`` (Salt: ``0``) when no minion matched; ``WheelClient`` has
the key functions only (``key.accept``, ``key.reject``, ``key.delete``, ``key.list_all``).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Mapping, Sequence
from typing import Any

from raetsalt import protocol as p
from raetsalt.errors import DaemonUnavailable, RaetSaltError

__all__ = ["ANSWER_TIMEOUT", "ClientError", "LocalClient", "RunnerClient", "WheelClient"]

ANSWER_TIMEOUT = 10.0
"""Seconds to wait for the master to acknowledge a request."""


class ClientError(RaetSaltError):
    """The master refused the request."""


class _Client:
    def __init__(self, opts: Mapping[str, Any], *, client: Any = None) -> None:
        self.opts = opts
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            from raetsalt.drivers.laneclient import CommandClient

            self._client = CommandClient("master", str(self.opts["sock_dir"]))
        return self._client

    def ask(self, share: str, answer: str, **fields: Any) -> dict[str, Any]:
        req = self.client.request(share, **fields)
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            for body in self.client.receive(left):
                if body.get("req") == req and p.share_of(body) == answer:
                    return dict(body)
        raise DaemonUnavailable(f"the master did not answer within {ANSWER_TIMEOUT:g} s")

    def destroy(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def _args(arg: Sequence[Any] | None, kwarg: Mapping[str, Any] | None) -> list[Any]:
    return p.pack_args(list(arg or ()), dict(kwarg or {}))


class LocalClient(_Client):
    """Salt's ``salt.client.LocalClient``: publish jobs to minions."""

    def _publish(self, tgt: Any, fun: str, arg: Sequence[Any] | None, tgt_type: str,
                 ret: str, timeout: float | None, kwarg: Mapping[str, Any] | None,
                 **extra: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": _args(arg, kwarg),
            "delimiter": extra.get("delimiter", ":"),
            "timeout": timeout or float(self.opts.get("timeout", 5))}
        if ret:
            fields["ret"] = ret
        for key in ("ret_config", "ret_kwargs"):
            if extra.get(key):
                fields[key] = extra[key]
        ack = self.ask(p.SHARE_PUBLISH, p.SHARE_PUB_ACK, **fields)
        if "error" in ack:
            raise ClientError(str(ack["error"]))
        return ack

    def cmd_async(self, tgt: Any, fun: str, arg: Sequence[Any] | None = (),
                  tgt_type: str = "glob", ret: str = "",
                  kwarg: Mapping[str, Any] | None = None, **kwargs: Any) -> str:
        """Publish and return the jid at once (``''`` when no minion matched)."""
        ack = self._publish(tgt, fun, arg, tgt_type, ret, kwargs.pop("timeout", None),
                            kwarg, **kwargs)
        return str(ack.get("jid") or "")

    def cmd(self, tgt: Any, fun: str, arg: Sequence[Any] | None = (),
            timeout: float | None = None, tgt_type: str = "glob", ret: str = "",
            kwarg: Mapping[str, Any] | None = None, full_return: bool = False,
            **kwargs: Any) -> dict[str, Any]:
        """Publish, wait for the returns (``timeout``, default the master's) and return
        ``{minion: return}`` of those that returned (``full_return``: whole returns)."""
        wait = timeout or float(self.opts.get("timeout", 5))
        ack = self._publish(tgt, fun, arg, tgt_type, ret, wait, kwarg, **kwargs)
        expected = {str(m) for m in ack.get("minions") or []}
        expected -= {str(m) for m in ack.get("not_connected") or []}
        out: dict[str, Any] = {}
        deadline = time.monotonic() + wait
        while expected - set(out) and (left := deadline - time.monotonic()) > 0:
            for body in self.client.receive(left):
                if body.get("req") != ack.get("req") or p.share_of(body) != p.SHARE_JOB_RET:
                    continue
                for minion, one in p.job_returns(body):
                    out.setdefault(minion, one if full_return else one.get("return"))
        return out


class RunnerClient(_Client):
    """Salt's ``salt.runner.RunnerClient``: raetsalt's runners on the master."""

    def cmd(self, fun: str, arg: Sequence[Any] | None = None,
            kwarg: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        reply = self.ask(p.SHARE_RUNNER, p.SHARE_RUN_RET, fun=fun,
                         arg=_args(arg, {**dict(kwarg or {}), **kwargs}))
        if "error" in reply:
            raise ClientError(str(reply["error"]))
        return reply.get("return")


class WheelClient(_Client):
    """Salt's ``salt.wheel.WheelClient``, its key functions: the key decisions go to the
    running master as ``raetsalt-key`` sends them."""

    _ACTIONS = {"key.accept": "accept", "key.reject": "reject", "key.delete": "delete"}

    def cmd(self, fun: str, arg: Sequence[Any] | None = None,
            kwarg: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        from raetsalt.keep import listing as keytool
        from raetsalt.keep.store import FileKeep
        from raetsalt.paths import keep_dir

        kwargs = {**dict(kwarg or {}), **kwargs}
        keep = FileKeep(keep_dir(dict(self.opts)))
        entries = keytool.snapshot(keep)
        if fun == "key.list_all":
            return keytool.id_lists(entries, keytool.STATUSES)
        action = self._ACTIONS.get(fun)
        if action is None:
            raise ClientError(f"wheel function {fun!r} is not available (key.accept, "
                              "key.reject, key.delete and key.list_all are)")
        match = kwargs.get("match", list(arg)[0] if arg else None)
        if isinstance(match, list):
            match = ",".join(str(m) for m in match)
        if not isinstance(match, str) or not match:
            raise ClientError(f"wheel {fun} needs 'match'")
        statuses: tuple[str, ...] = {"accept": (keytool.PRE,), "reject": (keytool.PRE,),
                                     "delete": keytool.STATUSES}[action]
        if kwargs.get("include_rejected") and action == "accept":
            statuses = (*statuses, keytool.REJ)
        if kwargs.get("include_denied") and action == "accept":
            statuses = (*statuses, keytool.DEN)
        if kwargs.get("include_accepted") and action == "reject":
            statuses = (*statuses, keytool.ACC)
        chosen = [e for e in entries if e.status in statuses and any(
            fnmatch.fnmatchcase(e.id, m) for m in match.split(","))]
        if not chosen:
            return {}
        reply = self.ask("key", "key_ret", action=action,
                         keys=[entry.wire() for entry in chosen])
        if isinstance(reply.get("error"), str):
            raise ClientError(reply["error"])
        stale = {i for i in reply.get("stale", ()) if isinstance(i, int)}
        return {"minions": sorted(e.id for n, e in enumerate(chosen) if n not in stale)}
