"""The reactor's decisions, sans-IO: which SLS files an event's tag selects, and what
reactions a rendered SLS file asks for.

``ReactorMap`` is the master's ``reactor:`` setting, Salt's shape::

    reactor:
      - 'salt/minion/*/start':          # a glob (fnmatch) on the event's tag
        - /srv/reactor/start.sls        # one file or a list of files
      - 'monitoring/*': /srv/reactor/alert.sls

``files_for(tag)`` lists the files of every entry whose glob matches, in order, each
file once (an event fires a file once even when several entries name it).

A rendered file is Salt's reactor high data: ``{id: {'<kind>.<fun>': [{key: value},
...]}}`` with kind ``local`` (publish a job; legacy ``cmd``), ``runner``, ``wheel`` or
``caller``.  ``reactions_from_high`` turns it into ``Reaction`` values with Salt's
argument rules: ``args`` (a list of one-key mappings: keyword arguments; another list:
positional ones; a mapping: keyword arguments), else the legacy ``arg``/``kwarg``, else
(runner and wheel) every other key is a keyword argument.  ``local`` takes ``tgt``,
``tgt_type`` (legacy ``expr_form``), ``ret``, ``timeout``.  A malformed reaction is a
``ReactionError`` naming its id; the others of the file still run.

The files of one event make one set of reactions, as in Salt (``salt.utils.reactor``
merges the rendered files with ``dict.update``): a reaction id that a later file renders
again replaces the earlier one, so each reaction runs once per event however many
entries select its file (``reactions_of_event``).  ``event_key`` names an event for the
masters of a cluster, which claim each (event, reaction) in their shared store so that
an event several of them see reacts once.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["local", "runner", "wheel", "caller"]
KINDS: tuple[Kind, ...] = ("local", "runner", "wheel", "caller")
_KIND_BY_NAME: dict[str, Kind] = {"local": "local", "runner": "runner", "wheel": "wheel",
                                  "caller": "caller", "cmd": "local"}
"""Each kind by its name in a reaction (``cmd`` is Salt's legacy name of ``local``)."""
MAX_FILES_PER_EVENT = 64
MAX_REACTIONS_PER_EVENT = 256
_INTERNAL = frozenset({"__id__", "__sls__", "__env__", "order", "name", "state", "fun"})


class ReactorConfigError(ValueError):
    """The ``reactor:`` setting is not Salt's shape."""


class ReactionError(ValueError):
    """A reaction of a rendered file cannot be run."""


@dataclass(frozen=True, slots=True)
class Reaction:
    """One thing to do for an event."""

    id: str
    kind: Kind
    fun: str
    arg: list[Any] = field(default_factory=list)
    kwarg: dict[str, Any] = field(default_factory=dict)
    tgt: Any = ""
    tgt_type: str = "glob"
    ret: str = ""
    timeout: float | None = None
    sls: str = ""


@dataclass(frozen=True, slots=True)
class ReactorMap:
    """The ``reactor:`` entries: ``(glob, files)`` in order."""

    entries: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def from_config(cls, value: Any) -> ReactorMap:
        if value is None or value == []:
            return cls()
        if not isinstance(value, list):
            raise ReactorConfigError("reactor must be a list of one-key mappings "
                                     "(tag glob: SLS file or list of files)")
        entries: list[tuple[str, tuple[str, ...]]] = []
        for index, item in enumerate(value):
            if not isinstance(item, dict) or len(item) != 1:
                raise ReactorConfigError(f"reactor entry {index + 1} is not a one-key "
                                         "mapping (tag glob: files)")
            ((glob, files),) = item.items()
            if isinstance(files, str):
                files = [files]
            if not isinstance(glob, str) or not isinstance(files, list) or not all(
                    isinstance(f, str) and f for f in files):
                raise ReactorConfigError(f"reactor entry {index + 1} ({glob!r}) must map a "
                                         "tag glob to a file or a list of files")
            entries.append((glob, tuple(files)))
        return cls(tuple(entries))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def files_for(self, tag: str) -> list[str]:
        """The files ``tag`` selects, in order, each once."""
        found: list[str] = []
        for glob, files in self.entries:
            if fnmatch.fnmatchcase(tag, glob):
                for name in files:
                    if name not in found:
                        found.append(name)
        return found[:MAX_FILES_PER_EVENT]


def _dictlist(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) for i in value)


def _merged(items: list[Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for item in items:
        merged.update(item)
    return merged


def _arguments(rid: str, kind: Kind, params: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    if "args" in params:
        if "arg" in params or "kwarg" in params:
            raise ReactionError(f"reaction {rid!r}: 'args' cannot be used with 'arg' or "
                                "'kwarg'")
        value = params["args"]
        if isinstance(value, dict):
            return [], dict(value)
        if _dictlist(value):
            return [], _merged(value)
        if isinstance(value, list):
            return list(value), {}
        raise ReactionError(f"reaction {rid!r}: 'args' must be a list or a mapping")
    arg = params.get("arg", [])
    kwarg = params.get("kwarg", {})
    if not isinstance(arg, list):
        arg = [arg]
    if _dictlist(kwarg):
        kwarg = _merged(kwarg)
    if not isinstance(kwarg, dict):
        raise ReactionError(f"reaction {rid!r}: 'kwarg' must be a mapping")
    if kind in ("runner", "wheel") and "arg" not in params and "kwarg" not in params:
        kwarg = {k: v for k, v in params.items() if k not in _INTERNAL}
    return list(arg), dict(kwarg)


def reactions_from_high(high: Any, sls: str) -> tuple[list[Reaction], list[str]]:
    """The reactions of one rendered file, and the problems of those that cannot run."""
    if high is None or high == {}:
        return [], []
    if not isinstance(high, dict):
        return [], [f"{sls}: a reactor file must render to a mapping of ids to reactions, "
                    f"not {type(high).__name__}"]
    reactions: list[Reaction] = []
    problems: list[str] = []
    for rid, body in high.items():
        rid = str(rid)
        try:
            if not isinstance(body, dict):
                raise ReactionError(f"reaction {rid!r} is not a mapping")
            for key, value in body.items():
                if not isinstance(key, str) or key.startswith("__"):
                    continue
                reactions.append(_reaction(rid, key, value, sls))
        except ReactionError as exc:
            problems.append(str(exc))
    return reactions[:MAX_REACTIONS_PER_EVENT], problems


def reactions_of_event(rendered: list[tuple[str, Any]]
                       ) -> tuple[list[Reaction], list[tuple[str, str]]]:
    """The reactions of an event's rendered files (``(sls, high)`` in order): ids merged
    as Salt merges them (a later file's id replaces an earlier one's, in its place); and
    the problems, as ``(sls, problem)``."""
    merged: dict[str, tuple[str, Any]] = {}
    problems: list[tuple[str, str]] = []
    for sls, high in rendered:
        if high is None or high == {}:
            continue
        if not isinstance(high, dict):
            problems.extend((sls, text) for text in reactions_from_high(high, sls)[1])
            continue
        for rid, body in high.items():
            merged[str(rid)] = (sls, body)
    reactions: list[Reaction] = []
    for rid, (sls, body) in merged.items():
        found, trouble = reactions_from_high({rid: body}, sls)
        reactions.extend(found)
        problems.extend((sls, text) for text in trouble)
    return reactions[:MAX_REACTIONS_PER_EVENT], problems


def event_key(tag: str, data: Mapping[str, Any]) -> str:
    """An event's name for the masters of a cluster: a digest of its tag and data without
    ``_stamp`` (each master stamps what it receives)."""
    body = {str(k): v for k, v in data.items() if k != "_stamp"}
    try:
        text = _canonical([tag, body])
    except RecursionError:
        text = repr((tag, sorted(body)))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(value: Any) -> str:
    """Text that two equal event payloads share whatever their mappings' key order."""
    if isinstance(value, Mapping):
        return "{" + ",".join(sorted(f"{str(k)!r}:{_canonical(v)}"
                                     for k, v in value.items())) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    return repr(value)


def _reaction(rid: str, key: str, value: Any, sls: str) -> Reaction:
    head, dot, fun = key.partition(".")
    kind = _KIND_BY_NAME.get(head)
    if not dot or not fun or kind is None:
        raise ReactionError(f"reaction {rid!r}: {key!r} is not local.*, runner.*, wheel.* "
                            "or caller.*")
    if value is None:
        value = []
    if not _dictlist(value):
        raise ReactionError(f"reaction {rid!r}: the parameters of {key} must be a list of "
                            "one-key mappings")
    params = _merged(value)
    arg, kwarg = _arguments(rid, kind, params)
    if kind != "local":
        return Reaction(rid, kind, fun, arg, kwarg, sls=sls)
    tgt = params.get("tgt")
    if not (isinstance(tgt, str) and tgt) and not (
            isinstance(tgt, list) and tgt and all(isinstance(t, str) for t in tgt)):
        raise ReactionError(f"reaction {rid!r}: local.{fun} needs a target (tgt)")
    tgt_type = params.get("tgt_type", params.get("expr_form", "glob"))
    ret = params.get("ret", "")
    timeout = params.get("timeout")
    if not isinstance(tgt_type, str) or not isinstance(ret, str):
        raise ReactionError(f"reaction {rid!r}: tgt_type and ret must be strings")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(
            timeout, int | float) or timeout <= 0):
        raise ReactionError(f"reaction {rid!r}: timeout must be a positive number")
    return Reaction(rid, "local", fun, arg, kwarg, tgt, tgt_type, ret,
                    float(timeout) if timeout is not None else None, sls)


def event_context(tag: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """What a reactor file's template sees (Salt's names)."""
    return {"tag": tag, "data": dict(data)}
