"""The HTTP side: rest_cherrypy's URLs on CherryPy, each a thin handler over
``lowstate``, ``wheel``, ``sse`` and ``auth``.

Every handler goes through ``_endpoint``: the method is checked, the body read (CherryPy
bounds it: ``max_request_body_size``, 413) and parsed (``formats``), the handler's data
rendered as the request's ``Accept`` asks, and every failure answered with a short
``{"status", "return"}`` document; nothing ever answers with a traceback (an unexpected
error is logged on the server and answered 500 "An unexpected error occurred").

Tokens: the ``X-Auth-Token`` header (or a lowstate's ``token``); the ``session_id``
cookie that ``/login`` sets is honoured on ``GET /events`` only (the read-only stream a
browser's EventSource opens without headers), so that a page of another site cannot
make a logged-in browser run commands.  ``/events`` refuses query parameters, as Salt
3008 does (a token in a URL ends up in logs).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import cherrypy
from cherrypy._cpwsgi_server import CPWSGIServer
from cherrypy.lib import static as cp_static

from raetsalt.errors import DaemonUnavailable
from raetsalt.log import Throttle, clip

from . import formats
from .auth import COOKIE, Tokens
from .config import ApiConfig
from .formats import media_of, read_body
from .front import LowstateFront
from .keytar import key_tarball
from .lowstate import CLIENTS, Dispatcher, HttpProblem, lowstate_of, unauthorized
from .master import MasterLink, MasterTimeout, Refused
from .sse import EventHub

log = logging.getLogger("raetsalt.api")

HOOK_HEADERS_DROPPED = frozenset({"x-auth-token", "cookie", "authorization",
                                  "proxy-authorization"})
"""Request headers never copied into a webhook event (credentials)."""
TOKEN_RECHECK = 1.0
"""Seconds between checks that an event stream's token is still valid."""


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.time()
        self.requests = 0
        self.by_status: dict[int, int] = {}

    def count(self, status: int) -> None:
        with self.lock:
            self.requests += 1
            self.by_status[status] = self.by_status.get(status, 0) + 1


_F = TypeVar("_F", bound=Callable[..., Any])


def _exposed(handler: _F) -> _F:
    """A URL handler for CherryPy's dispatcher (``cherrypy.expose``, typed)."""
    setattr(handler, "exposed", True)  # noqa: B010 - CherryPy reads the attribute
    return handler


def _streamed(handler: _F) -> _F:
    """A handler whose answer is written as it is produced (the event stream)."""
    setattr(handler, "_cp_config", {"response.stream": True})  # noqa: B010
    return handler


def _status_of(value: Any) -> int:
    try:
        return int(str(value).split()[0])
    except (ValueError, IndexError):
        return 500


def _respond(data: Any, status: int = 200) -> bytes:
    media = formats.choose(cherrypy.request.headers.get("Accept"))
    if media is None:
        media, status = formats.JSON, 406
        data = {"status": 406, "return": "Not Acceptable: application/json or "
                                         "application/x-yaml only"}
    cherrypy.response.status = status
    cherrypy.response.headers["Content-Type"] = media
    return formats.render(data, media)


def _problem(status: int, text: str) -> bytes:
    """An error document: in the type the client accepts, else JSON (the status says
    what went wrong, not that the error cannot be written in its type)."""
    media = formats.choose(cherrypy.request.headers.get("Accept")) or formats.JSON
    cherrypy.response.status = status
    cherrypy.response.headers["Content-Type"] = media
    return formats.render({"status": status, "return": text}, media)


class Api:
    """The exposed URL tree (mounted at ``/``)."""

    def __init__(self, opts: Mapping[str, Any], config: ApiConfig, link: MasterLink,
                 tokens: Tokens, dispatcher: Dispatcher, hub: EventHub) -> None:
        self.opts = opts
        self.config = config
        self.link = link
        self.tokens = tokens
        self.dispatcher = dispatcher
        self.hub = hub
        self.counters = Stats()
        self._errors = Throttle(60.0)

    # -- plumbing -------------------------------------------------------------------------

    @staticmethod
    def _client_name() -> str:
        return f"http:{cherrypy.request.remote.ip}"

    @staticmethod
    def _header_token() -> str | None:
        value = cherrypy.request.headers.get("X-Auth-Token")
        return value.strip() if isinstance(value, str) and value.strip() else None

    def _token(self, *, cookie: bool = False) -> str | None:
        token = self._header_token()
        if token is None and cookie:
            morsel = cherrypy.request.cookie.get(COOKIE)
            token = morsel.value if morsel is not None else None
        return token

    def _valid_token(self, *, cookie: bool = False) -> str:
        token = self._token(cookie=cookie)
        if token is None or self.tokens.get(token) is None:
            raise unauthorized()
        return token

    @staticmethod
    def _read() -> tuple[bytes, Any]:
        """The request body and its data (None when there is no body)."""
        request = cherrypy.request
        length = request.headers.get("Content-Length")
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if length in (None, "0") and not chunked:
            return b"", None
        raw = read_body(request.rfile.read)
        if not raw:
            return b"", None
        return raw, formats.parse(media_of(request.headers.get("Content-Type")), raw)

    def _body(self) -> Any:
        return self._read()[1]

    def _lowstate(self) -> list[Any]:
        return lowstate_of(self._body())

    def _wants_app(self) -> bool:
        """A browser asking for a page: serve the web app (as rest_cherrypy does)."""
        if self.config.app is None or cherrypy.request.method != "GET":
            return False
        accept = cherrypy.request.headers.get("Accept", "")
        if not accept or accept.strip() == "*/*":
            return False
        first = str(accept).split(",")[0].split(";")[0].strip().lower()
        return first == "text/html"

    def _app(self) -> Any:
        assert self.config.app is not None
        cherrypy.response.headers["Cache-Control"] = "no-cache"
        return cp_static.serve_file(os.path.abspath(self.config.app), "text/html")

    def _cors(self) -> None:
        origin = cherrypy.request.headers.get("Origin")
        if origin and (origin in self.config.cors_origins or "*" in self.config.cors_origins):
            headers = cherrypy.response.headers
            headers["Access-Control-Allow-Origin"] = origin
            headers["Access-Control-Allow-Credentials"] = "true"
            headers["Access-Control-Expose-Headers"] = "X-Auth-Token"
            headers["Vary"] = "Origin"
            if cherrypy.request.method == "OPTIONS":
                headers["Access-Control-Allow-Methods"] = "GET, POST"
                headers["Access-Control-Allow-Headers"] = ("X-Auth-Token, Content-Type, "
                                                           "Accept")

    def _guard(self, methods: tuple[str, ...], handler: Callable[..., Any], *args: Any,
               **kwargs: Any) -> Any:
        request, headers = cherrypy.request, cherrypy.response.headers
        headers["X-Content-Type-Options"] = "nosniff"
        if self.config.expire_responses:
            headers["Cache-Control"] = "no-store"
        self._cors()
        status = 200
        try:
            if request.method == "OPTIONS" and self.config.cors_origins:
                return b""
            if self._wants_app():
                return self._app()
            if request.method not in methods:
                headers["Allow"] = ", ".join(methods)
                raise HttpProblem(405, f"{request.method} is not allowed here")
            result = handler(*args, **kwargs)
            if isinstance(result, tuple):
                status, data = result
            else:
                data = result
            if isinstance(data, bytes | Iterator):
                return data
            out = _respond(data, status)
            status = _status_of(cherrypy.response.status)
            return out
        except Exception as exc:  # noqa: BLE001 - answered, never with a traceback
            status, text = self.failure(exc, request.method, request.path_info)
            return _problem(status, text)
        finally:
            self.counters.count(status)

    def failure(self, exc: Exception, method: str, path: str) -> tuple[int, str]:
        """The status and text that answer a handler's failure; an unexpected one is
        logged (with its traceback, at most once a minute) and answered 500."""
        match exc:
            case HttpProblem():
                return exc.status, exc.text
            case formats.BadBody():
                return exc.status, str(exc)
            case cherrypy.HTTPError():
                return exc.status, clip(exc._message or "", bare=True)
            case DaemonUnavailable():
                return 503, str(exc)
            case MasterTimeout():
                return 504, str(exc)
            case Refused():
                return (401 if exc.denied else 400), str(exc)
        if self._errors.note("unexpected", time.monotonic()):
            log.error("unexpected error serving %s %s", method, clip(path), exc_info=exc)
        return 500, "An unexpected error occurred"

    # -- URLs -----------------------------------------------------------------------------

    @_exposed
    def index(self, *path: str, **params: Any) -> Any:
        if path:
            return self.default(*path, **params)

        def handle() -> Any:
            if cherrypy.request.method == "GET":
                return {"return": "Welcome", "clients": list(CLIENTS)}
            return {"return": self.dispatcher.run(self._lowstate(), self._header_token(),
                                                  self._client_name())}
        return self._guard(("GET", "POST"), handle)

    @_exposed
    def run(self, **params: Any) -> Any:
        """Salt's ``/run``: credentials in each chunk, never a session."""
        def handle() -> Any:
            return {"return": self.dispatcher.run(self._lowstate(), None,
                                                  self._client_name())}
        return self._guard(("POST",), handle)

    @_exposed
    def login(self, **params: Any) -> Any:
        def handle() -> Any:
            if cherrypy.request.method == "GET":
                cherrypy.response.headers["WWW-Authenticate"] = "Session"
                return {"status": 200, "return": "Please log in"}
            data = self._body()
            creds = data[0] if isinstance(data, list) and data else data
            if not isinstance(creds, Mapping):
                raise HttpProblem(400, 'Require "username", "password", and "eauth" params')
            eauth, username, password = (creds.get("eauth"), creds.get("username"),
                                         creds.get("password"))
            if not (isinstance(eauth, str) and isinstance(username, str)
                    and isinstance(password, str)):
                raise HttpProblem(400, 'Require "username", "password", and "eauth" params')
            try:
                reply = self.link.login(eauth, username, password, self._client_name())
            except Refused:
                raise unauthorized("Could not authenticate using provided credentials"
                                   ) from None
            info = self.tokens.get(reply["token"])
            if info is None:
                raise unauthorized("Could not authenticate using provided credentials")
            headers = cherrypy.response.headers
            headers["X-Auth-Token"] = info.token
            cookie = cherrypy.response.cookie
            cookie[COOKIE] = info.token
            cookie[COOKIE]["path"] = "/"
            cookie[COOKIE]["httponly"] = True
            cookie[COOKIE]["samesite"] = "Strict"
            cookie[COOKIE]["max-age"] = str(max(0, int(info.expire - time.time())))
            if self.config.tls:
                cookie[COOKIE]["secure"] = True
            return {"return": [{"token": info.token, "expire": info.expire,
                                "start": info.start, "user": info.name,
                                "eauth": info.eauth, "perms": self.tokens.perms(info)}]}
        return self._guard(("GET", "POST"), handle)

    @_exposed
    def logout(self, **params: Any) -> Any:
        def handle() -> Any:
            token = self._valid_token(cookie=True)
            self.tokens.remove(token)
            cookie = cherrypy.response.cookie
            cookie[COOKIE] = ""
            cookie[COOKIE]["path"] = "/"
            cookie[COOKIE]["max-age"] = "0"
            return {"return": "Your token has been cleared"}
        return self._guard(("POST",), handle)

    @_exposed
    def minions(self, mid: str | None = None, **params: Any) -> Any:
        def handle() -> Any:
            token = self._header_token()
            if token is None:
                raise unauthorized()
            if cherrypy.request.method == "GET":
                chunk = {"client": "local", "tgt": mid or "*", "fun": "grains.items"}
                return {"return": self.dispatcher.run([chunk], token, self._client_name())}
            lowstate = [{**chunk, "client": "local_async"} for chunk in self._lowstate()
                        if isinstance(chunk, Mapping)]
            jobs = self.dispatcher.run(lowstate, token, self._client_name())
            return 202, {"return": jobs, "_links": {"jobs": [
                {"href": f"/jobs/{job['jid']}"} for job in jobs if isinstance(job, dict)]}}
        return self._guard(("GET", "POST"), handle)

    @_exposed
    def jobs(self, jid: str | None = None, **params: Any) -> Any:
        def handle() -> Any:
            token = self._header_token()
            if token is None:
                raise unauthorized()
            if jid is None:
                chunk = {"client": "runner", "fun": "jobs.list_jobs"}
                return {"return": self.dispatcher.run([chunk], token, self._client_name())}
            chunk = {"client": "runner", "fun": "jobs.list_job", "jid": jid}
            info = self.dispatcher.run([chunk], token, self._client_name())[0]
            results = info.get("Result", {}) if isinstance(info, Mapping) else {}
            returns = {minion: (ret.get("return") if isinstance(ret, Mapping) else ret)
                       for minion, ret in results.items()}
            return {"info": [info], "return": [returns]}
        return self._guard(("GET",), handle)

    @_exposed
    def keys(self, mid: str | None = None, **params: Any) -> Any:
        def handle() -> Any:
            token = self._header_token()
            if cherrypy.request.method == "POST":
                return self._gen_accept(token)
            if token is None:
                raise unauthorized()
            chunk: dict[str, Any] = ({"client": "wheel", "fun": "key.finger", "match": mid}
                                     if mid else {"client": "wheel", "fun": "key.list_all"})
            result = self.dispatcher.run([chunk], token, self._client_name())[0]
            return {"return": result.get("data", {}).get("return", {})}
        return self._guard(("GET", "POST"), handle)

    def _gen_accept(self, token: str | None) -> bytes:
        """``POST /keys``: Salt's ``key.gen_accept`` as the request's user (its
        credentials in the body, or a token), answered with the new minion's key files as
        a tar (``raetsalt.api.keytar``)."""
        lowstate = self._lowstate()
        if len(lowstate) != 1 or not isinstance(lowstate[0], Mapping):
            raise HttpProblem(400, "one set of key parameters is needed")
        given = lowstate[0]
        mid = given.get("mid", given.get("id_"))
        if not isinstance(mid, str) or not mid:
            raise HttpProblem(400, "a minion id ('mid') is needed")
        chunk = {k: v for k, v in given.items()
                 if k in ("username", "password", "eauth", "token", "keysize", "force")}
        chunk.update(client="wheel", fun="key.gen_accept", id_=mid)
        result = self.dispatcher.run([chunk], token, self._client_name())[0]
        data = result.get("data", {})
        ret = data.get("return")
        if not data.get("success"):
            raise HttpProblem(400, str(ret))
        if not ret:
            raise HttpProblem(409, f"minion {clip(mid)} already has a key on the master "
                                   "(force=True replaces it)")
        tar = key_tarball(str(ret["priv"]).encode(), str(ret["pub"]))
        headers = cherrypy.response.headers
        headers["Content-Type"] = "application/x-tar"
        headers["Content-Disposition"] = f'attachment; filename="saltkeys-{mid}.tar"'
        headers["Cache-Control"] = "no-cache"
        return tar

    @_exposed
    @_streamed
    def events(self, **params: Any) -> Any:
        def handle() -> Any:
            if params:
                raise HttpProblem(400, "The /events endpoint takes no query parameters; "
                                       "send the token in the X-Auth-Token header or the "
                                       "session cookie set by /login")
            token = self._valid_token(cookie=True)
            sub = self.hub.subscribe()
            if sub is None:
                raise HttpProblem(503, "too many event streams open; retry later")
            headers = cherrypy.response.headers
            headers["Content-Type"] = "text/event-stream"
            headers["Cache-Control"] = "no-cache"
            headers["X-Accel-Buffering"] = "no"
            checked = [time.monotonic()]

            def still_valid() -> bool:
                now = time.monotonic()
                if now - checked[0] < TOKEN_RECHECK:
                    return True
                checked[0] = now
                return self.tokens.get(token) is not None

            return self.hub.stream(sub, still_valid)
        return self._guard(("GET",), handle)

    def hook(self, *path: str) -> Any:
        """``POST <webhook_url>/...`` (reached through ``default``)."""
        def handle() -> Any:
            if not self.config.webhook_disable_auth:
                self._valid_token()
            if any(not part or len(part) > 256 for part in path) or len(path) > 32:
                raise HttpProblem(400, "bad hook path")
            raw, data = self._read()
            if isinstance(data, list) and len(data) == 1 and isinstance(data[0], Mapping):
                data = data[0]
            headers = {k: v for k, v in cherrypy.request.headers.items()
                       if k.lower() not in HOOK_HEADERS_DROPPED}
            tag = "/".join(["salt", "netapi", "hook", *path])
            ok = self.link.fire(tag, {"body": raw.decode(errors="replace"), "post": data,
                                      "headers": headers})
            return {"success": ok}
        return self._guard(("POST",), handle)

    @_exposed
    def stats(self, **params: Any) -> Any:
        def handle() -> Any:
            self._valid_token()
            with self.counters.lock:
                by_status = {str(k): v for k, v in sorted(self.counters.by_status.items())}
                requests = self.counters.requests
            return {"raetsalt-api": {
                "Uptime": time.time() - self.counters.started,
                "Requests": requests,
                "Requests by status": by_status,
                "Event streams": self.hub.clients(),
                "Events": self.hub.events,
                "Event streams dropped (slow readers)": self.hub.dropped,
            }}
        return self._guard(("GET",), handle)

    @_exposed
    def default(self, *path: str, **params: Any) -> Any:
        """Anything else: the web app under ``app_path`` (or for a browser), else 404."""
        full = "/" + "/".join(path)
        app_path = self.config.app_path

        hook = self.config.webhook_url
        if full == hook or full.startswith(hook + "/"):
            return self.hook(*path[len(hook.strip("/").split("/")):])

        def handle() -> Any:
            if self.config.app is not None and (full == app_path
                                                or full.startswith(app_path + "/")):
                return self._app()
            raise HttpProblem(404, "Not Found")
        return self._guard(("GET", "POST"), handle)


def _error_page(status: str, message: str, traceback: str, version: str) -> str:
    """CherryPy's own errors (bad request line, 404 before a handler...): one short
    JSON document, never the traceback."""
    code = _status_of(status)
    cherrypy.response.headers["Content-Type"] = formats.JSON
    return formats.render({"status": code, "return": clip(message, bare=True)},
                          formats.JSON).decode()


def mount(api: Api, config: ApiConfig) -> None:
    conf: dict[str, Any] = {
        "/": {
            "request.process_request_body": False,
            "request.show_tracebacks": False,
            "request.show_mismatched_params": False,
            "error_page.default": _error_page,
            "tools.encode.on": False,
            "tools.trailing_slash.on": False,
        },
    }
    if config.static is not None:
        conf[config.static_path] = {"tools.staticdir.on": True,
                                    "tools.staticdir.dir": os.path.abspath(config.static)}
    cherrypy.tree.mount(api, "/", conf)


def serve_through_front(api: Api, *, access_logged: bool) -> LowstateFront:
    """Cheroot's server for ``cherrypy.server`` (its settings as configured), calling
    the lowstate front first (``front``)."""
    server = CPWSGIServer(cherrypy.server)
    front = LowstateFront(server.wsgi_app, api, access_logged=access_logged)
    server.wsgi_app = front
    cherrypy.server.instance = server
    return front


def server_config(config: ApiConfig) -> dict[str, Any]:
    out: dict[str, Any] = {
        "environment": "production",
        "engine.autoreload.on": False,
        "log.screen": False,
        "checker.on": False,
        "server.socket_host": config.host,
        "server.socket_port": config.port,
        "server.thread_pool": config.thread_pool,
        "server.socket_timeout": config.socket_timeout,
        "server.max_request_body_size": config.max_request_body_size,
        "server.max_request_header_size": config.max_header_size,
        "server.shutdown_timeout": 1,
        "request.show_tracebacks": False,
    }
    if config.tls:
        out.update({"server.ssl_module": "builtin",
                    "server.ssl_certificate": config.ssl_crt,
                    "server.ssl_private_key": config.ssl_key})
    return out

