"""Where a node keeps its files, derived from its opts.

One helper per location so the daemons and the CLIs (``raetsalt-key``) agree on the
layout without repeating path arithmetic.

Layout under ``pki_dir`` (master and minion alike)::

    <pki_dir>/            mode 0700 (created by FileKeep)
        road/             the node's road keep, a ``raetsalt.keep.FileKeep``:
                          its own estate and private keys (local/), the remote estates
                          (remote/) and, on the master, every minion key by state
                          (role/ for accepted/pending/rejected, denied/ for denied)

The keep sits in a sub-directory rather than in ``pki_dir`` itself so ``pki_dir`` can
later hold other key material (signing keys, a master key chain for rotation) without
mixing file kinds inside the keep's own directories.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["KEEP_SUBDIR", "keep_dir"]

KEEP_SUBDIR = "road"


def keep_dir(opts: Mapping[str, Any]) -> str:
    """Directory of the node's road keep: ``<opts['pki_dir']>/road``.

    ``opts`` is a loaded config (``raetsalt.config``), whose ``pki_dir`` is already
    absolute (joined to ``root_dir``).  Nothing is created here.
    """
    return os.path.join(opts["pki_dir"], KEEP_SUBDIR)
