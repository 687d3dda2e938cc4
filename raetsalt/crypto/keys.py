"""Long-term and short-term keys: Ed25519 signing, Curve25519 key pairs, randomness.

raet stores keys as hex (``sighex`` = Ed25519 seed, ``prihex`` = Curve25519 secret,
``verhex``/``pubhex`` their public halves); hex conversion belongs to the keep, so
every class here takes and returns raw bytes.

.. warning:: ``Signer`` and ``KeyPair`` hold secret keys.  Their ``repr`` never shows
   them; do not log ``seed`` or ``secret``.
"""

from __future__ import annotations

import nacl.bindings as _sodium
import nacl.exceptions
import nacl.utils

from raetsalt.errors import LocalError

__all__ = ["random_bytes", "Signer", "Verifier", "KeyPair", "verify_detached"]

SEED_SIZE = _sodium.crypto_sign_SEEDBYTES  # 32
VERIFY_KEY_SIZE = _sodium.crypto_sign_PUBLICKEYBYTES  # 32
SIGNATURE_SIZE = _sodium.crypto_sign_BYTES  # 64
SECRET_KEY_SIZE = _sodium.crypto_box_SECRETKEYBYTES  # 32
PUBLIC_KEY_SIZE = _sodium.crypto_box_PUBLICKEYBYTES  # 32


def random_bytes(n: int) -> bytes:
    """``n`` bytes from the operating system's CSPRNG (via libsodium)."""
    return nacl.utils.random(n)


def verify_detached(key: bytes, message: bytes, signature: bytes) -> bool:
    """True iff ``signature`` is ``key``'s valid signature of ``message``; never raises."""
    if len(signature) != SIGNATURE_SIZE or len(key) != VERIFY_KEY_SIZE:
        return False
    try:
        _sodium.crypto_sign_open(signature + message, key)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError,
            TypeError, ValueError):  # fmt: skip
        return False
    return True


def _require_bytes(value: bytes, size: int, what: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != size:
        raise LocalError(f"{what} must be {size} bytes")
    return value


class Signer:
    """A long-term Ed25519 signing key, built from its 32-byte seed (raet ``sighex``).

    .. warning:: holds a secret key.
    """

    SIZE = SEED_SIZE
    __slots__ = ("seed", "verify_key", "_secret")

    def __init__(self, seed: bytes) -> None:
        self.seed = _require_bytes(seed, SEED_SIZE, "signing seed")
        public, secret = _sodium.crypto_sign_seed_keypair(seed)
        self.verify_key: bytes = public
        # libsodium's 64-byte secret key (seed || public key), what crypto_sign wants.
        self._secret: bytes = secret

    @classmethod
    def generate(cls) -> Signer:
        """A new random signing key."""
        return cls(random_bytes(SEED_SIZE))

    def sign(self, message: bytes) -> bytes:
        """The 64-byte detached Ed25519 signature of ``message``."""
        return _sodium.crypto_sign(message, self._secret)[:SIGNATURE_SIZE]

    def __bytes__(self) -> bytes:
        return self.seed

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Signer):
            return NotImplemented
        return _sodium.sodium_memcmp(self.seed, other.seed)

    def __hash__(self) -> int:
        return hash(self.verify_key)

    def __repr__(self) -> str:
        return f"Signer(verify_key={self.verify_key.hex()})"


class Verifier:
    """An Ed25519 verify key (raet ``verhex``) checking detached signatures."""

    SIZE = VERIFY_KEY_SIZE
    __slots__ = ("verify_key",)

    def __init__(self, verify_key: bytes) -> None:
        """Raises ``LocalError`` unless ``verify_key`` is 32 bytes."""
        self.verify_key = _require_bytes(verify_key, VERIFY_KEY_SIZE, "verify key")

    def verify(self, message: bytes, signature: bytes) -> bool:
        """True iff ``signature`` is a valid signature of ``message``; never raises."""
        return verify_detached(self.verify_key, message, signature)

    def __bytes__(self) -> bytes:
        return self.verify_key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Verifier):
            return NotImplemented
        return _sodium.sodium_memcmp(self.verify_key, other.verify_key)

    def __hash__(self) -> int:
        return hash(self.verify_key)

    def __repr__(self) -> str:
        return f"Verifier({self.verify_key.hex()})"


class KeyPair:
    """A Curve25519 key pair from its 32-byte secret (raet ``prihex``, or a session key).

    .. warning:: holds a secret key.
    """

    SIZE = SECRET_KEY_SIZE
    __slots__ = ("secret", "public")

    def __init__(self, secret: bytes) -> None:
        self.secret = _require_bytes(secret, SECRET_KEY_SIZE, "secret key")
        self.public: bytes = _sodium.crypto_scalarmult_base(secret)

    @classmethod
    def generate(cls) -> KeyPair:
        """A new random key pair (used for every allow handshake's short-term keys)."""
        return cls(random_bytes(SECRET_KEY_SIZE))

    def __bytes__(self) -> bytes:
        return self.secret

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyPair):
            return NotImplemented
        return _sodium.sodium_memcmp(self.secret, other.secret)

    def __hash__(self) -> int:
        return hash(self.public)

    def __repr__(self) -> str:
        return f"KeyPair(public={self.public.hex()})"
