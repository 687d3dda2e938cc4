"""``raetsalt-api``: the REST API daemon (``raetsalt.api``) of a running raetsalt master.

    raetsalt-api [-c CONFDIR] [-l LEVEL] [--port-file PATH]

Reads the master's config (``rest_cherrypy:`` for the API), serves until SIGTERM or
SIGINT.  Once listening it logs ``raetsalt-api listening on http(s)://HOST:PORT`` and,
with ``--port-file``, writes the bound port there (``port: 0`` binds a free one).  It
must run as the master's user or root (it uses the master's lane and token store).
Exit codes: 0 after a signal, 1 when it cannot start, 78 for a bad config.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from raetsalt import syspaths
from raetsalt.cli._flags import add_version_flags
from raetsalt.config import LOG_LEVELS, load_node_config
from raetsalt.errors import ConfigError
from raetsalt.log import setup_console_logger

EX_CONFIG = 78
log = logging.getLogger("raetsalt.api")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raetsalt-api", description="Serve Salt's rest_cherrypy HTTP API on a raetsalt "
                                         "master.")
    add_version_flags(parser)
    parser.add_argument("-c", "--config-dir", default=syspaths.CONFIG_DIR,
                        help="directory of the master config (default: %(default)s)")
    parser.add_argument("-l", "--log-level", choices=LOG_LEVELS, default=None,
                        help="console log level (default: the config's log_level)")
    parser.add_argument("--port-file", default=None,
                        help="write the bound port to this file once listening")
    return parser


def _no_access_line() -> None:
    """The access log of a manager whose logger is above INFO: nothing to write."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        opts = load_node_config(os.path.abspath(args.config_dir), "master")
        from raetsalt.api.config import load

        config, unknown = load(opts)
    except ConfigError as exc:
        print(f"raetsalt-api: {exc}", file=sys.stderr)
        return EX_CONFIG
    setup_console_logger(args.log_level or opts.get("log_level") or "warning")
    try:
        import cherrypy
    except ImportError:
        print("raetsalt-api: CherryPy is not installed (pip install 'raetsalt[api]')",
              file=sys.stderr)
        return EX_CONFIG
    from raetsalt.api.app import Api, mount, serve_through_front, server_config
    from raetsalt.api.auth import Tokens
    from raetsalt.api.lowstate import Dispatcher
    from raetsalt.api.master import MasterLink
    from raetsalt.api.sse import EventHub

    for key in unknown:
        log.warning("rest_cherrypy: unknown key %r ignored", key)
    if config.disable_ssl:
        log.warning("rest_cherrypy: disable_ssl is set: passwords and tokens cross the "
                    "network IN CLEAR TEXT; use it only on loopback or behind a TLS proxy")
    link = MasterLink(opts)
    tokens = Tokens(opts)
    hub = EventHub(str(opts["sock_dir"]), config.sse_queue, config.max_sse_clients())
    api = Api(opts, config, link, tokens, Dispatcher(opts, link, tokens), hub)
    cherrypy.config.update(server_config(config))
    mount(api, config)
    # CherryPy's loggers carry their own level (info): bring them to the console's
    level = max(logging.getLogger().getEffectiveLevel(), logging.INFO)
    access_logged = False
    for manager in (cherrypy.log, *(app.log for app in cherrypy.tree.apps.values())):
        manager.access_log.setLevel(level)
        manager.error_log.setLevel(level)
        if manager.access_log.isEnabledFor(logging.INFO):
            access_logged = True
        else:
            # CherryPy formats each request's access line before the logger drops it
            manager.access = _no_access_line
    serve_through_front(api, access_logged=access_logged)
    if hasattr(cherrypy.engine, "signal_handler"):
        cherrypy.engine.signal_handler.subscribe()
    hub.start()
    try:
        cherrypy.engine.start()
    except Exception as exc:  # noqa: BLE001 - cannot bind, bad certificate...
        print(f"raetsalt-api: cannot start: {exc}", file=sys.stderr)
        cherrypy.engine.exit()
        return 1
    if cherrypy.engine.state != cherrypy.engine.states.STARTED:
        print("raetsalt-api: cannot start (see the log)", file=sys.stderr)
        cherrypy.engine.exit()
        return 1
    host, port = cherrypy.server.bound_addr
    scheme = "https" if config.tls else "http"
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    log.warning("raetsalt-api listening on %s://%s:%d", scheme, host, port)
    try:
        cherrypy.engine.block()
    finally:
        hub.stop()
        link.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
