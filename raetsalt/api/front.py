"""``POST /`` with a lowstate answered straight from the WSGI environ.

``POST /`` is how every client runs a command (pepper, SaltGUI, a CI job).  CherryPy's
machinery for one request (its request and response objects, the configuration merged
for the path, the hooks) costs about 0.4 ms of the API process's time, as much as the
rest of the HTTP work together.  The front sits between Cheroot and CherryPy and answers
the ``POST /`` requests it can answer exactly as the CherryPy handler does: the same
status line, the same headers in the same order, the same body, counted in ``/stats``
alike.  Every other request goes to CherryPy untouched: another method or URL, a query
string, a chunked body, no body, an ``Origin`` header (CORS answers carry more headers),
a media type that is not read, an ``Accept`` that nothing can be rendered in (406), or
while the access log is written (CherryPy writes its lines).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import cherrypy
from cherrypy.lib import httputil

from . import formats
from .config import ApiConfig
from .lowstate import Dispatcher, lowstate_of

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

SERVER = f"CherryPy/{cherrypy.__version__}"
"""The ``Server`` header CherryPy's own answers carry."""


class Counters(Protocol):
    def count(self, status: int) -> None: ...


class Api(Protocol):
    """What the front uses of the CherryPy application (``app.Api``)."""

    @property
    def config(self) -> ApiConfig: ...

    @property
    def dispatcher(self) -> Dispatcher: ...

    @property
    def counters(self) -> Counters: ...

    def failure(self, exc: Exception, method: str, path: str) -> tuple[int, str]: ...


class LowstateFront:
    """The WSGI application Cheroot calls: ``POST /`` answered here, the rest by ``app``
    (CherryPy's tree)."""

    def __init__(self, app: WSGIApplication, api: Api, *, access_logged: bool) -> None:
        self.app = app
        self.api = api
        self.access_logged = access_logged
        self.answered = 0
        """Requests answered here (the others went to CherryPy)."""

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse
                 ) -> Iterable[bytes]:
        taken = self._taken(environ)
        if taken is None:
            return self.app(environ, start_response)
        media_in, media_out, length = taken
        api = self.api
        status = 200
        try:
            raw = formats.read_body(lambda: environ["wsgi.input"].read(length))
            data = formats.parse(media_in, raw) if raw else None
            token = str(environ.get("HTTP_X_AUTH_TOKEN") or "").strip() or None
            client = f"http:{environ.get('REMOTE_ADDR', '')}"
            body = formats.render(
                {"return": api.dispatcher.run(lowstate_of(data), token, client)}, media_out)
        except Exception as exc:  # noqa: BLE001 - answered, never with a traceback
            status, text = api.failure(exc, "POST", "/")
            body = formats.render({"status": status, "return": text}, media_out)
        finally:
            api.counters.count(status)
        self.answered += 1
        code, reason, _message = httputil.valid_status(status)
        headers = [("Content-Type", media_out), ("Server", SERVER),
                   ("Date", httputil.HTTPDate()), ("X-Content-Type-Options", "nosniff")]
        if api.config.expire_responses:
            headers.append(("Cache-Control", "no-store"))
        headers.append(("Content-Length", str(len(body))))
        start_response(f"{code} {reason}", headers)
        return [body]

    def _taken(self, environ: WSGIEnvironment) -> tuple[str, str, int] | None:
        """(media type in, media type out, body length) of a request answered here."""
        if (self.access_logged or environ.get("REQUEST_METHOD") != "POST"
                or environ.get("PATH_INFO") != "/" or environ.get("SCRIPT_NAME")
                or environ.get("QUERY_STRING") or "HTTP_ORIGIN" in environ
                or "HTTP_TRANSFER_ENCODING" in environ):
            return None
        length = str(environ.get("CONTENT_LENGTH") or "")
        if not (length.isascii() and length.isdigit()) or int(length) == 0:
            return None
        media_in = formats.media_of(environ.get("CONTENT_TYPE"))
        media_out = formats.choose(environ.get("HTTP_ACCEPT"))
        if media_in not in formats.IN_TYPES or media_out is None:
            return None
        return media_in, media_out, int(length)
