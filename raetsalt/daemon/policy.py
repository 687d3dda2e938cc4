"""The master's key acceptance policy: Salt's ``open_mode``, ``auto_accept``,
``autosign_file`` and ``autoreject_file`` on top of the keep's acceptance table.

The road asks its keep ``status_role(role, verhex, pubhex, auto)`` on every join (and on
every pending re-check).  ``AcceptancePolicy`` wraps the master's keep and answers that
question the way Salt's master ``_auth`` does, then leaves the rest to the keep's own
table (``raetsalt.keep.store``):

=================================  ===============================================
situation                          decision
=================================  ===============================================
``open_mode: true``                accepted, whatever is stored: the presented keys
                                   replace the stored ones and the role's denied keys
                                   are forgotten (Salt's open mode; for closed test
                                   networks only)
new id, or pending with the same   id matches ``autoreject_file``: recorded and
keys                               answered *rejected* (checked first: autoreject
                                   wins over autosign, as in Salt)
                                   id matches ``autosign_file``: recorded and
                                   answered *accepted*
everything else                    the keep's table with ``auto`` =
                                   ``AutoMode.ONCE`` when ``auto_accept`` (a new id
                                   is accepted once; a changed key is *denied*, never
                                   taken over) else ``AutoMode.NEVER`` (pending)
=================================  ===============================================

An accepted id keeps its acceptance even if it later matches ``autoreject_file``, and a
stored rejection is never lifted by ``autosign_file`` (Salt checks ``rejected`` and
``accepted`` before either file).

The files are read at every decision, so edits apply at once.  A line is an id, a glob
(``fnmatch``) or a regular expression matched against the whole id; blank lines and
``#`` comments are skipped.  A file that is group- or world-writable is ignored (and
logged) unless ``permissive_pki_access`` is true, as in Salt.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

from raetsalt.keep.records import Acceptance, AutoMode, Keep, RoleRecord

log = logging.getLogger(__name__)


def id_matches_file(path: str | None, minion_id: str, *, permissive: bool = False) -> bool:
    """True when a line of the autosign/autoreject file at ``path`` matches ``minion_id``.

    A missing or unreadable file matches nothing.
    """
    if not path:
        return False
    try:
        mode = os.stat(path).st_mode
        if not permissive and mode & (stat.S_IWGRP | stat.S_IWOTH):
            log.warning("%s is group- or world-writable: ignored (see permissive_pki_access)", path)
            return False
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line == minion_id or fnmatch.fnmatchcase(minion_id, line):
            return True
        try:
            if re.fullmatch(line, minion_id):
                return True
        except re.error:
            pass  # a glob such as "web[" is not a valid regex either: no match
    return False


class AcceptancePolicy:
    """A ``Keep`` that applies the master's acceptance options (module docstring).

    Every other ``Keep`` method goes straight to the wrapped keep.
    """

    def __init__(
        self,
        keep: Keep,
        *,
        open_mode: bool = False,
        autosign_file: str | None = None,
        autoreject_file: str | None = None,
        permissive: bool = False,
    ) -> None:
        self.keep = keep
        self.open_mode = open_mode
        self.autosign_file = autosign_file
        self.autoreject_file = autoreject_file
        self.permissive = permissive

    @classmethod
    def from_opts(cls, keep: Keep, opts: Mapping[str, Any]) -> AcceptancePolicy:
        return cls(
            keep,
            open_mode=bool(opts.get("open_mode")),
            autosign_file=opts.get("autosign_file"),
            autoreject_file=opts.get("autoreject_file"),
            permissive=bool(opts.get("permissive_pki_access")),
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.keep, name)

    def status_role(self, role: str, verhex: str, pubhex: str, auto: AutoMode) -> Acceptance:
        keep = self.keep
        if self.open_mode:
            stored = keep.load_role(role)
            if stored is None or (stored.acceptance, stored.verhex, stored.pubhex) != (
                Acceptance.ACCEPTED,
                verhex,
                pubhex,
            ):
                keep.save_role(RoleRecord(role, Acceptance.ACCEPTED, verhex, pubhex))
                keep.remove_denied(role)
            return Acceptance.ACCEPTED
        stored = keep.load_role(role)
        undecided = stored is None or (
            stored.acceptance is Acceptance.PENDING
            and (stored.verhex, stored.pubhex) == (verhex, pubhex)
        )
        if undecided:
            if id_matches_file(self.autoreject_file, role, permissive=self.permissive):
                keep.save_role(RoleRecord(role, Acceptance.REJECTED, verhex, pubhex))
                return Acceptance.REJECTED
            if id_matches_file(self.autosign_file, role, permissive=self.permissive):
                keep.save_role(RoleRecord(role, Acceptance.ACCEPTED, verhex, pubhex))
                return Acceptance.ACCEPTED
        return keep.status_role(role, verhex, pubhex, auto)


def auto_mode(opts: Mapping[str, Any]) -> AutoMode:
    """``auto_accept`` -> ``ONCE`` (first sight accepted), else ``NEVER`` (pending).

    ``open_mode`` is handled by ``AcceptancePolicy``; the keep's ``ALWAYS`` would not
    replace a changed key, which is what Salt's open mode does.
    """
    return AutoMode.ONCE if opts.get("auto_accept") else AutoMode.NEVER
