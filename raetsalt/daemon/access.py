"""Who is asking the master: the identity of every ``publish``/``runner``/``mk_token``
request before ``MasterJobs`` decides what it may do.

* **Lane** clients (``raetsalt``/``raetsalt-run`` run as root or as the master's user):
  the owner of the yard's socket file, trusted only when that file is directly in
  ``sock_dir``, where nobody else can create files (see ``raetsalt.drivers.cmdsock``
  for why a path elsewhere proves nothing).
* **Command socket** clients (other local users, when ``publisher_acl`` or
  ``external_auth`` is configured): the kernel's ``SO_PEERCRED`` uid.
* **eauth**: a request carrying ``eauth``/``username``/``password`` is checked by that
  backend in a worker thread (PAM may take seconds; the master's loop does not wait),
  one carrying ``token`` against the token store.  The requester is then the eauth
  user, whatever the socket says.

``mk_token`` (``{req, eauth, username, password}``) answers ``token_ret`` with ``{req,
token, name, eauth, expire}`` or ``{req, error}``.  Failed logins are logged and fired
as ``raetsalt/eauth/<user>/failed``; the client hears only Salt's "Authentication
failure of type ..." text.
"""

from __future__ import annotations

import logging
import os
import pwd
import selectors
import socket
import stat
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from raetsalt import acl
from raetsalt.auth.backends import AuthResult, authenticate, system_groups
from raetsalt.auth.tokens import TokenStore
from raetsalt.drivers.cmdsock import CommandServer, PeerCred, command_socket_path
from raetsalt.services import protocol as p
from raetsalt.services.protocol import Requester

log = logging.getLogger("raetsalt.daemon")

SHARE_MK_TOKEN = "mk_token"
SHARE_TOKEN_RET = "token_ret"
REQUEST_SHARES = (p.SHARE_PUBLISH, p.SHARE_RUNNER, SHARE_MK_TOKEN)
_ANSWER = {p.SHARE_PUBLISH: p.SHARE_PUB_ACK, p.SHARE_RUNNER: p.SHARE_RUN_RET,
           SHARE_MK_TOKEN: SHARE_TOKEN_RET}
_CREDENTIALS = ("eauth", "username", "password", "token")
MAX_PENDING_LOGINS = 32
TOKEN_CLEAN_EVERY = 3600.0
"""Seconds between sweeps of expired tokens (each is also removed when presented)."""


def eauth_failure(kind: str, user: str | None = None) -> str:
    """Salt's text for a failed login."""
    if user:
        return f'Authentication failure of type "{kind}" occurred for user {user}.'
    return f'Authentication failure of type "{kind}" occurred.'


@dataclass(frozen=True, slots=True)
class Ready:
    """A request whose requester is established: hand it to ``MasterJobs``."""

    requester: Requester
    yard: str
    share: str
    body: dict[str, Any]


def user_requester(uid: int) -> Requester:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return Requester("user", name, uid, system_groups(name))


class AccessGate:
    """Establishes requesters for ``MasterService`` (``Wakeable`` for the command socket
    and the login workers).

    :param send: delivers an answer body to a client yard or command connection.
    :param fire: fires an event on the master bus.
    """

    def __init__(self, opts: Mapping[str, Any], sock_dir: str,
                 lane_path: Callable[[str], str | None],
                 send: Callable[[str, dict[str, Any]], None],
                 fire: Callable[[str, dict[str, Any]], None],
                 estate: str | None = None) -> None:
        self.opts = opts
        self.sock_dir = os.path.realpath(sock_dir)
        self.lane_path = lane_path
        self.send = send
        self.fire = fire
        self.estate = estate
        self.tokens = TokenStore(os.path.join(opts["cachedir"], "tokens"))
        self.server: CommandServer | None = None
        if opts.get("publisher_acl") or opts.get("external_auth"):
            self.server = CommandServer(command_socket_path(opts))
        self._pool: ThreadPoolExecutor | None = None
        self._logins: list[tuple[Future[AuthResult], str, str, dict[str, Any], str, str]] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._next_clean = time.monotonic() + TOKEN_CLEAN_EVERY

    # -- Wakeable -------------------------------------------------------------------------

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        selector.register(self._wake_r, selectors.EVENT_READ, data)
        if self.server is not None:
            self.server.register(selector, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        try:
            selector.unregister(self._wake_r)
        except (KeyError, ValueError):
            pass
        if self.server is not None:
            self.server.unregister(selector)

    def timeout(self) -> float | None:
        return None

    def owns(self, yard: str) -> bool:
        """``yard`` is a command-socket connection (not a lane yard)."""
        return self.server is not None and self.server.has(yard)

    # -- requests -------------------------------------------------------------------------

    def from_lane(self, yard: str, share: str, body: dict[str, Any]) -> list[Ready]:
        """A lane request: the yard's socket file owner, if that proves anything."""
        requester = self._lane_requester(yard)
        if requester is None:
            self._answer(yard, share, body, error=(
                "requests from outside the master's sock_dir are refused: other users "
                f"use the command socket {command_socket_path(self.opts)}"))
            return []
        return self._with_credentials(requester, yard, share, body)

    def poll(self) -> list[Ready]:
        """Command-socket requests and finished logins."""
        ready: list[Ready] = []
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        if time.monotonic() >= self._next_clean:
            self._next_clean = time.monotonic() + TOKEN_CLEAN_EVERY
            try:
                self.tokens.clean(time.time())
            except OSError as exc:
                log.warning("eauth: expired tokens not removed: %s", exc)
        if self.server is not None:
            for conn, cred, body in self.server.poll():
                share = p.share_of(body)
                if share not in REQUEST_SHARES:
                    self._answer(conn, share or "", body, error=f"unknown request {share!r}")
                    continue
                assert share is not None
                ready.extend(self._with_credentials(self._peer_requester(cred), conn, share,
                                                    body))
        still: list[tuple[Future[AuthResult], str, str, dict[str, Any], str, str]] = []
        for login in self._logins:
            future, yard, share, body, backend, username = login
            if not future.done():
                still.append(login)
                continue
            try:
                result = future.result()
            except Exception as exc:  # noqa: BLE001 - a backend crash is a failed login
                result = AuthResult(False, reason=str(exc))
            ready.extend(self._logged_in(result, yard, share, body, backend, username))
        self._logins = still
        return ready

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._wake_r.close()
        self._wake_w.close()

    # -- internals ------------------------------------------------------------------------

    def _lane_requester(self, yard: str) -> Requester | None:
        path = self.lane_path(yard)
        if path is None or os.path.realpath(os.path.dirname(path)) != self.sock_dir:
            return None
        try:
            info = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISSOCK(info.st_mode):
            return None
        return user_requester(info.st_uid)

    @staticmethod
    def _peer_requester(cred: PeerCred) -> Requester:
        return user_requester(cred.uid)

    def _with_credentials(self, requester: Requester, yard: str, share: str,
                          body: dict[str, Any]) -> list[Ready]:
        clean = {k: v for k, v in body.items() if k not in _CREDENTIALS}
        token = body.get("token")
        backend = body.get("eauth")
        if token is not None:
            record = self.tokens.get(token, time.time())
            if record is None:
                log.warning("eauth: %s presented an unknown or expired token", requester.name)
                self._answer(yard, share, body, error=eauth_failure("token") + (
                    " The token is unknown or expired; log in again with -a EAUTH -T."))
                return []
            who = Requester("eauth", str(record["name"]), requester.uid,
                            tuple(record.get("groups") or ()), str(record["eauth"]),
                            tuple(record["auth_list"]) if "auth_list" in record else None)
            if share == SHARE_MK_TOKEN:
                self._answer(yard, share, body, error="mk_token needs a password, not a token")
                return []
            return [Ready(who, yard, share, clean)]
        if backend is not None:
            username, password = body.get("username"), body.get("password")
            if not (isinstance(backend, str) and isinstance(username, str)
                    and isinstance(password, str)):
                self._answer(yard, share, body, error=eauth_failure("eauth"))
                return []
            if len(self._logins) >= MAX_PENDING_LOGINS:
                self._answer(yard, share, body, error="too many logins in progress; retry")
                return []
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="eauth")
            external = self.opts.get("external_auth") or {}
            future = self._pool.submit(authenticate, external, backend, username, password)
            future.add_done_callback(lambda _f: self._wake())
            self._logins.append((future, yard, share, clean, backend, username))
            return []
        if share == SHARE_MK_TOKEN:
            self._answer(yard, share, body, error="mk_token needs eauth, username and password")
            return []
        return [Ready(requester, yard, share, clean)]

    def _logged_in(self, result: AuthResult, yard: str, share: str, body: dict[str, Any],
                   backend: str, username: str) -> list[Ready]:
        if not result.ok:
            log.warning("eauth: login of %r with %s failed: %s", username, backend,
                        result.reason)
            self.fire(f"raetsalt/eauth/{username}/failed",
                      {"user": username, "eauth": backend, "reason": result.reason,
                       "_stamp": _stamp()})
            self._answer(yard, share, body, error=eauth_failure("eauth", username))
            return []
        if share == SHARE_MK_TOKEN:
            keep = None
            if self.opts.get("keep_acl_in_token"):
                section = (self.opts.get("external_auth") or {}).get(backend) or {}
                keep = acl.fill_auth_list(section, f"external_auth[{backend!r}]", username,
                                          result.groups,
                                          permissive=bool(self.opts.get("permissive_acl")))
            record = self.tokens.create(username, backend, result.groups, time.time(),
                                        float(self.opts.get("token_expire", 43200)), keep)
            log.info("eauth: token for %r (%s) until %s", username, backend,
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["expire"])))
            self._answer(yard, share, body, token=record["token"], name=username,
                         eauth=backend, expire=record["expire"])
            return []
        return [Ready(Requester("eauth", username, None, result.groups, backend), yard, share,
                      body)]

    def _answer(self, yard: str, share: str, body: Mapping[str, Any], **fields: Any) -> None:
        req = body.get("req")
        if not isinstance(req, str):
            return
        answer = _ANSWER.get(share, p.SHARE_PUB_ACK)
        if "error" in fields:
            fields["denied"] = True
        self.send(yard, p.lane_reply(self.estate, yard, answer, req=req, **fields))

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass


def _stamp() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).replace(tzinfo=None).isoformat()
