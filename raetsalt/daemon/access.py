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
token, name, eauth, expire}`` or ``{req, error}``.  Failed logins are fired as
``raetsalt/eauth/<user>/failed`` and logged once per burst; the client hears only
Salt's "Authentication failure of type ..." text.

Guessing is slowed per eauth user and per calling uid, or per ``login_client`` for a
login a lane client (``raetsalt-api``) relays for a remote client; the command socket
cannot name one (``raetsalt.auth.limits``): the
answer to a failed login is *deferred* (kept in ``_deferred`` and sent by ``poll`` when
its time comes; ``get_timer`` says when), so a delay never blocks the master's loop,
other users or other logins.  Refusals of a locked or busy key are held back too (at
most ``REFUSAL_HOLD``), and a connection that sends more attempts while one of its
answers is held back has them dropped unanswered (``dropped_logins``): hammering costs
the master about 1% of a core instead of a refusal per attempt.  Every decision here
takes ``now`` (the daemon's monotonic clock) from the caller; only token records carry
wall-clock times.
"""

from __future__ import annotations

import heapq
import logging
import os
import pwd
import selectors
import socket
import stat
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from raetsalt import acl
from raetsalt import protocol as p
from raetsalt.auth.backends import AuthResult, authenticate, system_groups
from raetsalt.auth.limits import (
    MAX_PASSWORD,
    Keys,
    LoginLimiter,
    LoginPolicy,
    login_keys,
    plausible_username,
)
from raetsalt.auth.tokens import token_store
from raetsalt.drivers.cmdsock import (
    CONN_PREFIX,
    CommandServer,
    Limits,
    PeerCred,
    command_socket_path,
)
from raetsalt.log import Throttle, clip
from raetsalt.protocol import Requester
from raetsalt.timefmt import salt_stamp

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

log = logging.getLogger("raetsalt.daemon")
_Fields = TypeVar("_Fields", bound="DataclassInstance")

SHARE_MK_TOKEN = "mk_token"
SHARE_TOKEN_RET = "token_ret"
REQUEST_SHARES = (p.SHARE_PUBLISH, p.SHARE_RUNNER, SHARE_MK_TOKEN)
_ANSWER = {p.SHARE_PUBLISH: p.SHARE_PUB_ACK, p.SHARE_RUNNER: p.SHARE_RUN_RET,
           SHARE_MK_TOKEN: SHARE_TOKEN_RET}
_CREDENTIALS = ("eauth", "username", "password", "token", "login_client", "as_user")
MAX_PENDING_LOGINS = 32
REFUSAL_HOLD = 1.0
"""Longest hold-back (s) of a refusal that needed no check (a locked or busy key)."""
LOGIN_WORKERS = 4
"""Threads that run password checks (PAM may sleep in them)."""
TOKEN_CLEAN_EVERY = 3600.0
"""Seconds between sweeps of expired tokens (each is also removed when presented)."""
SHARE_WAIT = 3.0
"""Seconds a login in a cluster waits for its new token to be in the cluster's database
before it is answered (in a worker thread; after that the token works here at once, and
on the other masters when the database takes it)."""
FETCH_WAIT = 2.0
"""Seconds a request presenting a token unknown here waits for the cluster's database
to be read (in a worker thread)."""


def eauth_failure(kind: str, user: str | None = None) -> str:
    """Salt's text for a failed login (the user name cut short when it is long)."""
    if user:
        return (f'Authentication failure of type "{kind}" occurred for user '
                f'{clip(user, bare=True)}.')
    return f'Authentication failure of type "{kind}" occurred.'


@dataclass(slots=True)
class _Login:
    """A password check running in a worker thread."""

    future: Future[AuthResult]
    yard: str
    share: str
    body: dict[str, Any]
    backend: str
    username: str
    keys: Keys
    started: float


@dataclass(slots=True)
class _Waiting:
    """A token being shared with the cluster (``minted``) or read from it."""

    future: Future[Any]
    requester: Requester
    yard: str
    share: str
    body: dict[str, Any]
    username: str = ""
    backend: str = ""


@dataclass(order=True, slots=True)
class _Deferred:
    """A refusal to send at ``at`` (a held-back answer to a login attempt)."""

    at: float
    seq: int
    yard: str = field(compare=False)
    share: str = field(compare=False)
    body: dict[str, Any] = field(compare=False)
    error: str = field(compare=False)


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
    """Establishes requesters for ``MasterAdapter`` (``Wakeable`` for the command socket
    and the login workers).

    :param send: delivers an answer body to a client yard or command connection.
    :param fire: fires an event on the master bus.
    :param serving: whether the master still owes answers to a client (a command-socket
        connection waiting for them is not idle).
    """

    def __init__(self, opts: Mapping[str, Any], sock_dir: str,
                 lane_path: Callable[[str], str | None],
                 send: Callable[[str, dict[str, Any]], None],
                 fire: Callable[[str, dict[str, Any]], None],
                 estate: str | None = None,
                 serving: Callable[[str], bool] = lambda yard: False) -> None:
        self.opts = opts
        self.sock_dir = os.path.realpath(sock_dir)
        self.lane_path = lane_path
        self.send = send
        self.fire = fire
        self.estate = estate
        self.serving = serving
        self.tokens = token_store(opts, str(estate or opts.get("id") or ""))
        self.server: CommandServer | None = None
        if opts.get("publisher_acl") or opts.get("external_auth"):
            self.server = CommandServer(command_socket_path(opts),
                                        options(Limits, opts, "command_socket_"),
                                        busy=self._owes)
        self.limiter = LoginLimiter(options(LoginPolicy, opts, "eauth_"))
        self._pool: ThreadPoolExecutor | None = None
        self._logins: list[_Login] = []
        self._minted: list[_Waiting] = []
        """New tokens waiting to be in the cluster's database before they are answered."""
        self._fetched: list[_Waiting] = []
        """Requests presenting a token this master has not heard of: read from the
        cluster's database first."""
        self._deferred: list[_Deferred] = []
        self._seq = 0
        self.dropped_logins = 0
        """Login attempts dropped unanswered: sent while an answer was held back."""
        self._log_failures = Throttle(self.limiter.policy.lockout_time)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._next_clean: float | None = None

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

    def get_timer(self) -> float | None:
        """The next time ``poll`` has work without any socket being ready: a deferred
        answer, a command connection running out of time, the token sweep."""
        times = [t for t in (self._next_clean,
                             self._deferred[0].at if self._deferred else None,
                             self.server.get_timer() if self.server else None)
                 if t is not None]
        return min(times) if times else None

    def owns(self, yard: str) -> bool:
        """``yard`` is a command-socket connection (not a lane yard)."""
        return self.server is not None and self.server.has(yard)

    # -- requests -------------------------------------------------------------------------

    def from_lane(self, yard: str, share: str, body: dict[str, Any], now: float
                  ) -> list[Ready]:
        """A lane request: the yard's socket file owner, if that proves anything."""
        requester = self._lane_requester(yard)
        if requester is None:
            self._answer(yard, share, body, error=(
                "requests from outside the master's sock_dir are refused: other users "
                f"use the command socket {command_socket_path(self.opts)}"))
            return []
        return self._with_credentials(requester, yard, share, body, now)

    def poll(self, now: float) -> list[Ready]:
        """Command-socket requests, finished logins, answers whose time has come."""
        ready: list[Ready] = []
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        if self._next_clean is None:
            self._next_clean = now + TOKEN_CLEAN_EVERY
        elif now >= self._next_clean:
            self._next_clean = now + TOKEN_CLEAN_EVERY
            try:
                self.tokens.clean(time.time())
            except OSError as exc:
                log.warning("eauth: expired tokens not removed: %s", exc)
        if self.server is not None:
            for conn, cred, body in self.server.poll(now):
                share = p.share_of(body)
                if share not in REQUEST_SHARES:
                    self._answer(conn, share or "", body, error=f"unknown request {clip(share)}")
                    continue
                assert share is not None
                ready.extend(self._with_credentials(self._peer_requester(cred), conn, share,
                                                    body, now))
        still: list[_Login] = []
        for login in self._logins:
            if not login.future.done():
                still.append(login)
                continue
            try:
                result = login.future.result()
            except Exception as exc:  # noqa: BLE001 - a backend crash is a failed login
                result = AuthResult(False, reason=str(exc))
            ready.extend(self._logged_in(result, login, now))
        self._logins = still
        ready.extend(self._shared_tokens(now))
        while self._deferred and self._deferred[0].at <= now:
            due = heapq.heappop(self._deferred)
            self._answer(due.yard, due.share, due.body, error=due.error)
        return ready

    def _shared_tokens(self, now: float) -> list[Ready]:
        """Logins whose token the cluster took, requests whose token was looked for."""
        ready: list[Ready] = []
        for waiting in [w for w in self._minted if w.future.done()]:
            self._minted.remove(waiting)
            try:
                record = waiting.future.result()
            except (OSError, ValueError) as exc:
                log.error("eauth: token for %r not made: %s", waiting.username, exc)
                self._answer(waiting.yard, waiting.share, waiting.body,
                             error=f"token not made: {exc}")
                continue
            self._made(waiting.yard, waiting.share, waiting.body, waiting.username,
                       waiting.backend, record)
        for waiting in [w for w in self._fetched if w.future.done()]:
            self._fetched.remove(waiting)
            ready.extend(self._with_credentials(waiting.requester, waiting.yard,
                                                waiting.share, waiting.body, now,
                                                fetched=True))
        return ready

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=LOGIN_WORKERS,
                                            thread_name_prefix="eauth")
        return self._pool

    def close(self) -> None:
        self.tokens.close()
        if self.server is not None:
            self.server.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._wake_r.close()
        self._wake_w.close()

    # -- internals ------------------------------------------------------------------------

    def lane_requester(self, yard: str) -> Requester | None:
        """The owner of lane yard ``yard`` if its socket is directly in sock_dir (only
        the master's user and root can put it there), else None."""
        return self._lane_requester(yard)

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
    def _relayed_user(name: object) -> Requester | None:
        """The local user ``name`` (a system user), or None."""
        if not isinstance(name, str) or not name or len(name) > 256:
            return None
        try:
            uid = pwd.getpwnam(name).pw_uid
        except (KeyError, ValueError):
            return None
        return user_requester(uid)

    @staticmethod
    def _peer_requester(cred: PeerCred) -> Requester:
        return user_requester(cred.uid)

    def _with_credentials(self, requester: Requester, yard: str, share: str,
                          body: dict[str, Any], now: float, *,
                          fetched: bool = False) -> list[Ready]:
        clean = {k: v for k, v in body.items() if k not in _CREDENTIALS}
        on_behalf = body.get("as_user")
        if on_behalf is not None:
            # A trusted lane client (only root and the master's user have yards in
            # sock_dir: Salt's request channel) acts for a local user it authenticated
            # (that user's key), who then has that user's rights; nobody else may.
            who = (self._relayed_user(on_behalf) if not yard.startswith(CONN_PREFIX)
                   and share == p.SHARE_PUBLISH else None)
            if who is None:
                self._answer(yard, share, body, error=(
                    f"{clip(on_behalf, bare=True)} may not be acted for here"))
                return []
            requester = who
        token = body.get("token")
        backend = body.get("eauth")
        if token is not None:
            record = self.tokens.get(token, time.time())
            if record is None and not fetched and self.tokens.shared is not None \
                    and len(self._fetched) < MAX_PENDING_LOGINS:
                # Made on another master a moment ago?  Its database says (off the loop).
                future = self._workers().submit(self.tokens.fetch, token, time.time(),
                                                FETCH_WAIT)
                future.add_done_callback(lambda _f: self._wake())
                self._fetched.append(_Waiting(future, requester, yard, share, body))
                return []
            if record is None:
                if self._log_failures.note(("token", requester.uid), now):
                    log.warning("eauth: %s (uid %s) presented an unknown or expired token",
                                clip(requester.name), requester.uid)
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
            self._login(requester, yard, share, body, clean, now)
            return []
        if share == SHARE_MK_TOKEN:
            self._answer(yard, share, body, error="mk_token needs eauth, username and password")
            return []
        return [Ready(requester, yard, share, clean)]

    def _login(self, requester: Requester, yard: str, share: str, body: dict[str, Any],
               clean: dict[str, Any], now: float) -> None:
        """Start a password check in a worker, unless the limiter refuses it or the
        credentials cannot be right (those fail like a wrong password, without a check)."""
        backend, username, password = body.get("eauth"), body.get("username"), body.get(
            "password")
        if not (isinstance(backend, str) and isinstance(username, str)
                and isinstance(password, str)):
            self._answer(yard, share, body, error=eauth_failure("eauth"))
            return
        plausible = plausible_username(username) and len(password) <= MAX_PASSWORD
        # A trusted lane client (only root and the master's user have yards in sock_dir)
        # relaying logins for remote clients names each one; nobody else may.
        relayed = body.get("login_client")
        client = (relayed if isinstance(relayed, str) and relayed
                  and not yard.startswith(CONN_PREFIX) else None)
        keys = login_keys(username if plausible_username(username) else None, requester.uid,
                          client)
        refusal = self.limiter.admit(keys, now)
        if refusal is not None:
            text = eauth_failure("eauth", username)
            if refusal.why == "locked":
                if self._log_failures.note(("locked", refusal.key), now):
                    log.warning("eauth: logins of %s refused: locked after %d failures in a "
                                "row (for %.0f s more)", _key_text(refusal.key),
                                self.limiter.failures(refusal.key), refusal.until - now)
                text += (f" Too many failed logins: try again in "
                         f"{max(1.0, refusal.until - now):.0f} s.")
            else:
                text += " Another login of this user or from this user id is under way."
            # Held back too (until the other attempt's answer, at most REFUSAL_HOLD), so
            # that hammering a locked or busy key costs the master next to nothing.
            self._defer(min(refusal.until, now + REFUSAL_HOLD), yard, share, body, text)
            return
        if not plausible:
            self._fail(_Login(Future(), yard, share, body, backend, username, keys, now),
                       AuthResult(False, reason="implausible user name or password"), now)
            return
        if len(self._logins) >= MAX_PENDING_LOGINS:
            self.limiter.cancel(keys)
            self._answer(yard, share, body, error="too many logins in progress; retry")
            return
        external = self.opts.get("external_auth") or {}
        future = self._workers().submit(authenticate, external, backend, username, password)
        future.add_done_callback(lambda _f: self._wake())
        self._logins.append(_Login(future, yard, share, clean, backend, username, keys, now))

    def _logged_in(self, result: AuthResult, login: _Login, now: float) -> list[Ready]:
        if not result.ok:
            self._fail(login, result, now)
            return []
        self.limiter.finish(login.keys, True, login.started, now)
        yard, share, body, backend, username = (login.yard, login.share, login.body,
                                                login.backend, login.username)
        if share == SHARE_MK_TOKEN:
            keep = None
            if self.opts.get("keep_acl_in_token"):
                section = (self.opts.get("external_auth") or {}).get(backend) or {}
                keep = acl.fill_auth_list(section, f"external_auth[{backend!r}]", username,
                                          result.groups,
                                          permissive=bool(self.opts.get("permissive_acl")))
            lifetime = float(self.opts.get("token_expire", 43200))
            if self.tokens.shared is not None:  # answered once the cluster has it
                future = self._workers().submit(self.tokens.create, username, backend,
                                                result.groups, time.time(), lifetime, keep,
                                                SHARE_WAIT)
                future.add_done_callback(lambda _f: self._wake())
                self._minted.append(_Waiting(future, Requester("eauth", username, None),
                                             yard, share, body, username, backend))
                return []
            record = self.tokens.create(username, backend, result.groups, time.time(),
                                        lifetime, keep)
            self._made(yard, share, body, username, backend, record)
            return []
        return [Ready(Requester("eauth", username, None, result.groups, backend), yard, share,
                      body)]

    def _made(self, yard: str, share: str, body: dict[str, Any], username: str,
              backend: str, record: dict[str, Any]) -> None:
        until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record["expire"]))
        if record.get("shared") is False:
            log.warning("eauth: token for %r (%s) until %s: the cluster's database did not "
                        "take it yet: it works on this master now, on the others once the "
                        "database has it", username, backend, until)
        else:
            log.info("eauth: token for %r (%s) until %s%s", username, backend, until,
                     " (shared with the cluster)" if record.get("shared") else "")
        self._answer(yard, share, body, token=record["token"], name=username,
                     eauth=backend, expire=record["expire"])

    def _fail(self, login: _Login, result: AuthResult, now: float) -> None:
        """A failed login: counted, fired, logged once per burst, answered later."""
        answer_at = self.limiter.finish(login.keys, False, login.started, now)
        failures = max(self.limiter.failures(key) for key in login.keys)
        user = clip(login.username)
        times = self._log_failures.note(("failed", login.keys), now)
        if times:
            log.warning("eauth: login of %s with %s failed: %s (%d failure(s) since the last "
                        "report; %s)", user, clip(login.backend), result.reason, times,
                        ", ".join(_key_text(k) for k in login.keys))
        if failures == self.limiter.policy.lockout_after:
            log.warning("eauth: %s locked for %.0f s after %d failed logins in a row",
                        " and ".join(_key_text(k) for k in login.keys),
                        self.limiter.policy.lockout_time, failures)
        tag_user = login.username if plausible_username(login.username) else "-"
        self.fire(f"raetsalt/eauth/{tag_user}/failed",
                  {"user": clip(login.username), "eauth": login.backend,
                   "reason": result.reason, "failures": failures,
                   "_stamp": salt_stamp(datetime.now(UTC))})
        self._defer(answer_at, login.yard, login.share, login.body,
                    eauth_failure("eauth", login.username), checked=True)

    def _defer(self, at: float, yard: str, share: str, body: dict[str, Any], error: str,
               *, checked: bool = False) -> None:
        """Answer ``error`` at ``at``.  A client with a held-back answer already is
        pipelining attempts: an extra unchecked one is dropped unanswered (and counted);
        the answer to a ``checked`` attempt always goes out."""
        if not checked and any(d.yard == yard for d in self._deferred):
            self.dropped_logins += 1
            return
        self._seq += 1
        heapq.heappush(self._deferred, _Deferred(at, self._seq, yard, share, body, error))

    def _owes(self, yard: str) -> bool:
        """A command connection still waits for a login, a deferred answer or returns."""
        return (any(login.yard == yard for login in self._logins)
                or any(w.yard == yard for w in (*self._minted, *self._fetched))
                or any(d.yard == yard for d in self._deferred) or self.serving(yard))

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


def options(cls: type[_Fields], opts: Mapping[str, Any], prefix: str) -> _Fields:
    """A dataclass of limits from the options ``<prefix><field>`` that are set (the
    config loader has checked their types); the dataclass's defaults for the rest."""
    return cls(**{f.name: opts[prefix + f.name] for f in fields(cls)
                  if prefix + f.name in opts})


def _key_text(key: Any) -> str:
    """``('user', 'fred')`` -> ``user 'fred'``; ``('uid', 65534)`` -> ``uid 65534``."""
    kind, value = key
    if kind == "client":
        return f"client {clip(value)}"
    return f"user {clip(value)}" if kind == "user" else f"uid {value}"


