"""What a ``salt://`` path or a saltenv from a minion may look like (pure checks).

A minion names a file as a path relative to a saltenv's ``file_roots``.  Before anything
touches the disk, ``clean_relpath`` turns it into a normalised relative path or refuses
it with ``PathRefused`` (which the minion sees as a clear error): absolute paths, ``..``
components, NUL bytes, backslashes and overlong paths never reach the file server.
Symbolic links that lead out of the root are the file server's to refuse
(``raetsalt.saltbridge.roots``), because only the disk knows where they point.
"""

from __future__ import annotations

from raetsalt.config import SALTENV_RE
from raetsalt.errors import RaetSaltError

MAX_PATH = 1024
"""Longest path (characters) a minion may ask for."""


class PathRefused(RaetSaltError):
    """A path that leaves ``file_roots`` (or is not a path at all); the text is what the
    minion is told."""


def clean_relpath(path: object, *, allow_empty: bool = False) -> str:
    """``path`` as a normalised relative path (``'web/init.sls'``, ``''`` for the root
    when ``allow_empty``); raises ``PathRefused`` for anything that is not inside."""
    if not isinstance(path, str):
        raise PathRefused("the path must be a string")
    if len(path) > MAX_PATH:
        raise PathRefused(f"the path is longer than {MAX_PATH} characters")
    if "\0" in path or "\\" in path:
        raise PathRefused(f"salt://{path!r} is not a valid path")
    if path.startswith("/"):
        raise PathRefused(f"salt://{path} is absolute: paths are relative to file_roots")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise PathRefused(f"salt://{path} leads out of file_roots ('..' is not allowed)")
    if not parts and not allow_empty:
        raise PathRefused("the path is empty")
    return "/".join(parts)


def valid_saltenv(value: object) -> str:
    """A saltenv name from a minion; raises ``PathRefused`` when it is not one."""
    if not isinstance(value, str) or not SALTENV_RE.match(value):
        raise PathRefused(f"{str(value)[:80]!r} is not a saltenv name")
    return value
