"""All of raetsalt's cryptography, on PyNaCl/libsodium; the only package importing nacl.

* ``Signer``/``Verifier``: long-term Ed25519 keys signing packet feet.
* ``KeyPair``: Curve25519 keys (long-term, or short-term per allow handshake).
* ``SessionBox``: crypto_box with the shared key precomputed once per peer
  (``box.seal_with_key`` and ``box.open_with_key_untrusted`` with the key alone, for the
  native profile's Python kernel).
* ``kernel``: libsodium for the compiled native kernel (``raetsalt/_trains.c``), the one
  module that reads PyNaCl's private cffi module (tests/test_layers.py checks).
"""

from __future__ import annotations

from raetsalt.crypto.box import SessionBox
from raetsalt.crypto.keys import KeyPair, Signer, Verifier, random_bytes

__all__ = ["KeyPair", "SessionBox", "Signer", "Verifier", "random_bytes"]
