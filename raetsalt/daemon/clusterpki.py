"""The cluster's long-term master keys (``cluster_pki_dir``, Salt 3007's name).

One Ed25519 signing seed and one Curve25519 secret for every master of a cluster, kept
in ``<cluster_pki_dir>/cluster.json`` (0600).  The first master that starts creates the
file (exclusively: two masters starting at once cannot both write one); the operator
copies it once to the others' ``cluster_pki_dir`` (no shared filesystem is needed).
Every master then presents these keys:

- on the minions' road, so a minion knows one master key for the whole cluster (a
  ``master_finger`` pins the cluster, not one machine), and
- on the masters' own road (``raetsalt.daemon.peerroad``), where they are the only keys
  accepted: an estate that does not hold them is not a master of this cluster.

``adopt`` writes the keys into a road keep's own estate record before the road opens
(a new estate, or one that held other keys: they are replaced, and the log says so).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import dataclass, replace
from typing import Any

from raetsalt.crypto import KeyPair, Signer
from raetsalt.errors import ConfigError
from raetsalt.keep.records import LocalRecord
from raetsalt.keep.store import FileKeep

log = logging.getLogger("raetsalt.daemon")

FILE = "cluster.json"
MAX_SIZE = 4096


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """The cluster's private keys (hex) and their public halves."""

    sighex: str
    prihex: str

    @property
    def verhex(self) -> str:
        return Signer(bytes.fromhex(self.sighex)).verify_key.hex()

    @property
    def pubhex(self) -> str:
        return KeyPair(bytes.fromhex(self.prihex)).public.hex()


def _parse(text: bytes, where: str) -> ClusterKeys:
    try:
        doc: Any = json.loads(text)
    except ValueError:
        raise ConfigError(f"{where}: not JSON") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: not a mapping")
    keys = []
    for field in ("sighex", "prihex"):
        value = doc.get(field)
        if not isinstance(value, str) or len(value) != 64:
            raise ConfigError(f"{where}: {field} must be 64 hex digits")
        try:
            bytes.fromhex(value)
        except ValueError:
            raise ConfigError(f"{where}: {field} must be 64 hex digits") from None
        keys.append(value.lower())
    return ClusterKeys(*keys)


def load_or_create(directory: str) -> tuple[ClusterKeys, bool]:
    """The cluster's keys from ``directory``; created there when there are none (True:
    this master created them).  Raises ``ConfigError`` for an unusable file."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, FILE)
    fresh = ClusterKeys(Signer.generate().seed.hex(), KeyPair.generate().secret.hex())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ConfigError(f"cluster_pki_dir: cannot create {path}: {exc.strerror}") from None
    else:
        try:
            os.write(fd, json.dumps({"sighex": fresh.sighex, "prihex": fresh.prihex})
                     .encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        log.info("cluster keys created in %s: copy this file to the cluster_pki_dir of "
                 "the other masters", path)
        return fresh, True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"cluster_pki_dir: cannot read {path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SIZE:
            raise ConfigError(f"cluster_pki_dir: {path} is not a key file")
        if info.st_mode & 0o077:
            raise ConfigError(f"cluster_pki_dir: {path} is readable by others "
                              f"(mode {info.st_mode & 0o777:o}; chmod 600 it)")
        text = os.read(fd, MAX_SIZE + 1)
    finally:
        os.close(fd)
    return _parse(text, path), False


def adopt(keep_dir: str, keys: ClusterKeys, *, name: str, ha: tuple[str, int]) -> None:
    """Make the estate of the keep in ``keep_dir`` hold the cluster's keys."""
    keep = FileKeep(keep_dir)
    record = keep.load_local()
    if record is None:
        keep.save_local(LocalRecord(name=name, role=name, main=True, kind=0,
                                    sighex=keys.sighex, prihex=keys.prihex, ha=ha, puid=1))
        return
    if (record.sighex, record.prihex) == (keys.sighex, keys.prihex):
        return
    keep.save_local(replace(record, sighex=keys.sighex, prihex=keys.prihex))
    log.warning("the road keys of %s replaced by the cluster's (cluster_pki_dir): minions "
                "that pinned the old master key must be told the cluster's", keep_dir)
