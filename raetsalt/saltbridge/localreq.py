"""Salt's local request channel on the master's host: Salt's ``LocalClient.pub`` (a
driver: a ZeroMQ socket, files in Salt's cachedir, the master's lane).

Salt's ``LocalClient`` sends ``{cmd: publish, tgt, fun, arg, tgt_type, ret, key, user,
kwargs}`` (``enc: clear``) to ``tcp://<interface>:<ret_port>`` with a ZeroMQ REQ socket.
Here a ROUTER socket bound to the loopback address only (127.0.0.1, or ::1 with
``ipv6``) takes it and publishes it through raetsalt's master like the ``raetsalt``
command line:

* ``key`` equal to the key this server wrote for root or for the master's user (Salt's
  ``<cachedir>/.<user>_key``, 0400, a new random key at every start): published over the
  master's lane, unrestricted, as those two users are on the command line;
* ``kwargs`` with ``token``, or ``eauth``/``username``/``password``: the credentials go
  with the publication and the master checks them (``external_auth``) as it checks the
  CLI's ``-a``/``-T``; the requester is the eauth user; failed logins through this
  channel are slowed together (``login_client``: TCP on loopback does not tell who
  connected);
* ``key`` equal to the key written for a user of ``publisher_acl`` (the names, and the
  system users its patterns match, as Salt's ``client_acl_verify``): published as that
  user, whom the master holds to that user's ``publisher_acl`` rules as on the command
  line (``as_user`` on the lane, which only the master's own processes can use); such a
  key makes no runner or wheel call, as those rules name minion functions;
* anything else: Salt's ``AuthenticationError``.

The answer is Salt's: ``{enc: clear, load: {jid, minions, missing}}``; a denial is
``{error: {name: AuthorizationError, message: <the master's reason>}}``, a failed login
``AuthenticationError``, other refusals a plain error string.  Salt's ``LocalClient``
asks its job cache (``local_cache.get_load``) whether a jid exists before it waits for
returns, so each publication also gets the files Salt's ``local_cache`` would have
written under Salt's ``cachedir/jobs`` (``.load.p``, ``.minions.p``, ``jid``), and each
return of such a job seen on the bus (``note_return``) its ``<id>/return.p``, so that
``get_cli_returns`` after ``cmd_async`` finds the returns that came before it listened,
as from Salt's job cache; they are removed after ``keep_jobs_seconds``.  The returns
reach a listening client as ``salt/job/<jid>/ret/<id>`` events on Salt's bus sockets
(``raetsalt.saltbridge.ipcbus``).

``cmd: runner`` and ``cmd: wheel`` (Salt's ``RunnerClient``/``WheelClient``), and
``mk_token``/``get_token`` (Salt's ``salt.auth.Resolver``) go, with the same keys and
credentials checked here first, to the call handler the server is
given (``CallHandler``: ``raetsalt.api.lowcalls`` in the master's Salt-surfaces
process); without one they are refused as not served.

Limits: messages over ``MAX_FRAME`` bytes are refused by ZeroMQ (the peer is
disconnected); at most ``MAX_IN_FLIGHT`` publications wait for the master (more are
answered "busy"), of which ``MAX_LOGINS_IN_FLIGHT`` with credentials; one the master
does not acknowledge within ``ACK_WAIT`` seconds is answered with an error.  Malformed
requests get a short error and are counted.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import pwd
import re
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import msgpack

from raetsalt import protocol as p
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.errors import DaemonUnavailable
from raetsalt.log import Throttle, clip
from raetsalt.saltbridge.saltframe import MAX_FRAME, FrameError, parse_request, reply

log = logging.getLogger("raetsalt.saltbus")

MAX_IN_FLIGHT = 1024
MAX_LOGINS_IN_FLIGHT = 64
"""Of which with eauth/token credentials: the master holds back the answer to a failed
login, so a flood of bad passwords must not take the places of keyed publications."""
MAX_EARLY = 256
"""Jobs whose returns may be kept while their acknowledgement is on its way."""
MAX_KNOWN = 100_000
"""Jids published here whose returns are written to Salt's job cache (oldest forgotten)."""
ACK_WAIT = 30.0
POLL_MS = 500
CLEAN_EVERY = 3600.0
_CREDENTIALS = ("token", "eauth", "username", "password")
TOKEN_CALLS = ("mk_token", "get_token")
"""Salt's ``salt.auth.Resolver`` calls (the CLI's ``-a``/``-T``, Salt's REST API)."""
CALLS = ("runner", "wheel", *TOKEN_CALLS)
"""The commands served by the call handler."""
LOGIN_CLIENT = "salt-local-request-channel"
_RET_TAG = re.compile(r"salt/job/(\d{20})/ret/([^/\x00]{1,255})\Z")


@dataclass(slots=True)
class _Waiting:
    identity: list[bytes]
    load: dict[str, Any]
    since: float
    login: bool


Done = Callable[[list[bytes], Any], None]
"""How a call handler answers a request (any thread): its ROUTER identity, the answer."""


class CallHandler(Protocol):
    """Runs Salt's runner, wheel and token calls of this channel (worker threads)."""

    def submit(self, identity: list[bytes], cmd: str, load: dict[str, Any],
               credentials: dict[str, Any], user: str) -> bool:
        """Start a call (``cmd``: one of ``CALLS``) whose answer goes to ``done`` later;
        False when it is too busy to take it.  ``credentials`` are the caller's eauth or
        token fields, or ``{}`` for a key holder (``user``)."""
        ...

    def close(self) -> None: ...


CallHandlers = Callable[[Mapping[str, Any], Done], CallHandler]
"""Makes the handler (on the first call) from raetsalt's master opts and ``done``."""


def auth_type(credentials: Mapping[str, Any]) -> str:
    """Salt's name of the kind of credentials: ``token``, ``eauth`` or ``user``."""
    if "token" in credentials:
        return "token"
    return "eauth" if "eauth" in credentials else "user"


def auth_error(kind: str, user: str | None = None) -> dict[str, Any]:
    """Salt's refusal of a runner or wheel call."""
    name = {"token": "TokenAuthenticationError", "eauth": "EauthAuthenticationError"}.get(
        kind, "UserAuthenticationError")
    text = f'Authentication failure of type "{kind}" occurred'
    if user is not None:
        text += f" for user {user}."
    elif kind != "user":
        text += "."  # Salt's user failure has no full stop
    return {"error": {"name": name, "message": text}}


def refusal(cmd: str, load: Mapping[str, Any]) -> Any:
    """Salt's answer to a call whose credentials are missing or malformed."""
    if cmd == "mk_token":
        return ""  # Salt's failed login
    if cmd == "get_token":
        return {} if "token" in load else False
    return auth_error(auth_type(load))


def write_keys(cachedir: str, users: list[str]) -> dict[str, str]:
    """A fresh random key per user in Salt's ``<cachedir>/.<user>_key`` (0400, owned by
    that user when this process may chown); ``{user: key}``."""
    os.makedirs(cachedir, mode=0o700, exist_ok=True)
    keys: dict[str, str] = {}
    for user in dict.fromkeys(users):
        key = secrets.token_urlsafe(60)
        path = os.path.join(cachedir, f".{user}_key")
        fd, tmp = tempfile.mkstemp(dir=cachedir, prefix=".key")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(key)
            os.chmod(tmp, 0o400)
            if os.geteuid() == 0:
                try:
                    os.chown(tmp, pwd.getpwnam(user).pw_uid, -1)
                except KeyError:
                    pass
            os.replace(tmp, path)
        except OSError:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        keys[user] = key
    return keys


MAX_ACL_USERS = 1024
"""System users given a key for publisher_acl's patterns, at most."""


def acl_users(publisher_acl: object) -> list[str]:
    """The system users ``publisher_acl`` names, or matches with one of its names taken as
    a regular expression (Salt's ``client_acl_verify``), sorted; at most
    ``MAX_ACL_USERS``."""
    if not isinstance(publisher_acl, Mapping):
        return []
    names = [str(n) for n in publisher_acl if str(n)]
    patterns = []
    for name in names:
        try:
            patterns.append(re.compile(name))
        except re.error:
            continue
    found: list[str] = []
    for entry in pwd.getpwall():
        user = entry.pw_name
        if user in names or any(pattern.fullmatch(user) for pattern in patterns):
            found.append(user)
            if len(found) >= MAX_ACL_USERS:
                break
    return sorted(found)


def jid_dir(jobs_dir: str, jid: str, hash_type: str) -> str:
    """Salt's ``local_cache`` directory of a jid."""
    digest = hashlib.new(hash_type, jid.encode()).hexdigest()
    return os.path.join(jobs_dir, digest[:2], digest[2:])


class RequestServer:
    """The ROUTER socket, the lane client it publishes through, and its thread."""

    def __init__(self, opts: Mapping[str, Any], salt_opts: Mapping[str, Any],
                 keys: Mapping[str, str], calls: CallHandlers | None = None,
                 unrestricted: Collection[str] = ("root",)) -> None:
        import zmq

        self.opts = opts
        self._make_calls = calls
        self.keys = dict(keys)
        self.unrestricted = frozenset(unrestricted)
        """Users whose key publishes without publisher_acl (root, the master's user); the
        others' keys publish as those users, under their publisher_acl rules."""
        self.jobs_dir = os.path.join(str(salt_opts["cachedir"]), "jobs")
        self.hash_type = str(salt_opts.get("hash_type") or "sha256")
        self.keep_seconds = float(salt_opts.get("keep_jobs_seconds") or 86400)
        self.write_cache = salt_opts.get("master_job_cache", "local_cache") == "local_cache"
        self.drops: Counter[str] = Counter()
        self.published = 0
        self._throttle = Throttle()
        self._waiting: dict[str, _Waiting] = {}
        self._ctx = zmq.Context()
        self.sock = self._ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)
        host = "::1" if salt_opts.get("ipv6") else "127.0.0.1"
        if ":" in host:
            self.sock.setsockopt(zmq.IPV6, 1)
        self.endpoint = f"tcp://{'[::1]' if ':' in host else host}:{int(salt_opts['ret_port'])}"
        try:
            self.sock.bind(self.endpoint)
        except zmq.ZMQError:
            self.sock.close()
            self._ctx.term()
            raise
        self.lane = CommandClient("master", str(opts["sock_dir"]))
        self._next_clean = 0.0
        self._cache_lock = threading.Lock()
        self._known: OrderedDict[str, None] = OrderedDict()
        self._early: OrderedDict[str, list[tuple[str, dict[str, Any]]]] = OrderedDict()
        self._done: deque[tuple[list[bytes], Any]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._calls: CallHandler | None = None  # made on the first call

    # -- the thread -----------------------------------------------------------------------

    def serve(self, stop: threading.Event) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.lane.fileno(), zmq.POLLIN)
        poller.register(self._wake_r.fileno(), zmq.POLLIN)
        while not stop.is_set():
            ready = dict(poller.poll(POLL_MS))
            if self.sock in ready:
                for _ in range(64):
                    try:
                        frames = self.sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._request(frames)
            if self.lane.fileno() in ready or self.lane.pending():
                for body in self.lane.receive(0):
                    self._answer(body)
            if self._wake_r.fileno() in ready or self._done:
                self._answer_calls()
            now = time.monotonic()
            self._expire(now)
            if now >= self._next_clean:
                self._next_clean = now + CLEAN_EVERY
                self.clean(time.time())

    def _send(self, identity: list[bytes], value: Any) -> None:
        import zmq

        try:
            self.sock.send_multipart([*identity, reply(value)], zmq.NOBLOCK)
        except zmq.ZMQError:
            self._drop("reply_not_sent")

    def _request(self, frames: list[bytes]) -> None:
        if len(frames) < 3 or frames[-2] != b"":
            self._drop("not_a_req_envelope")
            return
        identity = frames[:-1]
        try:
            load = parse_request(frames[-1])
        except FrameError as exc:
            self._drop("bad_request", str(exc))
            self._send(identity, "bad load")
            return
        cmd = load.get("cmd")
        if cmd in CALLS and self._make_calls is not None:
            self._call(identity, str(cmd), load, self._make_calls)
            return
        if cmd != "publish":
            self._drop("not_served", clip(cmd))
            served = ("'publish', 'runner', 'wheel', 'mk_token' and 'get_token'"
                      if self._make_calls else "'publish'")
            self._send(identity, {"error": {
                "name": "SaltInvocationError",
                "message": f"the raetsalt master serves {served} to Salt's local clients"}})
            return
        if len(self._waiting) >= MAX_IN_FLIGHT:
            self._drop("busy")
            self._send(identity, "the raetsalt master is busy; try again")
            return
        credentials = self._credentials(load)
        if credentials is None:
            self._drop("unauthenticated")
            self._send(identity, {"error": {"name": "AuthenticationError",
                                            "message": "Authentication error occurred."}})
            return
        if credentials and sum(w.login for w in self._waiting.values()) >= MAX_LOGINS_IN_FLIGHT:
            self._drop("busy_logins")
            self._send(identity, "the raetsalt master is busy with logins; try again")
            return
        given = load.get("kwargs")
        kwargs: dict[str, Any] = given if isinstance(given, dict) else {}
        fields: dict[str, Any] = {
            "tgt": load.get("tgt"), "tgt_type": load.get("tgt_type") or "glob",
            "fun": load.get("fun"), "arg": load.get("arg") or [],
            "delimiter": kwargs.get("delimiter", ":"), "ret": load.get("ret") or "",
            "timeout": float(self.opts.get("timeout") or 5), **credentials}
        for key in ("ret_config", "ret_kwargs"):
            if kwargs.get(key):
                fields[key] = kwargs[key]
        try:
            req = self.lane.request(p.SHARE_PUBLISH, **fields)
        except DaemonUnavailable as exc:
            self._send(identity, f"the raetsalt master is not reachable: {exc}")
            return
        self._waiting[req] = _Waiting(identity, load, time.monotonic(), bool(credentials))

    # -- runner and wheel ---------------------------------------------------------------------

    def _call(self, identity: list[bytes], cmd: str, load: dict[str, Any],
              make: CallHandlers) -> None:
        credentials = self._credentials(load, load)
        if credentials is not None and "as_user" in credentials:
            # publisher_acl users publish only (their rules name minion functions).
            self._drop("acl_user_call")
            self._send(identity, {"error": {"name": "AuthorizationError", "message": (
                f"{cmd} calls need eauth or a token; the key of "
                f"{clip(credentials['as_user'], bare=True)} publishes only")}})
            return
        if credentials is None or (not credentials and cmd in TOKEN_CALLS):
            self._drop("unauthenticated")
            self._send(identity, refusal(cmd, load))
            return
        if self._calls is None:
            self._calls = make(self.opts, self._call_done)
        user = self._key_user(load) if not credentials else ""
        if not self._calls.submit(identity, cmd, load, credentials, user):
            self._drop("busy_calls")
            self._send(identity, "the raetsalt master is busy; try again")

    def _call_done(self, identity: list[bytes], answer: Any) -> None:
        """A worker's answer (any thread): handed to the channel's thread."""
        self._done.append((identity, answer))
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # the wake-up pipe is full: the thread is already woken

    def _answer_calls(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        while self._done:
            identity, answer = self._done.popleft()
            self._send(identity, answer)

    def _key_user(self, load: Mapping[str, Any]) -> str:
        """The user whose key ``load`` carries ("" for none); every key is compared."""
        key = load.get("key")
        if not isinstance(key, str) or not key:
            return ""
        found = ""
        for user, known in self.keys.items():
            if hmac.compare_digest(key.encode(), known.encode()) and not found:
                found = user
        return found

    def _credentials(self, load: Mapping[str, Any],
                     place: Any = None) -> dict[str, Any] | None:
        """The credentials of a request: ``{}`` for a known key, the eauth/token fields
        (taken from ``place``: publish has them in ``kwargs``, runner and wheel at the
        top), or None."""
        kwargs = load.get("kwargs") if place is None else place
        if isinstance(kwargs, dict) and any(k in kwargs for k in _CREDENTIALS):
            picked = {k: kwargs[k] for k in _CREDENTIALS if k in kwargs}
            if not all(isinstance(v, str) for v in picked.values()):
                return None
            if "eauth" in picked:
                # Failed logins through this channel are slowed in a bucket of their own
                # (the master's own user's logins on its lane are not).
                picked["login_client"] = LOGIN_CLIENT
            return picked
        user = self._key_user(load)
        if not user:
            return None
        return {} if user in self.unrestricted else {"as_user": user}

    def _answer(self, body: Mapping[str, Any]) -> None:
        req = body.get("req")
        if not isinstance(req, str) or p.share_of(body) != p.SHARE_PUB_ACK:
            return  # the returns also come here; Salt's client takes them from the bus
        waiting = self._waiting.pop(req, None)
        if waiting is None:
            return
        error = body.get("error")
        if error is not None:
            text = str(error)
            if text.startswith("Authentication failure"):
                value: Any = {"error": {"name": "AuthenticationError", "message": text}}
            elif body.get("denied"):
                value = {"error": {"name": "AuthorizationError", "message": text}}
            else:
                value = text
            self._send(waiting.identity, value)
            return
        jid = str(body.get("jid") or "")
        minions = [str(m) for m in body.get("minions") or []]
        missing = [str(m) for m in body.get("missing") or []]
        if not jid:
            self._send(waiting.identity, {"enc": "clear", "load": {
                "jid": None, "minions": [], "missing": missing,
                "error": f"Master could not resolve minions for target "
                         f"{clip(waiting.load.get('tgt'), bare=True)}"}})
            return
        if self.write_cache:
            self._save_load(jid, waiting.load, minions)
            with self._cache_lock:
                self._known[jid] = None
                while len(self._known) > MAX_KNOWN:
                    self._known.popitem(last=False)
                early = self._early.pop(jid, [])
            for minion, data in early:
                self._save_return(jid, minion, data)
        self.published += 1
        self._send(waiting.identity, {"enc": "clear", "load": {
            "jid": jid, "minions": minions, "missing": missing}})

    def _expire(self, now: float) -> None:
        for req, waiting in list(self._waiting.items()):
            if now - waiting.since > ACK_WAIT:
                del self._waiting[req]
                self._drop("no_ack")
                self._send(waiting.identity, "the raetsalt master did not acknowledge the "
                                             f"publication within {ACK_WAIT:g} s")

    # -- Salt's job cache marks ---------------------------------------------------------------

    def _save_load(self, jid: str, load: Mapping[str, Any], minions: list[str]) -> None:
        record = {k: v for k, v in load.items() if k not in ("key", "kwargs", "cmd")}
        record["jid"] = jid
        path = jid_dir(self.jobs_dir, jid, self.hash_type)
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            for name, value in ((".load.p", record), (".minions.p", minions)):
                data = msgpack.packb(value, use_bin_type=True, default=str)
                fd, tmp = tempfile.mkstemp(dir=path, prefix=".tmp")
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, os.path.join(path, name))
            with open(os.path.join(path, "jid"), "w", encoding="utf-8") as handle:
                handle.write(jid)
        except OSError as exc:
            self._drop("job_cache_unwritable", str(exc))

    def note_return(self, tag: str, data: Mapping[str, Any]) -> None:
        """A bus event (any thread): a return of a job published here goes to Salt's job
        cache (``<jid dir>/<id>/return.p``)."""
        if not self.write_cache or not tag.startswith("salt/job/"):
            return
        found = _RET_TAG.match(tag)
        if found is None or "return" not in data:
            return
        jid, minion = found.groups()
        if minion.startswith("."):
            return
        with self._cache_lock:
            if jid not in self._known:
                early = self._early.setdefault(jid, [])
                if len(early) < MAX_IN_FLIGHT:
                    early.append((minion, dict(data)))
                while len(self._early) > MAX_EARLY:
                    self._early.popitem(last=False)
                return
        self._save_return(jid, minion, data)

    def _save_return(self, jid: str, minion: str, data: Mapping[str, Any]) -> None:
        path = os.path.join(jid_dir(self.jobs_dir, jid, self.hash_type), minion)
        record = {k: data[k] for k in ("return", "retcode", "success") if k in data}
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            files = [("return.p", record)] + ([("out.p", data["out"])] if "out" in data else [])
            for name, value in files:
                fd, tmp = tempfile.mkstemp(dir=path, prefix=".tmp")
                with os.fdopen(fd, "wb") as handle:
                    handle.write(msgpack.packb(value, use_bin_type=True, default=str))
                os.replace(tmp, os.path.join(path, name))
        except OSError as exc:
            self._drop("job_cache_unwritable", str(exc))

    def clean(self, now: float) -> int:
        """Remove the job marks older than ``keep_jobs_seconds``; how many."""
        removed = 0
        try:
            tops = os.listdir(self.jobs_dir)
        except OSError:
            return 0
        for top in tops:
            top_path = os.path.join(self.jobs_dir, top)
            if len(top) != 2 or not os.path.isdir(top_path):
                continue
            for rest in os.listdir(top_path):
                job = os.path.join(top_path, rest)
                try:
                    old = now - os.stat(os.path.join(job, ".load.p")).st_mtime > self.keep_seconds
                except OSError:
                    continue
                if old:
                    shutil.rmtree(job, ignore_errors=True)
                    removed += 1
        return removed

    def _drop(self, reason: str, detail: str = "") -> None:
        self.drops[reason] += 1
        count = self._throttle.note(reason, time.monotonic())
        if count:
            log.warning("Salt's local request channel: %s%s (%d since the last report)",
                        reason, f": {clip(detail, 200, bare=True)}" if detail else "", count)

    def close(self) -> None:
        if self._calls is not None:
            self._calls.close()
        self._wake_r.close()
        self._wake_w.close()
        self.sock.close()
        self._ctx.term()
        self.lane.close()
