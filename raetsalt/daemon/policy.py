"""The master's key acceptance options as a ``KeyPolicy``: Salt's ``open_mode``,
``auto_accept``, ``autosign_file`` and ``autoreject_file``.

The decisions themselves are pure (``raetsalt.keep.policy``, where the whole table is
documented); this module only reads the two files.  A line of a file is an id, a glob
(``fnmatch``) or a regular expression matched against the whole id; blank lines and
``#`` comments are skipped.  A file that is group- or world-writable is ignored (and
logged) unless ``permissive_pki_access`` is true, as in Salt.

The files are asked only about ids nobody decided on yet (new or pending with the same
keys), and ``FileMatcher`` re-reads a file only when its size or modification time
changed, looked at no more than once a second: edits still apply within a second,
without a read per join.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from typing import Any

from raetsalt.keep.policy import KeyPolicy
from raetsalt.keep.records import AutoMode, fingerprint, normalize_fingerprint

log = logging.getLogger(__name__)


def id_matches_file(path: str | None, minion_id: str, *, permissive: bool = False) -> bool:
    """True when a line of the autosign/autoreject file at ``path`` matches ``minion_id``
    (read now).  A missing or unreadable file matches nothing."""
    if not path:
        return False
    return any(_line_matches(line, minion_id) for line in _read_lines(path, permissive))


def _read_lines(path: str, permissive: bool) -> list[str]:
    """The id lines of a file, or [] if it is missing, unreadable or too writable."""
    try:
        mode = os.stat(path).st_mode
        if not permissive and mode & (stat.S_IWGRP | stat.S_IWOTH):
            log.warning("%s is group- or world-writable: ignored (see permissive_pki_access)", path)
            return []
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _line_matches(line: str, minion_id: str) -> bool:
    if line == minion_id or fnmatch.fnmatchcase(minion_id, line):
        return True
    try:
        return re.fullmatch(line, minion_id) is not None
    except re.error:
        return False  # a glob such as "web[" is not a valid regex either: no match


class FileMatcher:
    """``matcher(minion_id)``: does a line of the file at ``path`` match?  Cached."""

    RECHECK = 1.0
    """Seconds between looks at the file's size and modification time."""

    def __init__(
        self, path: str, *, permissive: bool = False, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.permissive = permissive
        self.clock = clock
        self._checked = -self.RECHECK
        self._stamp: tuple[int, int, int] | None = None
        self._lines: list[str] = []

    def __call__(self, minion_id: str) -> bool:
        now = self.clock()
        if now - self._checked >= self.RECHECK:
            self._checked = now
            self._reload()
        return any(_line_matches(line, minion_id) for line in self._lines)

    def _reload(self) -> None:
        try:
            info = os.stat(self.path)
        except OSError:
            self._stamp, self._lines = None, []
            return
        stamp = (info.st_mtime_ns, info.st_size, info.st_mode)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        self._lines = _read_lines(self.path, self.permissive)


def key_policy(opts: Mapping[str, Any]) -> KeyPolicy:
    """The master's ``KeyPolicy`` from its opts (``auto_accept``, ``open_mode``,
    ``autosign_file``, ``autoreject_file``, ``permissive_pki_access``)."""
    permissive = bool(opts.get("permissive_pki_access"))
    sign, reject = opts.get("autosign_file"), opts.get("autoreject_file")
    return KeyPolicy(
        auto=auto_mode(opts),
        open_mode=bool(opts.get("open_mode")),
        autosign=FileMatcher(sign, permissive=permissive) if sign else None,
        autoreject=FileMatcher(reject, permissive=permissive) if reject else None,
    )


def minion_key_policy(opts: Mapping[str, Any]) -> KeyPolicy:
    """A minion's ``KeyPolicy``: the master's key is trusted at first sight (Salt's
    minion_master.pub), or only if its fingerprint is ``master_finger`` (in
    ``hash_type``, as ``raetsalt-key -F`` prints it on the master; colons and case do
    not matter)."""
    finger = opts.get("master_finger")
    if not finger:
        return KeyPolicy(auto=AutoMode.ONCE)
    hash_type = str(opts.get("hash_type") or "sha256")
    want = normalize_fingerprint(str(finger))

    def pinned(verhex: str) -> bool:
        return fingerprint(verhex, hash_type) == want

    return KeyPolicy(auto=AutoMode.ONCE, pin=pinned)


def auto_mode(opts: Mapping[str, Any]) -> AutoMode:
    """``auto_accept`` -> ``ONCE`` (first sight accepted), else ``NEVER`` (pending).

    ``open_mode`` is the policy's own switch; the keep's ``ALWAYS`` would not replace a
    changed key, which is what Salt's open mode does.
    """
    return AutoMode.ONCE if opts.get("auto_accept") else AutoMode.NEVER
