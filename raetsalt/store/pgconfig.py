"""Where the job cache database is, from the master's config (pure).

Either ``cluster_store``, a libpq connection string (``host=... dbname=...`` or a
``postgresql://`` URI) used as it is, or Salt's pgjsonb returner keys
``returner.pgjsonb.host/port/user/pass/db/connect_timeout/sslmode/sslcert/sslkey/
sslrootcert/sslcrl`` with Salt's defaults (``salt`` for host, user, password and
database, port 5432).  A ``host`` starting with ``/`` is a Unix socket directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PREFIX = "returner.pgjsonb."
DEFAULTS: dict[str, Any] = {"host": "salt", "user": "salt", "pass": "salt", "db": "salt",
                            "port": 5432}
"""Salt's pgjsonb defaults."""
_LIBPQ = {"host": "host", "port": "port", "user": "user", "pass": "password", "db": "dbname",
          "connect_timeout": "connect_timeout", "sslmode": "sslmode", "sslcert": "sslcert",
          "sslkey": "sslkey", "sslrootcert": "sslrootcert", "sslcrl": "sslcrl"}
"""Salt's option name -> libpq's keyword."""
CONNECT_TIMEOUT = 5
"""Seconds libpq waits for a connection when the config names none."""


class StoreConfigError(ValueError):
    """The config does not say usably where the database is."""


def connection_params(opts: Mapping[str, Any]) -> dict[str, Any]:
    """libpq keywords for the job cache database (``conninfo`` holds a whole
    ``cluster_store`` string when one is set)."""
    store = opts.get("cluster_store")
    if store is not None:
        if not isinstance(store, str) or not store.strip():
            raise StoreConfigError("cluster_store must be a libpq connection string")
        return {"conninfo": store.strip()}
    params: dict[str, Any] = {}
    for option, keyword in _LIBPQ.items():
        value = opts.get(PREFIX + option, DEFAULTS.get(option))
        if value is None:
            continue
        if option in ("port", "connect_timeout"):
            try:
                value = int(value)
            except (TypeError, ValueError):
                raise StoreConfigError(f"{PREFIX}{option} must be a number") from None
        elif not isinstance(value, str):
            value = str(value)
        params[keyword] = value
    params.setdefault("connect_timeout", CONNECT_TIMEOUT)
    return params


def cluster_params(opts: Mapping[str, Any]) -> dict[str, Any]:
    """``connection_params`` for a cluster's shared state: a bad store or psycopg 3
    missing is a ``ConfigError`` saying what to do."""
    from raetsalt.errors import ConfigError

    try:
        params = connection_params(opts)
        import psycopg  # noqa: F401 - only whether it is there
    except StoreConfigError as exc:
        raise ConfigError(str(exc)) from None
    except ImportError as exc:
        raise ConfigError(f"cluster_id needs psycopg 3 ({exc}): "
                          "pip install 'raetsalt[cluster]'") from None
    return params


def describe(params: Mapping[str, Any]) -> str:
    """Where the database is, for the log: never the password."""
    if "conninfo" in params:
        return "cluster_store"
    return f"{params.get('dbname')} on {params.get('host')}:{params.get('port')}"
