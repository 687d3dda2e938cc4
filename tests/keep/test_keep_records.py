from __future__ import annotations

import hashlib

import pytest

from raetsalt.errors import KeepError, LocalError
from raetsalt.keep import (
    MAX_NAME_LENGTH,
    Acceptance,
    AutoMode,
    fingerprint,
    normalize_fingerprint,
    validate_name,
)


@pytest.mark.parametrize(
    "name",
    ["web1", "web1_minion", "host.example.com", "a", "_x", "0", "user@host", "a-b+c=d~e",
     "x" * MAX_NAME_LENGTH],
)
def test_valid_names(name: str) -> None:
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../etc", "a/b", "a\\b", "a b", " a", "a\tb", "a\nb", "a..b", ".hidden",
     "-rf", "a\0b", "x" * (MAX_NAME_LENGTH + 1), "caf\u00e9", "a*", "a:b", 3, None],
)
def test_invalid_names(name: object) -> None:
    with pytest.raises(KeepError):
        validate_name(name)


def test_invalid_name_message_says_what() -> None:
    with pytest.raises(KeepError, match="role"):
        validate_name("a/b", "role")


def test_fingerprint_is_colon_hex_of_sha256_of_raw_key() -> None:
    key = bytes(range(32))
    fp = fingerprint(key.hex())
    digest = hashlib.sha256(key).hexdigest()
    assert fp.replace(":", "") == digest
    assert fp.split(":") == [digest[i : i + 2] for i in range(0, 64, 2)]
    assert fp == fp.lower()
    # case of the hex input does not matter: it is the key bytes that are hashed
    assert fingerprint(key.hex().upper()) == fp


def test_fingerprint_other_hash_type() -> None:
    key = "ab" * 32
    assert fingerprint(key, "md5").replace(":", "") == hashlib.md5(bytes.fromhex(key)).hexdigest()


def test_fingerprint_errors() -> None:
    with pytest.raises(LocalError):
        fingerprint("zz")
    with pytest.raises(LocalError):
        fingerprint("ab" * 32, "crc32")


def test_normalize_fingerprint() -> None:
    assert normalize_fingerprint(" AB:cd:EF ") == "ab:cd:ef"
    assert normalize_fingerprint("abcdef") == "ab:cd:ef"


def test_enum_values_are_the_stored_strings() -> None:
    assert [a.value for a in Acceptance] == ["pending", "accepted", "rejected"]
    assert [m.value for m in AutoMode] == ["never", "once", "always"]
    assert Acceptance("accepted") is Acceptance.ACCEPTED
