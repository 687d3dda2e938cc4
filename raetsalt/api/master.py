"""The API's link to the master: one lane client per worker thread (as ``raetsalt`` and
``raetsalt-run`` use, ``raetsalt.drivers.laneclient``), requests that always carry the caller's
credentials, and the answers to them.

The API runs as the master's user (or root): its yards sit in the master's sock_dir,
where the master would take a request *without* credentials as its own user's, which
is unrestricted.  So every request built here carries ``auth`` (a token, or eauth
credentials), and ``Credentials`` cannot be made empty: a request never runs with more
rights than its caller's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from raetsalt import protocol as p
from raetsalt.daemon.access import SHARE_MK_TOKEN, SHARE_TOKEN_RET
from raetsalt.daemon.keys import SHARE_KEY, SHARE_KEY_RET
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.errors import DaemonUnavailable
from raetsalt.event import SaltEvent

LOGIN_WAIT = 60.0
"""Longest wait for a login's answer (the master holds failed ones back, doubling)."""
KEY_WAIT = 30.0


class MasterTimeout(Exception):
    """The master did not answer in time."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """Who a request runs as: ``token``, or ``eauth``/``username``/``password`` (with the
    remote ``client`` the master counts failed logins against)."""

    token: str | None = None
    eauth: str | None = None
    username: str | None = None
    password: str | None = None
    client: str | None = None

    def __post_init__(self) -> None:
        if self.token is None and not (self.eauth and self.username is not None
                                       and self.password is not None):
            raise ValueError("credentials need a token or eauth, username and password")

    def fields(self) -> dict[str, Any]:
        if self.token is not None:
            return {"token": self.token}
        out: dict[str, Any] = {"eauth": self.eauth, "username": self.username,
                               "password": self.password}
        if self.client:
            out["login_client"] = self.client
        return out


@dataclass(slots=True)
class Publication:
    """A published job: the master's acknowledgement and a way to read its returns."""

    link: MasterLink
    client: CommandClient
    req: str
    jid: str
    minions: list[str]
    missing: set[str]
    early: list[dict[str, Any]] = field(default_factory=list)

    def returns(self, deadline: float) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(minion, return)`` once per minion as they arrive, until every expected
        minion returned or ``deadline`` (monotonic) passed."""
        expected = set(self.minions) | self.missing
        seen: set[str] = set()
        while not expected <= seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not self.early:
                return
            bodies, self.early = self.early or self.link.receive(self.client, remaining), []
            for body in bodies:
                if body.get("req") != self.req or p.share_of(body) != p.SHARE_JOB_RET:
                    continue
                for minion, ret in p.job_returns(body):
                    if minion not in seen:
                        seen.add(minion)
                        yield minion, ret


class Refused(Exception):
    """The master refused the request; ``denied``: an authentication or authorization
    failure (HTTP 401), else a bad request (400)."""

    def __init__(self, text: str, denied: bool) -> None:
        super().__init__(text)
        self.denied = denied


class MasterLink:
    """Requests to the master from any worker thread (module docstring)."""

    def __init__(self, opts: Mapping[str, Any]) -> None:
        self.opts = opts
        self.sock_dir = str(opts["sock_dir"])
        self._local = threading.local()
        self._lock = threading.Lock()
        self._clients: list[CommandClient] = []

    # -- plumbing -------------------------------------------------------------------------

    def client(self) -> CommandClient:
        """This thread's lane client (made on first use, again after a failure)."""
        client: CommandClient | None = getattr(self._local, "client", None)
        if client is None:
            client = CommandClient("master", self.sock_dir)
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def _drop(self, client: CommandClient) -> None:
        if getattr(self._local, "client", None) is client:
            self._local.client = None
        with self._lock:
            if client in self._clients:
                self._clients.remove(client)
        client.close()

    def request(self, share: str, **fields: Any) -> tuple[CommandClient, str]:
        client = self.client()
        try:
            return client, client.request(share, **fields)
        except DaemonUnavailable:
            self._drop(client)
            raise

    def receive(self, client: CommandClient, timeout: float) -> list[dict[str, Any]]:
        try:
            return client.receive(max(0.0, timeout))
        except OSError as exc:
            self._drop(client)
            raise DaemonUnavailable(f"the master went away: {exc.strerror or exc}") from None

    def answer(self, client: CommandClient, req: str, share: str, timeout: float,
               stash: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The answer ``share`` to ``req``; other messages of ``req`` go to ``stash``,
        those of earlier requests of this thread (late returns) are dropped."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            found: dict[str, Any] | None = None
            for body in self.receive(client, remaining):
                if body.get("req") != req:
                    continue
                if found is None and p.share_of(body) == share:
                    found = body  # what came with it in the same read is kept too
                elif stash is not None:
                    stash.append(body)
            if found is not None:
                return found
            if not client.daemon_alive():
                self._drop(client)
                raise DaemonUnavailable("the raetsalt-master daemon is not running")
        raise MasterTimeout(f"no answer from the master within {timeout:g} s")

    @staticmethod
    def _check(reply: Mapping[str, Any]) -> None:
        if "error" in reply:
            raise Refused(str(reply["error"]), bool(reply.get("denied")))

    # -- requests -------------------------------------------------------------------------

    def login(self, eauth: str, username: str, password: str, client: str
              ) -> dict[str, Any]:
        """A token from the master (``mk_token``): ``{token, name, eauth, expire}``."""
        creds = Credentials(eauth=eauth, username=username, password=password, client=client)
        lane, req = self.request(SHARE_MK_TOKEN, **creds.fields())
        reply = self.answer(lane, req, SHARE_TOKEN_RET, LOGIN_WAIT)
        self._check(reply)
        if not isinstance(reply.get("token"), str):
            raise Refused("the master gave no token", True)
        return reply

    def publish(self, auth: Credentials, tgt: Any, tgt_type: str, fun: Any, arg: list[Any],
                timeout: float, delimiter: str = ":") -> Publication:
        lane, req = self.request(p.SHARE_PUBLISH, tgt=tgt, tgt_type=tgt_type, fun=fun,
                                 arg=arg, delimiter=delimiter, preview=False,
                                 timeout=timeout, **auth.fields())
        early: list[dict[str, Any]] = []
        wait = LOGIN_WAIT if auth.token is None else 10.0
        ack = self.answer(lane, req, p.SHARE_PUB_ACK, wait, early)
        self._check(ack)
        return Publication(self, lane, req, str(ack.get("jid") or ""),
                           [str(m) for m in ack.get("minions") or []],
                           {str(m) for m in ack.get("missing") or []}, early)

    def preview(self, auth: Credentials, tgt: Any, tgt_type: str, fun: Any) -> list[str]:
        """The minions ``tgt`` matches, if ``auth`` may run ``fun`` on them."""
        lane, req = self.request(p.SHARE_PUBLISH, tgt=tgt, tgt_type=tgt_type, fun=fun,
                                 arg=[], delimiter=":", preview=True, timeout=1.0,
                                 **auth.fields())
        wait = LOGIN_WAIT if auth.token is None else 10.0
        ack = self.answer(lane, req, p.SHARE_PUB_ACK, wait)
        self._check(ack)
        return [str(m) for m in ack.get("minions") or []]

    def runner(self, auth: Credentials, fun: str, arg: list[Any], timeout: float) -> Any:
        lane, req = self.request(p.SHARE_RUNNER, fun=fun, arg=arg, **auth.fields())
        reply = self.answer(lane, req, p.SHARE_RUN_RET, timeout)
        self._check(reply)
        return reply.get("return")

    def key(self, action: str, **fields: Any) -> dict[str, Any]:
        """A key command (``raetsalt.daemon.keys``); the caller has authorized it."""
        lane, req = self.request(SHARE_KEY, action=action, **fields)
        reply = self.answer(lane, req, SHARE_KEY_RET, KEY_WAIT)
        if isinstance(reply.get("error"), str) and "stale" not in reply:
            raise Refused(f"the master refused: {reply['error']}", False)
        return reply

    def fire(self, tag: str, data: dict[str, Any]) -> bool:
        """Fire an event on the master's bus; False when the bus did not take it."""
        event: SaltEvent | None = getattr(self._local, "event", None)
        if event is None:
            event = SaltEvent("master", self.sock_dir, listen=False)
            self._local.event = event
        return bool(event.fire_event(data, tag))

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()
