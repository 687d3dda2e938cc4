"""The adapter between the compiled native kernel (``raetsalt/_trains.c``) and libsodium.

The kernel seals and opens native datagrams in C, with the very libsodium PyNaCl loaded
(no second copy, no link-time dependency): it is handed the addresses of two functions,
``crypto_box_easy_afternm`` and ``crypto_box_open_easy_afternm``, and calls them with the
session's precomputed key (``SessionBox.shared_key``).  PyNaCl publishes no API for
those addresses, so this is the one place in raetsalt that reads PyNaCl's private cffi
module ``nacl._sodium``; importing ``nacl.bindings`` first runs ``sodium_init()``.  If
that module is missing or lacks the functions (another PyNaCl build), there are no
addresses and the native profile uses its Python kernel, which calls the same
functions through PyNaCl's public bindings (``raetsalt.crypto.box``).
"""

from __future__ import annotations

import nacl.bindings  # noqa: F401  (runs sodium_init() before the functions are used)

__all__ = ["box_function_addresses"]


def box_function_addresses() -> tuple[int, int] | None:
    """The addresses of libsodium's ``crypto_box_easy_afternm`` and
    ``crypto_box_open_easy_afternm`` as PyNaCl loaded it, or None (not available)."""
    try:
        from nacl._sodium import ffi, lib  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        return (
            int(ffi.cast("uintptr_t", ffi.addressof(lib, "crypto_box_easy_afternm"))),
            int(ffi.cast("uintptr_t", ffi.addressof(lib, "crypto_box_open_easy_afternm"))),
        )
    except (AttributeError, TypeError, ValueError):
        return None
