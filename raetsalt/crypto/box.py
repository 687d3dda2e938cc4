"""NaCl ``crypto_box`` with a precomputed shared key: packet coats and allow boxes.

Layout (docs/raet-wire.md §4.2), libsodium "easy" form::

    encrypt(plain, nonce)  -> tag (16) || cipher (len(plain))
    seal(plain)            -> tag (16) || cipher || nonce (24, random)

raet recomputes the X25519 agreement for every packet; here ``beforenm`` runs once
per ``SessionBox`` and every packet only pays for XSalsa20-Poly1305.

The native profile seals with the precomputed key alone (``seal_with_key``,
``open_with_key_untrusted``: its Python kernel, ``raetsalt.engine.native.trains``); its
compiled kernel calls the same libsodium functions through ``raetsalt.crypto.kernel``.
"""

from __future__ import annotations

import nacl.bindings as _sodium
import nacl.exceptions
import nacl.utils

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, LocalError

__all__ = ["SessionBox", "open_with_key_untrusted", "seal_with_key"]

NONCE_SIZE = _sodium.crypto_box_NONCEBYTES  # 24
TAG_SIZE = 16  # Poly1305 tag (crypto_box_MACBYTES)
KEY_SIZE = _sodium.crypto_box_PUBLICKEYBYTES  # 32

_easy = _sodium.crypto_box_easy_afternm
_open_easy = _sodium.crypto_box_open_easy_afternm
_random = nacl.utils.random


def seal_with_key(key: bytes, plain: bytes, nonce: bytes) -> bytes:
    """``tag || cipher`` of ``plain`` under the precomputed ``key`` (``SessionBox.shared_key``)
    and ``nonce`` (24 bytes, never reused under ``key``)."""
    return _easy(plain, nonce, key)


def open_with_key_untrusted(key: bytes, cipher: bytes, nonce: bytes) -> bytes | None:
    """The plain text of ``tag || cipher`` under the precomputed ``key``, or None when
    it does not open (forged, truncated, another key)."""
    try:
        return _open_easy(cipher, nonce, key)
    except (nacl.exceptions.CryptoError, TypeError, ValueError):
        return None


class SessionBox:
    """Encrypts to and decrypts from one peer with ``X25519(our_secret, their_public)``.

    Both directions use the same shared key, so ``SessionBox(a.secret, b.public)`` and
    ``SessionBox(b.secret, a.public)`` open each other's boxes.

    .. warning:: holds the precomputed shared secret.
    """

    __slots__ = ("_key",)

    def __init__(self, our_secret: bytes, their_public: bytes, *,
                 agreed: bytes | None = None) -> None:
        """Raises ``LocalError`` unless both keys are 32 bytes.  ``agreed``: the key
        ``raetsalt.crypto.jobs.agree`` computed from these two keys elsewhere."""
        if len(our_secret) != KEY_SIZE or len(their_public) != KEY_SIZE:
            raise LocalError(f"box keys must be {KEY_SIZE} bytes")
        if agreed is not None:
            self._key: bytes = agreed
            return
        try:
            self._key = _sodium.crypto_box_beforenm(their_public, our_secret)
        except nacl.exceptions.CryptoError as exc:
            # libsodium refuses low-order public keys (all-zero shared secret).
            raise LocalError(f"unusable public key: {exc}") from exc

    @property
    def shared_key(self) -> bytes:
        """The precomputed key (the native profile seals with it: ``seal_with_key``)."""
        return self._key

    def encrypt(self, plain: bytes, nonce: bytes) -> bytes:
        """``tag || cipher`` of ``plain`` under ``nonce`` (24 bytes, never reused)."""
        return _easy(plain, nonce, self._key)

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
