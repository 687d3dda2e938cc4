"""NaCl ``crypto_box`` with a precomputed shared key: packet coats and allow boxes.

Layout (docs/raet-wire.md §4.2), libsodium "easy" form::

    encrypt(plain, nonce)  -> tag (16) || cipher (len(plain))
    seal(plain)            -> tag (16) || cipher || nonce (24, random)

raet recomputes the X25519 agreement for every packet; here ``beforenm`` runs once
per ``SessionBox`` and every packet only pays for XSalsa20-Poly1305.

The native profile's packets (``encrypt_after``, ``decrypt_untrusted_at``) call libsodium
through PyNaCl's own cffi module straight into the buffer that is sent or returned,
without the bindings' temporary buffer and copy: a third of the cost per call for small
packets (measured with ``bench/bench_road.py``).  Where that module is not there (another PyNaCl
build), they use the bindings, with the same results.
"""

from __future__ import annotations

import nacl.bindings as _sodium
import nacl.exceptions
import nacl.utils

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, LocalError

__all__ = ["SessionBox"]

NONCE_SIZE = _sodium.crypto_box_NONCEBYTES  # 24
TAG_SIZE = 16  # Poly1305 tag (crypto_box_MACBYTES)
KEY_SIZE = _sodium.crypto_box_PUBLICKEYBYTES  # 32

_easy = _sodium.crypto_box_easy_afternm
_open_easy = _sodium.crypto_box_open_easy_afternm
_random = nacl.utils.random

try:  # PyNaCl's compiled module; importing nacl.bindings above ran sodium_init()
    from nacl._sodium import ffi as _ffi  # type: ignore[import-not-found]
    from nacl._sodium import lib as _lib
except ImportError:  # pragma: no cover - a PyNaCl without it: the bindings serve
    _ffi = _lib = None


class SessionBox:
    """Encrypts to and decrypts from one peer with ``X25519(our_secret, their_public)``.

    Both directions use the same shared key, so ``SessionBox(a.secret, b.public)`` and
    ``SessionBox(b.secret, a.public)`` open each other's boxes.

    .. warning:: holds the precomputed shared secret.
    """

    __slots__ = ("_key",)

    def __init__(self, our_secret: bytes, their_public: bytes) -> None:
        """Raises ``LocalError`` unless both keys are 32 bytes."""
        if len(our_secret) != KEY_SIZE or len(their_public) != KEY_SIZE:
            raise LocalError(f"box keys must be {KEY_SIZE} bytes")
        try:
            self._key: bytes = _sodium.crypto_box_beforenm(their_public, our_secret)
        except nacl.exceptions.CryptoError as exc:
            # libsodium refuses low-order public keys (all-zero shared secret).
            raise LocalError(f"unusable public key: {exc}") from exc

    @property
    def shared_key(self) -> bytes:
        """The precomputed key (for ``raetsalt.engine.trains``, which seals natively)."""
        return self._key

    def encrypt(self, plain: bytes, nonce: bytes) -> bytes:
        """``tag || cipher`` of ``plain`` under ``nonce`` (24 bytes, never reused)."""
        return _easy(plain, nonce, self._key)

    def encrypt_after(self, prefix: bytes, plain: bytes, nonce: bytes) -> bytearray:
        """``prefix || encrypt(plain, nonce)`` in one new buffer."""
        start = len(prefix)
        size = len(plain)
        out = bytearray(start + TAG_SIZE + size)
        out[:start] = prefix
        if _lib is None or len(nonce) != NONCE_SIZE:
            out[start:] = _easy(plain, nonce, self._key)
        else:
            cipher = _ffi.from_buffer(out) + start
            _lib.crypto_box_easy_afternm(cipher, plain, size, nonce, self._key)
        return out

    def decrypt_untrusted_at(self, data: bytes, start: int, nonce: bytes) -> bytearray:
        """Open the ``tag || cipher`` that begins at ``data[start]`` into a new buffer;
        raises only ``BadPacket`` (``DropReason.DECRYPT``)."""
        size = len(data) - start - TAG_SIZE
        if len(nonce) != NONCE_SIZE or size < 0:
            raise BadPacket("box too short or bad nonce", DropReason.DECRYPT)
        if _lib is None:
            return bytearray(self.decrypt_untrusted(data[start:], nonce))
        out = bytearray(size)
        cipher = _ffi.from_buffer(data) + start
        if _lib.crypto_box_open_easy_afternm(
            _ffi.from_buffer(out), cipher, size + TAG_SIZE, nonce, self._key
        ):
            raise BadPacket("box does not open", DropReason.DECRYPT)
        return out

    def decrypt_untrusted(self, cipher: bytes, nonce: bytes) -> bytes:
        """Open ``tag || cipher``; raises only ``BadPacket`` (``DropReason.DECRYPT``)."""
        if len(nonce) != NONCE_SIZE or len(cipher) < TAG_SIZE:
            raise BadPacket("box too short or bad nonce", DropReason.DECRYPT)
        try:
            return _open_easy(cipher, nonce, self._key)
        except (nacl.exceptions.CryptoError, TypeError, ValueError):
            raise BadPacket("box does not open", DropReason.DECRYPT) from None

    def seal(self, plain: bytes) -> bytes:
        """raet's coat: ``encrypt(plain, random nonce) || nonce``; ``b""`` stays ``b""``."""
        if not plain:
            return b""
        nonce = _random(NONCE_SIZE)
        return _easy(plain, nonce, self._key) + nonce

    def open_untrusted(self, coat: bytes) -> bytes:
        """Inverse of ``seal``; raises only ``BadPacket`` (``DropReason.DECRYPT``)."""
        if not coat:
            return b""
        if len(coat) < TAG_SIZE + NONCE_SIZE:
            raise BadPacket(f"coat of {len(coat)} bytes is too short for a box", DropReason.DECRYPT)
        try:
            return _open_easy(coat[:-NONCE_SIZE], coat[-NONCE_SIZE:], self._key)
        except (nacl.exceptions.CryptoError, TypeError, ValueError):
            raise BadPacket("coat does not open", DropReason.DECRYPT) from None

    def __repr__(self) -> str:
        return "SessionBox(<shared key>)"
