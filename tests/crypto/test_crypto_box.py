"""SessionBox: crypto_box with a precomputed shared key, raet's coat layout."""

from __future__ import annotations

import nacl.public
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.crypto import KeyPair, SessionBox
from raetsalt.errors import BadPacket, LocalError

ALICE = KeyPair(bytes(range(32)))
BOB = KeyPair(bytes(range(32, 64)))
A_TO_B = SessionBox(ALICE.secret, BOB.public)
B_TO_A = SessionBox(BOB.secret, ALICE.public)
NONCE = bytes(range(24))


def _decrypt_fails(box: SessionBox, cipher: bytes, nonce: bytes = NONCE) -> None:
    with pytest.raises(BadPacket) as info:
        box.decrypt_untrusted(cipher, nonce)
    assert info.value.trigger == "decrypt"


def _open_fails(box: SessionBox, coat: bytes) -> None:
    with pytest.raises(BadPacket) as info:
        box.open_untrusted(coat)
    assert info.value.trigger == "decrypt"


def test_both_directions_share_one_key() -> None:
    cipher = A_TO_B.encrypt(b"ping", NONCE)
    assert cipher == B_TO_A.encrypt(b"ping", NONCE)
    assert B_TO_A.decrypt_untrusted(cipher, NONCE) == b"ping"
    assert A_TO_B.decrypt_untrusted(cipher, NONCE) == b"ping"


def test_layout_is_tag_then_cipher_like_pynacl_box() -> None:
    # PyNaCl's high-level Box (an independent path through libsodium) agrees.
    reference = nacl.public.Box(
        nacl.public.PrivateKey(ALICE.secret), nacl.public.PublicKey(BOB.public)
    ).encrypt(b"hello world", NONCE)
    cipher = A_TO_B.encrypt(b"hello world", NONCE)
    assert len(cipher) == 16 + 11
    assert reference == NONCE + cipher


def test_seal_appends_a_fresh_nonce() -> None:
    first, second = A_TO_B.seal(b"body"), A_TO_B.seal(b"body")
    assert len(first) == 16 + 4 + 24
    assert first[-24:] != second[-24:]
    assert A_TO_B.decrypt_untrusted(first[:-24], first[-24:]) == b"body"
    assert B_TO_A.open_untrusted(first) == B_TO_A.open_untrusted(second) == b"body"


def test_empty_body_is_an_empty_coat() -> None:
    assert A_TO_B.seal(b"") == b""
    assert B_TO_A.open_untrusted(b"") == b""


@given(plain=st.binary(min_size=1, max_size=2000))
def test_seal_open_round_trip(plain: bytes) -> None:
    assert B_TO_A.open_untrusted(A_TO_B.seal(plain)) == plain


@given(plain=st.binary(min_size=1, max_size=200), position=st.integers(0), bit=st.integers(0, 7))
def test_tampered_coat_is_bad_packet(plain: bytes, position: int, bit: int) -> None:
    coat = bytearray(A_TO_B.seal(plain))
    coat[position % len(coat)] ^= 1 << bit
    _open_fails(B_TO_A, bytes(coat))


def test_wrong_key_is_bad_packet() -> None:
    eve = SessionBox(KeyPair.generate().secret, BOB.public)
    _open_fails(eve, A_TO_B.seal(b"secret"))


@pytest.mark.parametrize("length", [1, 16, 39])
def test_short_coat_is_bad_packet(length: int) -> None:
    _open_fails(B_TO_A, bytes(length))


def test_decrypt_rejects_short_cipher_and_bad_nonce() -> None:
    cipher = A_TO_B.encrypt(b"x", NONCE)
    _decrypt_fails(B_TO_A, cipher[:15])
    _decrypt_fails(B_TO_A, cipher, NONCE[:23])
    _decrypt_fails(B_TO_A, cipher, bytes(24))


def test_bad_keys_are_local_errors() -> None:
    with pytest.raises(LocalError):
        SessionBox(bytes(31), BOB.public)
    with pytest.raises(LocalError):
        SessionBox(ALICE.secret, bytes(33))
    with pytest.raises(LocalError):
        SessionBox(ALICE.secret, bytes(32))  # low-order point: no shared secret
