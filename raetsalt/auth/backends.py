"""eauth backends: ``file`` (Salt's file eauth) and ``pam``.

``authenticate(external_auth, backend, username, password)`` answers whether the
password is right and which groups the user has (for ``name%`` rules).  It may block
(PAM waits out its failure delay), so the master calls it in a worker thread.

``file`` settings live beside the users in ``external_auth``, as in Salt::

    external_auth:
      file:
        ^filename: /etc/raetsalt/users.htpasswd    # required
        ^filetype: htpasswd        # text (default) | htpasswd | htdigest
        ^hashtype: plaintext       # text only: plaintext (default) or a hashlib name
                                   # (md5, sha1, sha256, sha512...): hex digests
        ^field_separator: ':'      # text only (default ':')
        ^username_field: 1         # text only, 1-based (default 1)
        ^password_field: 2         # text only, 1-based (default 2)
        ^realm: raetsalt           # htdigest only
        fred: [test.*]

``htpasswd`` lines are ``user:hash`` with any hash ``raetsalt.auth.passwords`` checks
(``{SHA}``, ``$apr1$``, ``$1$``, ``$5$``, ``$6$``, plain text, and bcrypt/yescrypt/DES
when the system's crypt(3) knows them).  ``htdigest`` lines are
``user:realm:md5(user:realm:password)``.  The file is read at each login, so edits
take effect at once.  ``file`` users have no groups.

``pam``: the PAM service ``login`` (``auth.pam.service`` is not configurable here),
through ``libpam`` with ``ctypes``; groups are the user's system groups.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raetsalt.errors import ConfigError

from . import passwords

BACKENDS = ("file", "pam")
FILE_SETTINGS = ("^filename", "^filetype", "^hashtype", "^field_separator",
                 "^username_field", "^password_field", "^realm")
FILETYPES = ("text", "htpasswd", "htdigest")


@dataclass(frozen=True, slots=True)
class AuthResult:
    """``ok``: the credentials are right; ``groups``: the user's groups; ``reason``: why
    not (for the master's log only: the client just hears "authentication failure")."""

    ok: bool
    groups: tuple[str, ...] = ()
    reason: str = ""


def settings(external_auth: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """The ``^name`` settings of one backend."""
    section = external_auth.get(backend) or {}
    return {k: v for k, v in section.items() if isinstance(k, str) and k.startswith("^")}


def validate_backends(external_auth: Any) -> list[str]:
    """Check the backends of ``external_auth``: raise ConfigError for a broken ``file``
    setup; warnings for unknown backends and an unavailable PAM."""
    warnings: list[str] = []
    if not isinstance(external_auth, Mapping):
        return warnings
    for backend in external_auth:
        where = f"external_auth[{backend!r}]"
        if backend not in BACKENDS:
            warnings.append(f"{where}: unknown eauth backend (raetsalt has "
                            f"{', '.join(BACKENDS)}); logins with it always fail")
            continue
        conf = settings(external_auth, backend)
        if backend == "pam":
            if conf:
                warnings.append(f"{where}: pam takes no ^settings; ignored: {sorted(conf)}")
            from .pam import pam_available

            ok, why = pam_available()
            if not ok:
                warnings.append(f"{where}: PAM is not available here ({why}); pam logins "
                                "always fail")
            continue
        unknown = sorted(set(conf) - set(FILE_SETTINGS))
        if unknown:
            raise ConfigError(f"{where}: unknown setting(s) {unknown}; known: "
                              f"{', '.join(FILE_SETTINGS)}")
        filename = conf.get("^filename")
        if not isinstance(filename, str) or not filename:
            raise ConfigError(f"{where}: '^filename' (the password file) is required")
        filetype = conf.get("^filetype", "text")
        if filetype not in FILETYPES:
            raise ConfigError(f"{where}['^filetype']: {filetype!r} is not one of "
                              f"{', '.join(FILETYPES)}")
        hashtype = conf.get("^hashtype", "plaintext")
        if hashtype != "plaintext":
            try:
                hashlib.new(str(hashtype))
            except ValueError:
                raise ConfigError(f"{where}['^hashtype']: unknown hash {hashtype!r}") from None
        for key in ("^username_field", "^password_field"):
            value = conf.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{where}[{key!r}]: must be a field number from 1")
        if filetype == "htdigest" and not isinstance(conf.get("^realm"), str):
            raise ConfigError(f"{where}: '^realm' is required with ^filetype htdigest")
        if not os.path.isfile(filename):
            warnings.append(f"{where}: password file {filename!r} does not exist (yet)")
    return warnings


def system_groups(user: str) -> tuple[str, ...]:
    """The system groups of ``user`` (empty when it is not a system user)."""
    try:
        gid = pwd.getpwnam(user).pw_gid
        gids = os.getgrouplist(user, gid)
    except (KeyError, OSError):
        return ()
    names = []
    for g in gids:
        try:
            names.append(grp.getgrgid(g).gr_name)
        except KeyError:
            names.append(str(g))
    return tuple(sorted(set(names)))


def authenticate(external_auth: Mapping[str, Any], backend: str, username: str,
                 password: str) -> AuthResult:
    """Check ``username``/``password`` with ``backend``; never raises."""
    if backend not in (external_auth or {}):
        return AuthResult(False, reason=f"eauth backend {backend!r} is not configured")
    if not username or "\n" in username or "\0" in username:
        return AuthResult(False, reason="empty or malformed user name")
    try:
        if backend == "file":
            return _file(settings(external_auth, backend), username, password)
        if backend == "pam":
            from .pam import pam_authenticate

            ok, why = pam_authenticate(username, password)
            return AuthResult(ok, system_groups(username) if ok else (), why)
    except Exception as exc:  # noqa: BLE001 - a backend failure is a refused login
        return AuthResult(False, reason=f"{backend} backend failed: {exc}")
    return AuthResult(False, reason=f"unknown eauth backend {backend!r}")


def _file(conf: Mapping[str, Any], username: str, password: str) -> AuthResult:
    """Check against a password file.  An unknown user costs the same hashing as a known
    one (the password is hashed against the file's first entry and the result thrown
    away), and every comparison hides lengths, so time does not tell who exists."""
    filename = conf.get("^filename")
    if not isinstance(filename, str):
        return AuthResult(False, reason="file eauth has no ^filename")
    filetype = conf.get("^filetype", "text")
    try:
        with open(filename, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError as exc:
        return AuthResult(False, reason=f"cannot read {filename}: {exc.strerror or exc}")
    decoy: str | None = None  # the first stored secret, to hash an unknown user against
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if filetype == "htpasswd":
            user, sep, stored = line.partition(":")
            if not sep:
                continue
            if user == username:
                ok, scheme = passwords.scheme_supported(stored)
                if not ok:
                    return AuthResult(False, reason=f"hash scheme {scheme} is not supported")
                return _result(passwords.verify(password, stored), "wrong password")
            decoy = stored if decoy is None else decoy
        elif filetype == "htdigest":
            parts = line.split(":")
            realm = conf.get("^realm")
            if len(parts) == 3 and parts[0] == username and parts[1] == realm:
                digest = hashlib.md5(f"{username}:{realm}:{password}".encode()).hexdigest()
                return _result(passwords.same(digest, parts[2]), "wrong password")
        else:
            sep = str(conf.get("^field_separator", ":"))
            parts = line.split(sep)
            ufield = int(conf.get("^username_field", 1)) - 1
            pfield = int(conf.get("^password_field", 2)) - 1
            if max(ufield, pfield) >= len(parts) or parts[ufield] != username:
                continue
            stored = parts[pfield]
            hashtype = str(conf.get("^hashtype", "plaintext"))
            given = password if hashtype == "plaintext" else passwords.hexdigest(
                password, hashtype)
            return _result(passwords.same(given, stored), "wrong password")
    _spend_like_a_check(conf, filetype, decoy, password)
    return AuthResult(False, reason=f"no user {username!r} in {filename}")


def _spend_like_a_check(conf: Mapping[str, Any], filetype: Any, decoy: str | None,
                        password: str) -> None:
    """The hashing a known user's check would have done (result unused)."""
    if filetype == "htpasswd":
        if decoy is not None and passwords.scheme_supported(decoy)[0]:
            passwords.verify(password, decoy)
    elif filetype == "htdigest":
        hashlib.md5(f"decoy:{conf.get('^realm')}:{password}".encode()).hexdigest()
    else:
        hashtype = str(conf.get("^hashtype", "plaintext"))
        if hashtype != "plaintext":
            passwords.hexdigest(password, hashtype)


def _result(ok: bool, why: str) -> AuthResult:
    return AuthResult(True) if ok else AuthResult(False, reason=why)
