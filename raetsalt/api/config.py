"""The ``rest_cherrypy:`` section of the master config, checked and with defaults.

Salt's keys keep Salt's names and meaning; a few are raetsalt's own (``max_header_size``,
``sse_queue``, ``sse_max_clients``, ``cors_origins``).  A value of the wrong type is a
``ConfigError`` naming the key; an unknown key is reported once by the daemon.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raetsalt.errors import ConfigError

SECTION = "rest_cherrypy"
IGNORED = frozenset({"debug", "log_access_file", "log_error_file", "collect_stats",
                     "stats_disable_auth", "ssl_chain", "socket_queue_size", "thread_pool_max",
                     "websockets", "root_prefix", "expire_responses"})
"""Salt keys accepted without effect (see the README's REST API section)."""


@dataclass(frozen=True, slots=True)
class ApiConfig:
    port: int = 8000
    host: str = "0.0.0.0"
    ssl_crt: str | None = None
    ssl_key: str | None = None
    disable_ssl: bool = False
    webhook_url: str = "/hook"
    webhook_disable_auth: bool = False
    thread_pool: int = 100
    socket_timeout: float = 10.0
    max_request_body_size: int = 1048576
    max_header_size: int = 16384
    app: str | None = None
    app_path: str = "/app"
    static: str | None = None
    static_path: str = "/static"
    sse_queue: int = 1024
    """Events queued for one /events client before it is dropped as a slow reader."""
    sse_max_clients: int = 0
    """Concurrent /events clients (0: ``thread_pool`` minus 10, so requests still run)."""
    cors_origins: tuple[str, ...] = ()
    """Origins allowed to call the API from a browser page of another site (none)."""
    expire_responses: bool = True

    @property
    def tls(self) -> bool:
        return not self.disable_ssl

    def max_sse_clients(self) -> int:
        return self.sse_max_clients or max(1, self.thread_pool - 10)


_TYPES: dict[str, tuple[type, ...]] = {
    "port": (int,), "host": (str,), "ssl_crt": (str,), "ssl_key": (str,),
    "disable_ssl": (bool,), "webhook_url": (str,), "webhook_disable_auth": (bool,),
    "thread_pool": (int,), "socket_timeout": (int, float),
    "max_request_body_size": (int,), "max_header_size": (int,), "app": (str,),
    "app_path": (str,), "static": (str,), "static_path": (str,), "sse_queue": (int,),
    "sse_max_clients": (int,), "cors_origins": (list, str), "expire_responses": (bool,),
}
_BOUNDS: dict[str, tuple[float, float]] = {
    "port": (0, 65535), "thread_pool": (2, 4096), "socket_timeout": (0.1, 3600),
    "max_request_body_size": (1, 1 << 30), "max_header_size": (1024, 1 << 20),
    "sse_queue": (1, 1 << 20), "sse_max_clients": (0, 100_000),
}


def load(opts: Mapping[str, Any]) -> tuple[ApiConfig, list[str]]:
    """The API config from the master's opts, and the unknown keys found."""
    raw = opts.get(SECTION)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{SECTION}: must be a mapping, not {type(raw).__name__}")
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in raw.items():
        if key not in _TYPES:
            if key not in IGNORED:
                unknown.append(str(key))
            continue
        if value is None:
            continue
        types = _TYPES[key]
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{SECTION}.{key}: expected a number, not {value!r}")
        if not isinstance(value, types):
            raise ConfigError(f"{SECTION}.{key}: expected {types[0].__name__}, "
                              f"not {type(value).__name__}")
        if key in _BOUNDS and isinstance(value, int | float):
            low, high = _BOUNDS[key]
            if not low <= value <= high:
                raise ConfigError(f"{SECTION}.{key}: {value} is outside {low:g}..{high:g}")
        if key == "cors_origins":
            value = (value,) if isinstance(value, str) else tuple(
                str(v) for v in value if isinstance(value, list))
        if key in ("webhook_url", "app_path", "static_path"):
            if not value.startswith("/") or value == "/" or "//" in value:
                raise ConfigError(f"{SECTION}.{key}: {value!r} must be a path like /name")
            value = value.rstrip("/")
        values[key] = value
    config = ApiConfig(**values)
    if config.tls and not (config.ssl_crt and config.ssl_key):
        raise ConfigError(f"{SECTION}: ssl_crt and ssl_key are required unless disable_ssl "
                          "is true")
    for key in ("ssl_crt", "ssl_key", "static"):
        path = getattr(config, key)
        if key.startswith("ssl") and not config.tls:
            continue
        if path is not None and not os.path.exists(path):
            raise ConfigError(f"{SECTION}.{key}: {path} does not exist")
    if config.app is not None and not os.path.isfile(config.app):
        raise ConfigError(f"{SECTION}.app: {config.app} is not a file")
    return config, unknown


__all__ = ["SECTION", "ApiConfig", "load"]
