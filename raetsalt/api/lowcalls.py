"""Runner and wheel calls of Salt's ``RunnerClient``/``WheelClient``, and the token calls
of Salt's ``salt.auth.Resolver`` (``mk_token``, ``get_token``), on Salt's local
request channel (``raetsalt.saltbridge.localreq``, which is given ``LowCalls`` as its
call handler by ``raetsalt.api.saltclients``): each runs in a worker thread and its
answer goes back to the channel's thread through ``done``.

Salt's clients send their low data with ``cmd: runner`` or ``cmd: wheel`` and the
caller's credentials at the top level (``eauth``/``username``/``password``, or
``token``; a key written for root or the master's user also passes).  Who may do what
is decided as for the command line and the REST API.  eauth credentials become a
token on the master (``mk_token``, as ``raetsalt -a`` does; removed after the call), and
the token's rules are checked here with the master's rules (``raetsalt.api.auth``):

* runner: kind ``runner``; then the answer ``{tag: salt/run/<jid>, jid}`` goes at once,
  as Salt's, ``salt/run/<jid>/new`` is fired, the runner goes over the master's lane as
  ``raetsalt-run`` sends it (with the token: the master decides again and runs it), and
  ``salt/run/<jid>/ret`` is fired with its return, where ``cmd_sync`` waits for it;
* wheel: kind ``wheel``; the function runs as the REST API runs it
  (``raetsalt.api.wheel``: the ``key`` module, key changes as the master's key
  commands).  The answer is Salt's ``{tag: salt/wheel/<jid>, data: {fun, jid, tag,
  user, _stamp, return, success}}``.

* mk_token: an eauth login, as above, whose token is kept and given in Salt's shape
  (``{start, expire, name, eauth, token}``, with ``groups`` and ``auth_list`` when the
  master stored them); a failed login is Salt's ``""``;
* get_token: the record of a valid token in that shape, else Salt's ``{}``.

A key holder is unrestricted, as that user on the command line.
A failed login or a refusal is Salt's error shape with Salt's names
(``EauthAuthenticationError``, ``TokenAuthenticationError``); a runner or wheel
function that fails is ``success: False`` with the master's text as its return.
At most ``MAX_CALLS`` calls wait or run at once (more are answered "busy").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from raetsalt import protocol as p
from raetsalt.api.auth import TokenInfo, Tokens
from raetsalt.api.lowstate import RESERVED, low_arguments
from raetsalt.api.master import Credentials, MasterLink, MasterTimeout, Refused
from raetsalt.api.wheel import Wheel, WheelError
from raetsalt.cli._common import wire_safe
from raetsalt.errors import DaemonUnavailable
from raetsalt.log import clip
from raetsalt.saltbridge.localreq import Done, auth_error, auth_type
from raetsalt.services.jids import new_jid
from raetsalt.timefmt import salt_stamp

log = logging.getLogger("raetsalt.saltbus")

MAX_CALLS = 64
WORKERS = 8
MAX_LOGINS = 4
"""Calls with eauth credentials at once: the master holds back a failed login's answer,
so bad passwords may hold at most these workers."""
RUNNER_WAIT = 300.0
"""Longest wait for a runner's answer (Salt's ``rest_timeout``)."""
_NOT_ARGS = RESERVED | {"cmd", "key", "user", "print_event", "login_client"}

class CallError(Exception):
    """Ends a call with this answer (Salt's error shape or a plain text)."""

    def __init__(self, answer: Any) -> None:
        super().__init__(str(answer))
        self.answer = answer


def packed(load: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments of a low chunk (``arg``, ``kwarg`` and any
    other key that is not Salt's own), typed as the command line types them."""
    inner = {k: v for k, v in load.items() if not str(k).startswith("__")}
    try:
        return low_arguments(inner, _NOT_ARGS)
    except ValueError as exc:
        raise CallError(str(exc)) from None


def runner_args(load: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A runner's arguments as Salt's ``RunnerClient`` sends them (already checked
    against the function there): ``kwarg: {arg: [...], kwarg: {...}}``."""
    inner = load.get("kwarg") or {}
    if not isinstance(inner, Mapping):
        raise CallError("kwarg must be a mapping")
    arg, kwarg = inner.get("arg") or [], inner.get("kwarg") or {}
    if not isinstance(arg, list) or not isinstance(kwarg, Mapping):
        raise CallError("kwarg must be {arg: [...], kwarg: {...}}")
    positional, kwargs = wire_safe((arg, {str(k): v for k, v in kwarg.items()
                                          if not str(k).startswith("__")}))
    return list(positional), dict(kwargs)


def token_data(info: TokenInfo | None) -> dict[str, Any]:
    """A token as Salt's ``mk_token``/``get_token`` give it (``{}``: no valid token)."""
    if info is None:
        return {}
    data: dict[str, Any] = {"start": info.start, "expire": info.expire, "name": info.name,
                            "eauth": info.eauth, "token": info.token}
    if info.groups:
        data["groups"] = list(info.groups)
    if info.auth_list is not None:
        data["auth_list"] = list(info.auth_list)
    return data


class LowCalls:
    """The worker threads and the master link they share."""

    def __init__(self, opts: Mapping[str, Any], done: Done) -> None:
        self.opts = opts
        self.done = done
        self.link = MasterLink(opts)
        self.tokens = Tokens(opts)
        self.wheel = Wheel(opts, self.link)
        self._slots = threading.BoundedSemaphore(MAX_CALLS)
        self._logins = threading.BoundedSemaphore(MAX_LOGINS)
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="salt-lowcall")

    def submit(self, identity: list[bytes], cmd: str, load: dict[str, Any],
               credentials: dict[str, Any], user: str) -> bool:
        """Start a call; False when ``MAX_CALLS`` (``MAX_LOGINS`` with eauth) are under
        way."""
        login = "eauth" in credentials
        if login and not self._logins.acquire(blocking=False):
            return False
        if not self._slots.acquire(blocking=False):
            if login:
                self._logins.release()
            return False
        try:
            self._pool.submit(self._run, identity, cmd, load, credentials, user)
        except RuntimeError:  # shut down
            self._slots.release()
            if login:
                self._logins.release()
            return False
        return True

    def _run(self, identity: list[bytes], cmd: str, load: dict[str, Any],
             credentials: dict[str, Any], user: str) -> None:
        answered = [False]
        login = ["eauth" in credentials]

        def answer(value: Any) -> None:
            answered[0] = True
            if login[0]:  # a runner's login is over when it is answered
                login[0] = False
                self._logins.release()
            self.done(identity, value)

        made: list[str] = []
        try:
            if cmd == "mk_token":
                answer(self._mk_token(credentials))
                return
            if cmd == "get_token":
                answer(token_data(self.tokens.get(credentials.get("token"))))
                return
            fun = load.get("fun")
            if not isinstance(fun, str) or not fun or len(fun) > 256:
                raise CallError({"error": {"name": "SaltInvocationError",
                                           "message": "'fun' must be a function name"}})
            if cmd == "runner":
                self._runner(fun, load, credentials, user, made, answer)
            else:
                answer(self._wheel(fun, load, credentials, user, made))
        except CallError as exc:
            value: Any = exc.answer
        except (DaemonUnavailable, MasterTimeout) as exc:
            value = f"the raetsalt master: {exc}"
        except Exception:  # noqa: BLE001 - a worker must answer and live on
            log.exception("Salt's local request channel: %s %s failed", cmd,
                          clip(load.get("fun")))
            value = f"the {cmd} call failed on the raetsalt master"
        else:
            value = None
        finally:
            for token in made:
                self.tokens.remove(token)
            self._slots.release()
            if login[0]:
                self._logins.release()
        if not answered[0]:
            self.done(identity, value)

    def _login(self, credentials: Mapping[str, Any], made: list[str]) -> TokenInfo:
        """The caller's token record: their token, or one the master makes for their
        eauth login (put in ``made``, removed after the call); Salt's refusal if none."""
        kind = auth_type(credentials)
        token = credentials.get("token")
        if kind == "eauth":
            if not all(credentials.get(k) for k in ("eauth", "username", "password")):
                raise CallError(auth_error(kind))
            try:
                token = str(self.link.login(
                    str(credentials["eauth"]), str(credentials["username"]),
                    str(credentials["password"]),
                    str(credentials.get("login_client", "")))["token"])
            except Refused:
                raise CallError(auth_error(kind)) from None
            made.append(token)
        info = self.tokens.get(token)
        if info is None:
            raise CallError(auth_error(kind))
        return info

    def _mk_token(self, credentials: Mapping[str, Any]) -> Any:
        """Salt's ``mk_token``: the new token's record (kept: the caller goes on with
        it), or Salt's ``""`` when the login fails."""
        if "eauth" not in credentials:
            return ""
        try:
            return token_data(self._login(credentials, []))
        except CallError:
            return ""

    # -- runner ---------------------------------------------------------------------------

    def _runner(self, fun: str, load: Mapping[str, Any], credentials: Mapping[str, Any],
                user: str, made: list[str], answer: Callable[[Any], None]) -> None:
        """Authorize (as the master will), answer ``{tag, jid}`` at once as Salt does,
        then have the master run it and fire its events."""
        positional, kwargs = runner_args(load)
        arg = p.pack_args(positional, kwargs)
        fields: dict[str, Any] = {}
        if credentials:
            info = self._login(credentials, made)
            user = info.name
            if not self.tokens.check_runner(info, fun, arg).allowed:
                raise CallError(auth_error(auth_type(credentials), user))
            fields = {"token": info.token}
        jid = new_jid(datetime.now(UTC))
        tag = f"salt/run/{jid}"
        base = {"fun": f"runner.{fun}", "jid": jid, "user": user,
                "fun_args": [*positional, kwargs] if kwargs else positional}
        self.link.fire(f"{tag}/new", {**base, "_stamp": salt_stamp(datetime.now(UTC))})
        answer({"tag": tag, "jid": jid})
        try:
            lane, req = self.link.request(p.SHARE_RUNNER, fun=fun, arg=arg, **fields)
            reply = self.link.answer(lane, req, p.SHARE_RUN_RET, RUNNER_WAIT)
            error = reply.get("error")
            value = str(error) if error is not None else reply.get("return")
        except (DaemonUnavailable, MasterTimeout) as exc:
            error, value = exc, f"the raetsalt master: {exc}"
        self.link.fire(f"{tag}/ret", {**base, "_stamp": salt_stamp(datetime.now(UTC)),
                                      "return": value, "success": error is None})

    # -- wheel ----------------------------------------------------------------------------

    def _wheel(self, fun: str, load: Mapping[str, Any], credentials: Mapping[str, Any],
               user: str, made: list[str]) -> dict[str, Any]:
        auth = None
        if credentials:
            info = self._login(credentials, made)
            user = info.name
            positional, kwargs = packed(load)
            if not self.tokens.check_wheel(info, fun, positional, kwargs).allowed:
                raise CallError(auth_error(auth_type(credentials), user))
            auth = Credentials(token=info.token)
        return self._call_wheel(fun, load, auth, user)

    def _call_wheel(self, fun: str, load: Mapping[str, Any], auth: Credentials | None,
                    user: str) -> dict[str, Any]:
        positional, kwargs = packed(load)
        jid = new_jid(datetime.now(UTC))
        tag = f"salt/wheel/{jid}"
        base = {"fun": f"wheel.{fun}", "jid": jid, "tag": tag, "user": user}
        self.link.fire(f"{tag}/new", {**base, "_stamp": salt_stamp(datetime.now(UTC))})
        value: Any
        try:
            if fun == "minions.connected" and auth is None:
                lane, req = self.link.request(p.SHARE_RUNNER, fun="manage.up",
                                              arg=p.pack_args([], {}))
                reply = self.link.answer(lane, req, p.SHARE_RUN_RET, RUNNER_WAIT)
                if "error" in reply:
                    raise WheelError(str(reply["error"]))
                value = reply.get("return")
            elif auth is None:
                # A key holder is unrestricted; the wheel needs Credentials only for
                # minions.connected, handled above.
                value = self.wheel.call(fun, positional, kwargs, _KEY_HOLDER)
            else:
                value = self.wheel.call(fun, positional, kwargs, auth)
            success = True
        except (WheelError, Refused) as exc:
            value, success = str(exc), False
        data = {**base, "_stamp": salt_stamp(datetime.now(UTC)), "return": value,
                "success": success}
        self.link.fire(f"{tag}/ret", data)
        return {"tag": tag, "data": data}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.link.close()


_KEY_HOLDER = Credentials(token="")
"""Never sent to the master (see ``LowCalls._call_wheel``)."""
