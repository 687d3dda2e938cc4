"""``POST /keys``: a new minion's key material, as the tar file a user unpacks into the
minion's ``pki_dir`` (``tar -C <pki_dir> -xf saltkeys-<id>.tar``).

A raetsalt minion reads its estate (id, Ed25519 signing seed, Curve25519 secret) from
its road keep, ``<pki_dir>/road/local/estate.json`` (``raetsalt.keep.store``); that file
is what the tar carries, written by the keep itself, with ``road/`` and ``road/local/``
(mode 0700, as the keep makes them).  Beside it ``minion.pub`` holds the public keys
(``verhex``, ``pubhex``: what the master recorded accepted, in ``raetsalt-key
--gen-keys``' format), for the record.
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
from dataclasses import dataclass

from raetsalt.engine.identity import open_estate
from raetsalt.keep.listing import ACC, KeyEntry
from raetsalt.keep.records import LocalRecord
from raetsalt.keep.store import FileKeep
from raetsalt.paths import KEEP_SUBDIR

ESTATE_FILE = f"{KEEP_SUBDIR}/local/estate.json"
PUBLIC_FILE = "minion.pub"


@dataclass(frozen=True, slots=True)
class MinionKeys:
    """A new minion estate: its keep record (private keys in it) and its public keys."""

    record: LocalRecord
    verhex: str
    pubhex: str

    def entry(self) -> KeyEntry:
        """The key as the master records it once accepted."""
        return KeyEntry(self.record.role, ACC, self.verhex, self.pubhex)

    def public_text(self) -> str:
        return f"verhex: {self.verhex}\npubhex: {self.pubhex}\n"


def new_minion_keys(minion_id: str) -> MinionKeys:
    """Fresh keys for minion ``minion_id`` (its estate name and role, as the minion
    daemon names itself).  Raises ``LocalError`` for an id no keep can hold."""
    record, estate = open_estate(None, name=minion_id, role=minion_id, main=False, kind=0,
                                 ha=("0.0.0.0", 0))
    return MinionKeys(record, estate.signer.verify_key.hex(), estate.long_keys.public.hex())


def estate_text(keys: MinionKeys) -> bytes:
    """``local/estate.json`` exactly as the minion's keep writes it."""
    with tempfile.TemporaryDirectory(prefix="rsk") as tmp:
        keep_path = os.path.join(tmp, KEEP_SUBDIR)
        FileKeep(keep_path, durable=False).save_local(keys.record)
        with open(os.path.join(tmp, ESTATE_FILE), "rb") as handle:
            return handle.read()


def key_tarball(estate: bytes, public: str) -> bytes:
    """The tar file of ``POST /keys`` (module docstring): ``estate`` is the minion's
    ``local/estate.json``, ``public`` its public keys."""
    now = int(time.time())
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in (KEEP_SUBDIR, os.path.dirname(ESTATE_FILE)):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o700, now
            tar.addfile(info)
        for name, data, mode in ((ESTATE_FILE, estate, 0o600),
                                 (PUBLIC_FILE, public.encode(), 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, now
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
