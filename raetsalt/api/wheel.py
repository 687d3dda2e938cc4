"""Salt's wheel functions the API serves: the ``key`` module on the master's road keep
(listing from the keep, changes as the master's key commands, as ``raetsalt-key`` does
while the master runs) and ``minions.connected`` (the master's ``manage.up``).

``key.gen_accept`` makes a new minion's keys here and has the master record the public
ones accepted (its ``gen_accept`` key command); it returns ``pub`` (the public keys)
and ``priv`` (the minion's ``local/estate.json``, private keys in it), or ``{}`` when
the id already has a key and ``force`` is not given, as Salt does.

The caller is authorized before a function runs (``raetsalt.api.auth``); the values
returned are Salt's shapes (``key.list_all`` -> ``{minions, minions_pre, ...}``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from raetsalt.cli.key import select
from raetsalt.errors import RaetSaltError
from raetsalt.keep.listing import ACC, DEN, PRE, REJ, STATUSES, KeyEntry, id_lists, snapshot
from raetsalt.keep.policy import Action
from raetsalt.keep.store import FileKeep
from raetsalt.paths import keep_dir

from .keytar import estate_text, new_minion_keys
from .master import Credentials, MasterLink

_LIST_WORDS = {
    "acc": ACC, "accepted": ACC, "pre": PRE, "un": PRE, "unaccepted": PRE,
    "rej": REJ, "rejected": REJ, "den": DEN, "denied": DEN,
}


class WheelError(Exception):
    """A bad call (unknown function, bad arguments): HTTP 400 with this text."""


class Wheel:
    def __init__(self, opts: Mapping[str, Any], link: MasterLink) -> None:
        self.opts = opts
        self.link = link
        self.hash_type = str(opts.get("hash_type") or "sha256")
        self.keep = FileKeep(keep_dir(dict(opts)))
        self.functions: dict[str, Callable[..., Any]] = {
            "key.list_all": self.list_all,
            "key.list": self.list_,
            "key.finger": self.finger,
            "key.accept": self.accept,
            "key.reject": self.reject,
            "key.delete": self.delete,
            "key.name_match": self.name_match,
            "key.gen_accept": self.gen_accept,
        }

    def call(self, fun: str, args: list[Any], kwargs: dict[str, Any],
             auth: Credentials) -> Any:
        if fun == "minions.connected":
            return self.link.runner(auth, "manage.up", [], 30.0)
        function = self.functions.get(fun)
        if function is None:
            raise WheelError(f"'{fun}' is not available.")
        try:
            return function(*args, **kwargs)
        except TypeError as exc:
            raise WheelError(f"Passed invalid arguments to {fun}: {exc}") from None
        except RaetSaltError as exc:
            raise WheelError(str(exc)) from None

    def _entries(self) -> list[KeyEntry]:
        return [e for e in snapshot(self.keep) if e.status in STATUSES]

    def list_all(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {"local": []} | id_lists(self._entries(), (ACC, PRE, REJ, DEN))
        return {k: out[k] for k in ("local", "minions", "minions_pre", "minions_rejected",
                                     "minions_denied")}

    def list_(self, match: str) -> dict[str, list[str]]:
        status = _LIST_WORDS.get(str(match))
        if status is None:
            return {}
        return id_lists(self._entries(), (status,))

    def _matching(self, match: Any, statuses: tuple[str, ...]) -> list[KeyEntry]:
        if isinstance(match, list):
            match = ",".join(str(m) for m in match)
        if not isinstance(match, str) or not match:
            raise WheelError("a match (minion id glob) is needed")
        try:
            chosen = select(self._entries(), match, self.hash_type)
        except Exception:  # noqa: BLE001 - a malformed fingerprint
            raise WheelError(f"'{match}' is neither an id glob nor a fingerprint") from None
        return [e for e in chosen if e.status in statuses]

    def finger(self, match: Any, hash_type: str | None = None) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for entry in self._matching(match, STATUSES):
            out.setdefault(entry.status, {})[entry.id] = entry.finger(hash_type
                                                                      or self.hash_type)
        return out

    def name_match(self, match: Any) -> dict[str, list[str]]:
        return id_lists(self._matching(match, STATUSES), (ACC, PRE, REJ, DEN))

    def _change(self, action: str, match: Any, statuses: tuple[str, ...],
                result_status: str | None) -> dict[str, list[str]]:
        chosen = self._matching(match, statuses)
        if action != "delete":
            # one key per id: an id with several matching keys is left alone
            counts: dict[str, int] = {}
            for entry in chosen:
                counts[entry.id] = counts.get(entry.id, 0) + 1
            chosen = [e for e in chosen if counts[e.id] == 1]
        if not chosen:
            return {}
        reply = self.link.key(action, keys=[entry.wire() for entry in chosen])
        stale = {i for i in reply.get("stale", ()) if isinstance(i, int)}
        done = [e for i, e in enumerate(chosen) if i not in stale]
        if result_status is None:
            return id_lists(done, tuple(dict.fromkeys(e.status for e in done)))
        return {result_status: sorted({e.id for e in done})}

    def accept(self, match: Any, include_rejected: bool = False,
               include_denied: bool = False) -> dict[str, list[str]]:
        statuses = (PRE,) + ((REJ,) if include_rejected else ()) + (
            (DEN,) if include_denied else ())
        return self._change("accept", match, statuses, ACC)

    def reject(self, match: Any, include_accepted: bool = False,
               include_denied: bool = False) -> dict[str, list[str]]:
        statuses = (PRE,) + ((ACC,) if include_accepted else ()) + (
            (DEN,) if include_denied else ())
        return self._change("reject", match, statuses, REJ)

    def delete(self, match: Any) -> dict[str, list[str]]:
        return self._change("delete", match, STATUSES, None)

    def gen_accept(self, id_: Any, keysize: Any = None, force: Any = False
                   ) -> dict[str, str]:
        """Salt's ``key.gen_accept`` (module docstring); ``keysize`` is accepted and
        ignored (Ed25519 and Curve25519 keys have one size)."""
        if not isinstance(id_, str) or not id_:
            raise WheelError("a minion id (id_) is needed")
        keys = new_minion_keys(id_)  # LocalError for an id no keep can hold
        held = [e for e in self._entries() if e.id == id_ and e.status != DEN]
        if held:
            if not _truthy(force):
                return {}
            self.link.key("delete", keys=[entry.wire() for entry in held])
        reply = self.link.key(Action.GEN_ACCEPT, keys=[keys.entry().wire()])
        if reply.get("stale"):
            return {}  # a key for it came meanwhile (a join)
        return {"pub": keys.public_text(), "priv": estate_text(keys).decode()}


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return value is True or (isinstance(value, int) and value == 1)
