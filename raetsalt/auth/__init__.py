"""External authentication for the master: password backends (``file``, ``pam``), the
token store, and password hash checking (see each module)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_access_config(opts: Mapping[str, Any]) -> list[str]:
    """Everything the master checks about access when it starts: the rules
    (``raetsalt.acl_config.validate_master_access``) and the eauth backends' settings.  Raises
    ConfigError naming the first problem; returns the warnings."""
    from raetsalt.acl_config import validate_master_access

    from .backends import validate_backends

    return validate_master_access(opts) + validate_backends(opts.get("external_auth"))
