"""Where a node keeps its files under the configured directories.

The master daemon and ``raetsalt-key`` must agree on these, so both ask here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROAD_KEEP = "road"


def road_keep_dir(opts: Mapping[str, Any]) -> Path:
    """The road keep (``FileKeep``) of a node: ``<pki_dir>/road``.

    It holds the node's own estate and private keys and, on the master, the minion roles
    (pending/accepted/rejected) and denied keys that ``raetsalt-key`` lists and changes.
    """
    return Path(opts["pki_dir"]) / ROAD_KEEP
