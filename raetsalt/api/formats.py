"""Request bodies in and responses out, as rest_cherrypy reads and writes them.

In: ``application/json``, ``application/x-yaml`` and ``text/yaml`` (safe loading only,
nesting bounded, no aliases), ``application/x-www-form-urlencoded`` (one chunk; a repeated key
becomes a list, ``arg`` is always a list) and ``text/plain`` (JSON if it parses, else
the text).  Another type is answered 406, as Salt does; a body that does not parse is
400.

Out: JSON or YAML by the request's ``Accept`` (JSON when it accepts anything); 406 when
it accepts neither.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

import yaml
from cheroot.errors import MaxSizeExceeded

from raetsalt.wire.body import nests_deeper_than

MAX_DEPTH = 32
JSON = "application/json"
YAML = "application/x-yaml"
OUT_TYPES = (JSON, YAML)
FORM = "application/x-www-form-urlencoded"
IN_TYPES = (JSON, YAML, "text/yaml", FORM, "text/plain")


class BadBody(Exception):
    """The body cannot be read: ``status`` (400, 406 or 413) and a short reason."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def media_of(content_type: str | None) -> str:
    """A ``Content-Type`` header's media type, lower case (a form when there is none)."""
    return str(content_type or "").split(";")[0].strip().lower() or FORM


def read_body(read: Callable[[], bytes]) -> bytes:
    """The body ``read`` returns (Cheroot's reader, bounded by ``max_request_body_size``);
    413 over that bound, 400 when the client goes away or stalls."""
    try:
        return read()
    except MaxSizeExceeded:
        raise BadBody(413, "Request Entity Too Large") from None
    except OSError as exc:  # a chunked body over the limit, a client gone or slow
        if "Too Large" in str(exc):
            raise BadBody(413, "Request Entity Too Large") from None
        raise BadBody(400, "the request body could not be read") from None


def _checked(value: Any, what: str) -> Any:
    if nests_deeper_than(value, MAX_DEPTH):
        raise BadBody(400, f"{what} nests deeper than {MAX_DEPTH}")
    return value


def parse(content_type: str, body: bytes) -> Any:
    """The data of a request body of ``content_type`` (its media type, lower case)."""
    if content_type not in IN_TYPES:
        raise BadBody(406, "Content type not supported")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadBody(400, "the body is not UTF-8") from None
    if content_type == JSON:
        try:
            return _checked(json.loads(text), "the JSON document")
        except (ValueError, RecursionError):
            raise BadBody(400, "Invalid JSON document") from None
    if content_type in (YAML, "text/yaml"):
        try:
            # Aliases would let a small document expand into a huge one when it is
            # walked or re-encoded (a "billion laughs"): refused.
            if any(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text)):
                raise BadBody(400, "YAML aliases are not accepted")
            return _checked(yaml.safe_load(text), "the YAML document")
        except (yaml.YAMLError, RecursionError, ValueError, TypeError):
            raise BadBody(400, "Invalid YAML document") from None
    if content_type == "text/plain":
        try:
            return _checked(json.loads(text), "the document")
        except (ValueError, RecursionError):
            return text
    return form(text)


def form(text: str) -> dict[str, Any]:
    """A form-encoded chunk: repeated keys are lists, ``arg`` always is one."""
    out: dict[str, Any] = {}
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=False,
                          max_num_fields=1000)
    except ValueError:
        raise BadBody(400, "too many form fields") from None
    for key, value in pairs:
        if key in out:
            previous = out[key]
            out[key] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            out[key] = value
    if "arg" in out and not isinstance(out["arg"], list):
        out["arg"] = [out["arg"]]
    return out


def _quality(accept: str) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for part in accept.split(",")[:32]:
        fields = [f.strip() for f in part.split(";")]
        media, q = fields[0].lower(), 1.0
        for param in fields[1:]:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        if media:
            out.append((media, q))
    return out


def choose(accept: str | None) -> str | None:
    """The response type for an ``Accept`` header (None: nothing we can give)."""
    if not accept:
        return JSON
    best: tuple[float, int, str] | None = None
    for media, q in _quality(accept):
        if q <= 0:
            continue
        for rank, offer in enumerate(OUT_TYPES):
            major = offer.split("/")[0]
            if media in (offer, "*/*", f"{major}/*") or (
                    offer == YAML and media in ("text/yaml", "application/yaml")):
                key = (q, -rank, offer)
                if best is None or key > best:
                    best = key
    return None if best is None else best[2]


def render(data: Any, media: str) -> bytes:
    if media == YAML:
        text = yaml.safe_dump(_plain(data), default_flow_style=False, allow_unicode=True)
        return str(text).encode()
    return json.dumps(data, default=str).encode()


def _plain(value: Any) -> Any:
    """Only types safe_dump takes (tuples as lists, others as their text)."""
    if isinstance(value, Mapping):
        return {str(k) if not isinstance(k, int | float | bool) else k: _plain(v)
                for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
