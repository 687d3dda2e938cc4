"""A publish record or a return as the row Salt's pgjsonb tables hold (pure).

The loop encodes (a record that cannot be stored fails in the caller, as with the file
job cache); the spool carries rows as msgpack lists; the shipper writes them.  The text
is what ``jsonb`` accepts: PostgreSQL refuses the character U+0000 and unpaired
surrogates in JSON strings, so those become U+FFFD (a minion's output may hold either);
a row the database would refuse would otherwise stop every row after it.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from raetsalt.errors import KeepError
from raetsalt.services.jids import JID

FUN_WIDTH = 50
"""``salt_returns.fun`` is ``varchar(50)``: a longer name is cut (``full_ret`` keeps it)."""
_MINION = re.compile(r"[^\x00]{1,255}\Z")
_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")
"""An escaped U+0000 in JSON text (an even run of backslashes before it is text)."""


class LoadRow(NamedTuple):
    """A job's publish record (``jids``)."""

    jid: str
    load: str
    at: float


class ReturnRow(NamedTuple):
    """A minion's return (``salt_returns``); ``full_ret`` holds ``return`` too."""

    jid: str
    minion: str
    fun: str
    success: str
    full_ret: str
    at: float


class CleanRow(NamedTuple):
    """Remove jobs started before ``jid`` and rows older than ``before`` (epoch)."""

    jid: str
    before: float


Row = LoadRow | ReturnRow | CleanRow
_KINDS: dict[str, type[LoadRow] | type[ReturnRow] | type[CleanRow]] = {
    "load": LoadRow, "ret": ReturnRow, "clean": CleanRow}
_NAMES = {kind: name for name, kind in _KINDS.items()}


def json_text(data: Any, what: str) -> str:
    """JSON text ``jsonb`` takes (module docstring); ``KeepError`` if there is none."""
    try:
        text = json.dumps(data, default=repr, ensure_ascii=False)
    except (RecursionError, ValueError) as exc:  # nested too deep, circular
        raise KeepError(f"{what}: cannot be stored as JSON: {exc}") from None
    if "\\u0000" in text:
        text = _NUL.sub(r"\1\\ufffd", text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # unpaired surrogates
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def check_jid(jid: str) -> str:
    if not isinstance(jid, str) or not JID.match(jid):
        raise KeepError(f"not a jid: {jid!r}")
    return jid


def load_row(jid: str, load: dict[str, Any], at: float) -> LoadRow:
    check_jid(jid)
    return LoadRow(jid, json_text({**load, "jid": jid}, "job record"), at)


def return_row(jid: str, minion: str, ret: dict[str, Any], at: float) -> ReturnRow:
    """``ret`` is the job service's: ``{return, retcode, success, fun, fun_args}``; the
    row's ``full_ret`` is Salt's shape (those keys plus ``jid`` and ``id``)."""
    check_jid(jid)
    if not isinstance(minion, str) or not _MINION.match(minion):
        raise KeepError(f"not a minion id for the job cache: {minion!r}")
    fun = str(ret.get("fun", ""))[:FUN_WIDTH]
    success = "true" if ret.get("success") else "false"
    full = json_text({**ret, "jid": jid, "id": minion}, f"return of {minion}")
    return ReturnRow(jid, minion, fun, success, full, at)


def from_full_ret(full: Any) -> dict[str, Any] | None:
    """A stored ``full_ret`` as the job service's return (without ``jid``/``id``)."""
    if not isinstance(full, dict):
        return None
    return {k: v for k, v in full.items() if k not in ("jid", "id")}


def pack(row: Row) -> list[Any]:
    return [_NAMES[type(row)], *row]


def unpack(item: Any) -> Row:
    """A row from the spool; ``ValueError`` if it is not one."""
    if not isinstance(item, list) or not item or item[0] not in _KINDS:
        raise ValueError("not a spooled row")
    kind = _KINDS[item[0]]
    fields = item[1:]
    if len(fields) != len(kind._fields):
        raise ValueError(f"a {item[0]} row with {len(fields)} fields")
    for name, value in zip(kind._fields, fields, strict=True):
        expected = float if name in ("at", "before") else str
        if not isinstance(value, expected) and not (expected is float
                                                    and isinstance(value, int)):
            raise ValueError(f"{item[0]} row: {name} is not a {expected.__name__}")
    return kind(*fields)
