"""``POST /``: each lowstate chunk run by its ``client``, with Salt's netapi return shapes.

=============  =====================================================================
client         what runs, and what the chunk's entry in ``return`` is
=============  =====================================================================
local          a publication; ``{minion: return}`` of the minions that returned
               within ``timeout`` (default: the master's ``timeout``)
local_async    a publication; ``{jid, minions}`` at once
local_batch    the matched minions ``batch`` at a time (``10%`` by default); one
               ``{minion: return}`` per return, in order of arrival
runner         a master runner (``raetsalt-run``'s); its value
runner_async   the runner in the background; ``{tag, jid}`` at once, its result on
               the bus as ``salt/run/<jid>/ret``
wheel          ``raetsalt.api.wheel``; ``{tag, data: {fun, jid, user, return,
               success, _stamp}}``
=============  =====================================================================

Arguments: ``arg`` (a list; a single value is made one) and ``kwarg`` (a mapping), and
for runner and wheel any other key of the chunk too (``match``, ``jid``...), as Salt
passes them.  Text arguments are typed as the CLI types them (``name=value`` is a
keyword argument, ``"1"`` is 1).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from raetsalt import protocol as p
from raetsalt.cli._common import wire_safe
from raetsalt.errors import DaemonUnavailable
from raetsalt.execution.args import parse_input
from raetsalt.log import clip
from raetsalt.services.jids import new_jid
from raetsalt.timefmt import salt_stamp

from .auth import TOKEN_RE, Tokens
from .master import Credentials, MasterLink, MasterTimeout, Refused
from .wheel import Wheel, WheelError

log = logging.getLogger("raetsalt.api")

CLIENTS = ("local", "local_async", "local_batch", "runner", "runner_async", "wheel")
RESERVED = frozenset({"client", "fun", "arg", "kwarg", "tgt", "tgt_type", "expr_form",
                      "token", "username", "password", "eauth", "timeout", "batch",
                      "delimiter", "full_return", "ret", "jid_include", "batch_wait"})
MAX_CHUNKS = 64
MAX_BACKGROUND = 32
"""runner_async jobs running at once; more are refused (HTTP 503)."""


def low_arguments(chunk: Mapping[str, Any], not_arguments: frozenset[str] | None
                  ) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments of a low chunk: ``arg`` (typed as the
    command line types it: ``name=value`` is a keyword), ``kwarg``, and, unless
    ``not_arguments`` is None, every other key not in it; ValueError if malformed."""
    arg = chunk.get("arg", [])
    if not isinstance(arg, list):
        arg = [arg]
    kwarg = chunk.get("kwarg") or {}
    if not isinstance(kwarg, Mapping):
        raise ValueError("kwarg must be a mapping")
    positional, kwargs = parse_input(arg)
    kwargs.update({str(k): v for k, v in kwarg.items()})
    if not_arguments is not None:
        kwargs.update({str(k): v for k, v in chunk.items() if k not in not_arguments})
    positional, kwargs = wire_safe((positional, kwargs))
    return list(positional), dict(kwargs)


class HttpProblem(Exception):
    """Ends the request with ``status`` and ``text`` (never a traceback)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def unauthorized(text: str = "Authentication failure") -> HttpProblem:
    return HttpProblem(401, text)


def lowstate_of(data: Any) -> list[Any]:
    """A request body's data as a list of chunks (one mapping is one chunk)."""
    if data is None:
        raise HttpProblem(400, "a lowstate is needed in the request body")
    if isinstance(data, Mapping):
        data = [dict(data)]
    if not isinstance(data, list):
        raise HttpProblem(400, "Lowstates must be a list")
    return data


class Dispatcher:
    def __init__(self, opts: Mapping[str, Any], link: MasterLink, tokens: Tokens) -> None:
        self.opts = opts
        self.link = link
        self.tokens = tokens
        self.wheel = Wheel(opts, link)
        self.timeout = float(opts.get("timeout") or 5)
        self._background = threading.BoundedSemaphore(MAX_BACKGROUND)

    # -- who ------------------------------------------------------------------------------

    @staticmethod
    def credentials(chunk: Mapping[str, Any], token: str | None, client: str
                    ) -> Credentials:
        """The chunk's own token, the request's token, or the chunk's eauth credentials;
        401 when there are none (nothing runs without them)."""
        own = chunk.get("token")
        if own is not None:
            if not isinstance(own, str) or not TOKEN_RE.match(own):
                raise unauthorized("Invalid token")
            return Credentials(token=own)
        if token is not None:
            return Credentials(token=token)
        eauth, username, password = (chunk.get("eauth"), chunk.get("username"),
                                     chunk.get("password"))
        if isinstance(eauth, str) and isinstance(username, str) and isinstance(password, str):
            return Credentials(eauth=eauth, username=username, password=password,
                               client=client)
        raise unauthorized("No authentication credentials given")

    # -- running --------------------------------------------------------------------------

    def run(self, lowstate: Any, token: str | None, client: str) -> list[Any]:
        if isinstance(lowstate, Mapping):
            lowstate = [lowstate]
        if not isinstance(lowstate, list) or not lowstate:
            raise HttpProblem(400, "Lowstates must be a list")
        if len(lowstate) > MAX_CHUNKS:
            raise HttpProblem(400, f"at most {MAX_CHUNKS} lowstate chunks per request")
        out: list[Any] = []
        for chunk in lowstate:
            if not isinstance(chunk, Mapping):
                raise HttpProblem(400, "each lowstate chunk must be a mapping")
            out.extend(self.run_chunk(chunk, token, client))
        return out

    def run_chunk(self, chunk: Mapping[str, Any], token: str | None, client: str
                  ) -> Iterator[Any]:
        kind = chunk.get("client")
        if kind not in CLIENTS:
            raise HttpProblem(400, f"unknown client {clip(kind)}; one of {', '.join(CLIENTS)}")
        fun = chunk.get("fun")
        if not (isinstance(fun, str) and fun) and not (
                kind.startswith("local") and isinstance(fun, list) and fun
                and all(isinstance(f, str) for f in fun)):
            raise HttpProblem(400, "a function ('fun') is needed")
        auth = self.credentials(chunk, token, client)
        try:
            if kind == "local":
                yield self._local(chunk, auth)
            elif kind == "local_async":
                yield self._local_async(chunk, auth)
            elif kind == "local_batch":
                yield from self._local_batch(chunk, auth)
            elif kind == "runner":
                yield self.link.runner(auth, str(fun), self._packed(chunk, extra=True),
                                       self._timeout(chunk) + 10)
            elif kind == "runner_async":
                yield self._runner_async(chunk, auth)
            else:
                yield self._wheel(chunk, auth)
        except Refused as exc:
            raise HttpProblem(401 if exc.denied else 400, str(exc)) from None
        except MasterTimeout as exc:
            raise HttpProblem(504, str(exc)) from None
        except DaemonUnavailable as exc:
            raise HttpProblem(503, str(exc)) from None

    # -- helpers --------------------------------------------------------------------------

    def _timeout(self, chunk: Mapping[str, Any]) -> float:
        value = chunk.get("timeout")
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise HttpProblem(400, "timeout must be a number") from None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return min(float(value), 3600.0)
        return self.timeout

    @staticmethod
    def _packed(chunk: Mapping[str, Any], *, extra: bool = False) -> list[Any]:
        try:
            positional, kwargs = low_arguments(chunk, RESERVED if extra else None)
        except ValueError as exc:
            raise HttpProblem(400, str(exc)) from None
        return p.pack_args(positional, kwargs)

    @staticmethod
    def _target(chunk: Mapping[str, Any]) -> tuple[Any, str]:
        tgt = chunk.get("tgt")
        tgt_type = chunk.get("tgt_type") or chunk.get("expr_form") or "glob"
        if not isinstance(tgt_type, str):
            raise HttpProblem(400, "tgt_type must be text")
        if isinstance(tgt, str) and tgt_type == "list":
            tgt = [t for t in tgt.replace(" ", "").split(",") if t]
        if not (isinstance(tgt, str) and tgt) and not (
                isinstance(tgt, list) and all(isinstance(t, str) for t in tgt)):
            raise HttpProblem(400, "a target ('tgt') is needed")
        return tgt, tgt_type

    def _publish(self, chunk: Mapping[str, Any], auth: Credentials, tgt: Any = None,
                 tgt_type: str | None = None) -> tuple[Any, float]:
        if tgt is None:
            tgt, tgt_type = self._target(chunk)
        timeout = self._timeout(chunk)
        delimiter = chunk.get("delimiter", ":")
        pub = self.link.publish(auth, tgt, tgt_type or "glob", chunk["fun"],
                                self._packed(chunk), timeout,
                                delimiter if isinstance(delimiter, str) else ":")
        return pub, timeout

    def _local(self, chunk: Mapping[str, Any], auth: Credentials) -> dict[str, Any]:
        pub, timeout = self._publish(chunk, auth)
        full = bool(chunk.get("full_return"))
        out: dict[str, Any] = {}
        for minion, ret in pub.returns(time.monotonic() + timeout):
            out[minion] = ({"ret": ret.get("return"), "retcode": ret.get("retcode", 0),
                            "jid": pub.jid} if full else ret.get("return"))
        return out

    def _local_async(self, chunk: Mapping[str, Any], auth: Credentials) -> dict[str, Any]:
        pub, _timeout = self._publish(chunk, auth)
        return {"jid": pub.jid, "minions": sorted(set(pub.minions) | pub.missing)}

    def _local_batch(self, chunk: Mapping[str, Any], auth: Credentials
                     ) -> Iterator[dict[str, Any]]:
        tgt, tgt_type = self._target(chunk)
        minions = sorted(self.link.preview(auth, tgt, tgt_type, chunk["fun"]))
        size = _batch_size(chunk.get("batch", "10%"), len(minions))
        for start in range(0, len(minions), size):
            group = minions[start:start + size]
            pub, timeout = self._publish(chunk, auth, group, "list")
            for minion, ret in pub.returns(time.monotonic() + timeout):
                yield {minion: ret.get("return")}

    def _runner_async(self, chunk: Mapping[str, Any], auth: Credentials) -> dict[str, Any]:
        if not self._background.acquire(blocking=False):
            raise HttpProblem(503, "too many runner_async jobs running; retry later")
        jid = new_jid(datetime.now(UTC))
        fun, arg, timeout = str(chunk["fun"]), self._packed(chunk, extra=True), (
            self._timeout(chunk) + 10)
        tag = f"salt/run/{jid}"

        def work() -> None:
            try:
                self.link.fire(f"{tag}/new", {"fun": f"runner.{fun}", "jid": jid})
                try:
                    value, success = self.link.runner(auth, fun, arg, timeout), True
                except (Refused, MasterTimeout, DaemonUnavailable) as exc:
                    value, success = str(exc), False
                self.link.fire(f"{tag}/ret", {"fun": f"runner.{fun}", "jid": jid,
                                              "return": value, "success": success})
            except Exception:  # noqa: BLE001 - a background job must not kill a worker
                log.exception("runner_async %s (%s) failed", clip(fun), jid)
            finally:
                self._background.release()

        threading.Thread(target=work, name=f"runner-{jid}", daemon=True).start()
        return {"tag": tag, "jid": jid}

    def _wheel(self, chunk: Mapping[str, Any], auth: Credentials) -> dict[str, Any]:
        fun = str(chunk["fun"])
        token = auth.token
        made = False
        if token is None:
            assert auth.eauth and auth.username is not None and auth.password is not None
            token = str(self.link.login(auth.eauth, auth.username, auth.password,
                                        auth.client or "")["token"])
            made = True
        try:
            info = self.tokens.get(token)
            if info is None:
                raise unauthorized("Invalid token")
            positional, kwargs = p.unpack_args(self._packed(chunk, extra=True))
            decision = self.tokens.check_wheel(info, fun, positional, kwargs)
            if not decision.allowed:
                raise unauthorized(decision.reason)
            jid = new_jid(datetime.now(UTC))
            try:
                value, success = self.wheel.call(fun, positional, kwargs, auth), True
            except WheelError as exc:
                value, success = str(exc), False
            return {"tag": f"salt/wheel/{jid}",
                    "data": {"fun": f"wheel.{fun}", "jid": jid, "tag": f"salt/wheel/{jid}",
                             "user": info.name, "_stamp": salt_stamp(datetime.now(UTC)),
                             "return": value, "success": success}}
        finally:
            if made:
                self.tokens.remove(token)


def _batch_size(value: Any, total: int) -> int:
    text = str(value).strip()
    try:
        if text.endswith("%"):
            size = int(total * float(text[:-1]) / 100.0)
        else:
            size = int(text)
    except ValueError:
        raise HttpProblem(400, f"bad batch size {clip(text)}") from None
    return max(1, size)
