"""Ed25519 signers/verifiers and Curve25519 key pairs."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.crypto import KeyPair, Signer, Verifier, random_bytes
from raetsalt.errors import LocalError


def _seed(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


# Known answers: the keys of the captured raet 0.6.8 exchange
# (tests/wire/test_wire_captured_packets.py),
# whose seeds/secrets are sha256("<name>:sig") / sha256("<name>:pri").
@pytest.mark.parametrize(
    ("name", "verhex", "pubhex"),
    [
        ("minion", "13a49ae51f2c68aa669ba458b950ae6f4814b1a03a3d17eee20710065a037670",
         "56729dfd781341a8212f9dfdc7926c7c12eddd62fbd6c895d5b0ddca424e2a17"),
        ("main", "b9603094e1ed0c90c7e45475bbfb910276df01bf27b539f5c47cf64a3a7fb5b6",
         "5b2fe8b6a5dfee42d9ee7d88ed56889efc86f1c70f49d5674d525d6cb4dfa734"),
    ],
)  # fmt: skip
def test_public_keys_match_captured_raet_keys(name: str, verhex: str, pubhex: str) -> None:
    assert Signer(_seed(f"{name}:sig")).verify_key.hex() == verhex
    assert KeyPair(_seed(f"{name}:pri")).public.hex() == pubhex


def test_rfc8032_test_vector_1() -> None:
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    signer = Signer(seed)
    assert signer.verify_key.hex() == (
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    )
    assert signer.sign(b"").hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )


def test_sign_verify_round_trip() -> None:
    signer = Signer.generate()
    verifier = Verifier(signer.verify_key)
    signature = signer.sign(b"head||coat||zeros")
    assert len(signature) == 64
    assert verifier.verify(b"head||coat||zeros", signature)


@given(message=st.binary(max_size=300), position=st.integers(0, 63), bit=st.integers(0, 7))
def test_forged_signature_is_false(message: bytes, position: int, bit: int) -> None:
    signer = Signer(_seed("forgery"))
    verifier = Verifier(signer.verify_key)
    signature = bytearray(signer.sign(message))
    signature[position] ^= 1 << bit
    assert verifier.verify(message, bytes(signature)) is False
    assert verifier.verify(message + b"x", signer.sign(message)) is False


@pytest.mark.parametrize("signature", [b"", b"\x00" * 63, b"\x00" * 65, b"\x00" * 64, "x" * 64])
def test_verify_never_raises_on_bad_input(signature: bytes) -> None:
    assert Verifier(Signer(_seed("x")).verify_key).verify(b"message", signature) is False


def test_signature_from_another_key_is_false() -> None:
    assert not Verifier(Signer.generate().verify_key).verify(b"m", Signer.generate().sign(b"m"))


@pytest.mark.parametrize("size", [0, 31, 33])
def test_bad_key_lengths_are_local_errors(size: int) -> None:
    with pytest.raises(LocalError):
        Signer(bytes(size))
    with pytest.raises(LocalError):
        Verifier(bytes(size))
    with pytest.raises(LocalError):
        KeyPair(bytes(size))


def test_key_pair_from_secret_is_deterministic() -> None:
    pair = KeyPair.generate()
    again = KeyPair(pair.secret)
    assert again.public == pair.public and again == pair
    assert len(pair.public) == len(pair.secret) == 32
    assert KeyPair.generate() != pair


def test_repr_hides_secrets() -> None:
    signer, pair = Signer.generate(), KeyPair.generate()
    assert signer.seed.hex() not in repr(signer)
    assert pair.secret.hex() not in repr(pair)
    assert signer.verify_key.hex() in repr(signer)


def test_random_bytes() -> None:
    assert len(random_bytes(24)) == 24
    assert random_bytes(32) != random_bytes(32)
