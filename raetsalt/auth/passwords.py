"""Checking a password against a stored hash, with the standard library only.

Pure Python (``hashlib``), always available:

==================  ==============================================================
``{SHA}<base64>``    htpasswd ``-s`` (SHA-1)
``$apr1$``           htpasswd's default on many systems (Apache MD5)
``$1$``              MD5-crypt
``$5$`` / ``$6$``    SHA-256-crypt / SHA-512-crypt (``rounds=N$`` honoured)
plain text           htpasswd ``-p`` (anything without a ``$``/``{SHA}`` prefix and
                     not 13 characters of DES-crypt)
==================  ==============================================================

Through the system's ``crypt(3)`` (``libcrypt``, loaded with ``ctypes``) when it is there
and knows the scheme: ``$2a$/$2b$/$2y$`` (bcrypt, htpasswd ``-B``), ``$y$``
(yescrypt), ``$gy$``, ``$7$`` and 13-character DES-crypt.  Without it those hashes never
match (``verify`` returns False and ``scheme_supported`` says why).

Every comparison is constant-time and hides lengths (``same``: ``hmac.compare_digest``
of SHA-256 digests).
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import hashlib
import hmac
import threading

_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

_SHA256_ORDER = [(0, 10, 20), (21, 1, 11), (12, 22, 2), (3, 13, 23), (24, 4, 14),
                 (15, 25, 5), (6, 16, 26), (27, 7, 17), (18, 28, 8), (9, 19, 29)]
_SHA512_ORDER = [(0, 21, 42), (22, 43, 1), (44, 2, 23), (3, 24, 45), (25, 46, 4),
                 (47, 5, 26), (6, 27, 48), (28, 49, 7), (50, 8, 29), (9, 30, 51),
                 (31, 52, 10), (53, 11, 32), (12, 33, 54), (34, 55, 13), (56, 14, 35),
                 (15, 36, 57), (37, 58, 16), (59, 17, 38), (18, 39, 60), (40, 61, 19),
                 (62, 20, 41)]
_MD5_ORDER = [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)]


def _b64_24(b2: int, b1: int, b0: int, n: int) -> str:
    w = (b2 << 16) | (b1 << 8) | b0
    out = []
    for _ in range(n):
        out.append(_ITOA64[w & 0x3F])
        w >>= 6
    return "".join(out)


def md5_crypt(password: bytes, salt: bytes, magic: bytes = b"$1$") -> str:
    """MD5-crypt (``$1$``) or Apache's variant (``magic=b'$apr1$'``)."""
    salt = salt[:8]
    alt = hashlib.md5(password + salt + password).digest()
    ctx = hashlib.md5(password + magic + salt)
    for left in range(len(password), 0, -16):
        ctx.update(alt[:min(16, left)])
    n = len(password)
    while n:
        ctx.update(b"\0" if n & 1 else password[:1])
        n >>= 1
    final = ctx.digest()
    for i in range(1000):
        step = hashlib.md5()
        step.update(password if i & 1 else final)
        if i % 3:
            step.update(salt)
        if i % 7:
            step.update(password)
        step.update(final if i & 1 else password)
        final = step.digest()
    text = "".join(_b64_24(final[a], final[b], final[c], 4) for a, b, c in _MD5_ORDER)
    text += _b64_24(0, 0, final[11], 2)
    return f"{magic.decode()}{salt.decode('ascii', 'replace')}${text}"


def sha_crypt(password: bytes, salt: bytes, rounds: int | None, bits: int) -> str:
    """SHA-256-crypt (``bits=256``, ``$5$``) or SHA-512-crypt (``$6$``)."""
    new = hashlib.sha256 if bits == 256 else hashlib.sha512
    size = bits // 8
    explicit = rounds is not None
    rounds = 5000 if rounds is None else min(max(rounds, 1000), 999_999_999)
    salt = salt[:16]
    b = new(password + salt + password).digest()
    a = new(password + salt)
    for left in range(len(password), 0, -size):
        a.update(b[:min(size, left)])
    n = len(password)
    while n:
        a.update(b if n & 1 else password)
        n >>= 1
    a_digest = a.digest()
    dp = new(password * len(password)).digest()
    p = (dp * (len(password) // size + 1))[:len(password)]
    ds = new(salt * (16 + a_digest[0])).digest()
    s = (ds * (len(salt) // size + 1))[:len(salt)]
    c = a_digest
    for i in range(rounds):
        step = new(p if i & 1 else c)
        if i % 3:
            step.update(s)
        if i % 7:
            step.update(p)
        step.update(c if i & 1 else p)
        c = step.digest()
    if bits == 256:
        text = "".join(_b64_24(c[x], c[y], c[z], 4) for x, y, z in _SHA256_ORDER)
        text += _b64_24(0, c[31], c[30], 3)
        magic = "$5$"
    else:
        text = "".join(_b64_24(c[x], c[y], c[z], 4) for x, y, z in _SHA512_ORDER)
        text += _b64_24(0, 0, c[63], 2)
        magic = "$6$"
    head = f"{magic}rounds={rounds}$" if explicit else magic
    return f"{head}{salt.decode('ascii', 'replace')}${text}"


_crypt_lock = threading.Lock()
_libcrypt: ctypes.CDLL | None | bool = False


def _system_crypt(password: bytes, setting: str) -> str | None:
    """crypt(3) from libcrypt, or None when unavailable or the scheme is unknown."""
    global _libcrypt
    with _crypt_lock:
        if _libcrypt is False:
            name = ctypes.util.find_library("crypt")
            try:
                lib = ctypes.CDLL(name or "libcrypt.so.1")
                lib.crypt.restype = ctypes.c_char_p
                lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
                _libcrypt = lib
            except OSError:
                _libcrypt = None
        if not isinstance(_libcrypt, ctypes.CDLL):
            return None
        result: bytes | None = _libcrypt.crypt(password, setting.encode())
    if not result or result.startswith(b"*"):
        return None
    return result.decode("ascii", "replace")


def system_crypt_available() -> bool:
    return _system_crypt(b"x", "$6$probe") is not None


def _is_des(stored: str) -> bool:
    return len(stored) == 13 and all(ch in _ITOA64 for ch in stored)


def scheme_supported(stored: str) -> tuple[bool, str]:
    """Whether ``stored`` can be checked here, and the scheme's name."""
    if stored.startswith("{SHA}"):
        return True, "sha1"
    for prefix, name in (("$apr1$", "apr1"), ("$1$", "md5-crypt"), ("$5$", "sha256-crypt"),
                         ("$6$", "sha512-crypt")):
        if stored.startswith(prefix):
            return True, name
    if stored.startswith("$") or _is_des(stored):
        name = {"$2a$": "bcrypt", "$2b$": "bcrypt", "$2y$": "bcrypt", "$y$": "yescrypt"}.get(
            stored[:4] if stored.startswith("$2") else stored[:3], "crypt")
        probe = _system_crypt(b"x", stored)
        if probe is None:
            return False, f"{name} (needs the system's crypt(3), which does not know it)"
        return True, name
    return True, "plaintext"


def same(given: str | bytes, stored: str | bytes) -> bool:
    """``given == stored`` in time that depends on neither value nor either length."""
    a = given.encode("utf-8") if isinstance(given, str) else given
    b = stored.encode("utf-8") if isinstance(stored, str) else stored
    return hmac.compare_digest(hashlib.sha256(a).digest(), hashlib.sha256(b).digest())


def verify(password: str, stored: str) -> bool:
    """Does ``password`` match the htpasswd-style hash ``stored``?"""
    pw = password.encode("utf-8")
    if stored.startswith("{SHA}"):
        digest = base64.b64encode(hashlib.sha1(pw).digest()).decode()
        return same(digest, stored[5:])
    computed: str | None
    if stored.startswith("$apr1$") or stored.startswith("$1$"):
        magic = "$apr1$" if stored.startswith("$apr1$") else "$1$"
        salt = stored[len(magic):].split("$", 1)[0]
        computed = md5_crypt(pw, salt.encode(), magic.encode())
    elif stored.startswith("$5$") or stored.startswith("$6$"):
        parts = stored.split("$")
        rounds = None
        rest = parts[2:]
        if rest and rest[0].startswith("rounds="):
            try:
                rounds = int(rest[0][7:])
            except ValueError:
                return False
            rest = rest[1:]
        if len(rest) < 2:
            return False
        computed = sha_crypt(pw, rest[0].encode(), rounds, 256 if parts[1] == "5" else 512)
    elif stored.startswith("$") or _is_des(stored):
        computed = _system_crypt(pw, stored)
        if computed is None:
            return False
    else:
        return same(pw, stored)
    return same(computed, stored)


def hexdigest(password: str, hashtype: str) -> str:
    """``hashlib`` hex digest (Salt's ``^hashtype`` for text files); ValueError if the
    algorithm is unknown."""
    return hashlib.new(hashtype, password.encode("utf-8")).hexdigest()
