"""Fixed byte layouts of the allow handshake bodies (docs/raet-wire.md §8.2).

Only layouts: the boxes inside are made and opened by ``raetsalt.crypto``.  Notation:
``S_x`` short-term Curve25519 public keys, ``L_x`` long-term ones, ``box`` = crypto_box
output ``tag(16) || cipher``.  Integers are big-endian uint32.

hello (200 bytes, ``!64s32s80s24s``)::

    plain (64 x b"0") | S_i (32) | box(plain) (80) | nonce (24)

cookie (104 bytes, ``!80s24s``), whose box holds the cookie stuff::

    box(stuff) (80) | nonce (24)
    stuff (64, ``!32sLL24s``): S_r (32) | responder's uid for initiator | initiator's
                                uid for responder | oreo (24)

initiate (328 bytes, ``!32s24s248s24s``), whose box holds the initiate stuff::

    S_i (32) | oreo (24) | box(stuff) (248) | nonce (24)
    stuff (232, ``!32s48s24s128s``): L_i (32) | vouch = box(S_i) (48) | vouch nonce (24)
                                     | responder fqdn, ASCII, space padded (128)

Unpacking raises only ``BadPacket`` (``DropReason.BODY``), for a wrong length.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, LocalError

__all__ = [
    "HELLO_PLAIN",
    "HELLO_SIZE",
    "COOKIE_SIZE",
    "COOKIE_STUFF_SIZE",
    "INITIATE_SIZE",
    "INITIATE_STUFF_SIZE",
    "FQDN_SIZE",
    "Hello",
    "Cookie",
    "CookieStuff",
    "Initiate",
    "InitiateStuff",
    "pack_hello",
    "unpack_hello_untrusted",
    "pack_cookie",
    "unpack_cookie_untrusted",
    "pack_cookie_stuff",
    "unpack_cookie_stuff_untrusted",
    "pack_initiate",
    "unpack_initiate_untrusted",
    "pack_initiate_stuff",
    "unpack_initiate_stuff_untrusted",
]

#: The hello's fixed plaintext: the hex text of 32 zero bytes (raet's choice).
HELLO_PLAIN = b"0" * 64

_HELLO = struct.Struct("!64s32s80s24s")
_COOKIE = struct.Struct("!80s24s")
_COOKIE_STUFF = struct.Struct("!32sLL24s")
_INITIATE = struct.Struct("!32s24s248s24s")
_INITIATE_STUFF = struct.Struct("!32s48s24s128s")

HELLO_SIZE = _HELLO.size  # 200
COOKIE_SIZE = _COOKIE.size  # 104
COOKIE_STUFF_SIZE = _COOKIE_STUFF.size  # 64
INITIATE_SIZE = _INITIATE.size  # 328
INITIATE_STUFF_SIZE = _INITIATE_STUFF.size  # 232
FQDN_SIZE = 128


class Hello(NamedTuple):
    """Parts of a hello body; ``box`` should open to ``plain``."""

    plain: bytes
    short_public: bytes
    box: bytes
    nonce: bytes


class Cookie(NamedTuple):
    """Parts of a cookie body; ``box`` holds a ``CookieStuff``."""

    box: bytes
    nonce: bytes


class CookieStuff(NamedTuple):
    """The responder's short-term key, both uids (as the responder sees them), oreo."""

    short_public: bytes
    near_uid: int
    far_uid: int
    oreo: bytes


class Initiate(NamedTuple):
    """Parts of an initiate body; ``box`` holds an ``InitiateStuff``."""

    short_public: bytes
    oreo: bytes
    box: bytes
    nonce: bytes


class InitiateStuff(NamedTuple):
    """The initiator's long-term key, its vouch for its short-term key, and the fqdn.

    ``fqdn`` comes back without the padding spaces.
    """

    long_public: bytes
    vouch: bytes
    vouch_nonce: bytes
    fqdn: bytes


def _check(value: bytes, size: int, what: str) -> None:
    if len(value) != size:
        raise LocalError(f"{what} must be {size} bytes, got {len(value)}")


def _check_uid(value: int, what: str) -> None:
    if not 0 <= value <= 0xFFFF_FFFF:
        raise LocalError(f"{what} {value!r} is not a 32-bit unsigned integer")


def _require_size(body: bytes, size: int, what: str) -> None:
    if len(body) != size:
        raise BadPacket(f"{what} body is {len(body)} bytes, not {size}", DropReason.BODY)


def pack_hello(short_public: bytes, box80: bytes, nonce: bytes,
               plain: bytes = HELLO_PLAIN) -> bytes:
    """The 200-byte hello body (``plain``: raet's ``HELLO_PLAIN``, or the initiator's
    verify key in hex for a native adoption hello, ``raetsalt.engine.adopt``)."""
    _check(short_public, 32, "short-term public key")
    _check(box80, 80, "hello box")
    _check(nonce, 24, "nonce")
    _check(plain, 64, "hello plain")
    return _HELLO.pack(plain, short_public, box80, nonce)


def unpack_hello_untrusted(body: bytes) -> Hello:
    """Split a hello body; does not check ``plain`` (the caller compares it)."""
    _require_size(body, HELLO_SIZE, "hello")
    return Hello._make(_HELLO.unpack(body))


def pack_cookie(box80: bytes, nonce: bytes) -> bytes:
    """The 104-byte cookie body."""
    _check(box80, 80, "cookie box")
    _check(nonce, 24, "nonce")
    return _COOKIE.pack(box80, nonce)


def unpack_cookie_untrusted(body: bytes) -> Cookie:
    """Split a cookie body."""
    _require_size(body, COOKIE_SIZE, "cookie")
    return Cookie._make(_COOKIE.unpack(body))


def pack_cookie_stuff(short_public: bytes, near_uid: int, far_uid: int, oreo: bytes) -> bytes:
    """The 64-byte plaintext of the cookie box."""
    _check(short_public, 32, "short-term public key")
    _check(oreo, 24, "oreo")
    _check_uid(near_uid, "near uid")
    _check_uid(far_uid, "far uid")
    return _COOKIE_STUFF.pack(short_public, near_uid, far_uid, oreo)


def unpack_cookie_stuff_untrusted(stuff: bytes) -> CookieStuff:
    """Split the opened cookie box."""
    _require_size(stuff, COOKIE_STUFF_SIZE, "cookie stuff")
    return CookieStuff._make(_COOKIE_STUFF.unpack(stuff))


def pack_initiate(short_public: bytes, oreo: bytes, box248: bytes, nonce: bytes) -> bytes:
    """The 328-byte initiate body."""
    _check(short_public, 32, "short-term public key")
    _check(oreo, 24, "oreo")
    _check(box248, 248, "initiate box")
    _check(nonce, 24, "nonce")
    return _INITIATE.pack(short_public, oreo, box248, nonce)


def unpack_initiate_untrusted(body: bytes) -> Initiate:
    """Split an initiate body."""
    _require_size(body, INITIATE_SIZE, "initiate")
    return Initiate._make(_INITIATE.unpack(body))


def pack_initiate_stuff(
    long_public: bytes, vouch48: bytes, vouch_nonce: bytes, fqdn: bytes
) -> bytes:
    """The 232-byte plaintext of the initiate box.

    ``fqdn`` is right-padded with spaces or cut to 128 bytes, as raet does; a ``str``
    is encoded as ASCII with other characters dropped (also raet's behaviour).
    """
    _check(long_public, 32, "long-term public key")
    _check(vouch48, 48, "vouch box")
    _check(vouch_nonce, 24, "vouch nonce")
    if isinstance(fqdn, str):
        fqdn = fqdn.encode("ascii", "ignore")
    padded = fqdn.ljust(FQDN_SIZE, b" ")[:FQDN_SIZE]
    return _INITIATE_STUFF.pack(long_public, vouch48, vouch_nonce, padded)


def unpack_initiate_stuff_untrusted(stuff: bytes) -> InitiateStuff:
    """Split the opened initiate box; the fqdn loses its trailing spaces."""
    _require_size(stuff, INITIATE_STUFF_SIZE, "initiate stuff")
    long_public, vouch, vouch_nonce, fqdn = _INITIATE_STUFF.unpack(stuff)
    return InitiateStuff(long_public, vouch, vouch_nonce, fqdn.rstrip(b" "))
