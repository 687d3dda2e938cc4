"""The process entry of ``raetsalt-master`` and ``raetsalt-minion``.

``main(node, argv)``:

1. parse ``-c CONFDIR`` (default ``raetsalt.syspaths.CONFIG_DIR``), ``-d``, ``-l LEVEL``,
   ``--pid-file``, ``--log-file``;
2. load ``<CONFDIR>/<node>`` (+ ``<node>.d/*.conf``).  A bad file, a missing directory
   or a transport other than ``raet`` prints one line naming the file and the problem
   and exits 78 (``EX_CONFIG``); so does, on a master, an access option that
   ``raetsalt.auth.check_access_config`` refuses (a regex that does not compile, a
   rule of the wrong shape), whose warnings are logged once logging is set up;
3. refuse (exit 78) private directories another user could have prepared
   (``raetsalt.daemon.strictmodes``: root_dir, pki_dir, sock_dir, cachedir, the log
   directory and their parents), checked before and after creating what is missing;
   log to ``log_file`` (level ``log_level_logfile``, else the console level; the file
   is created 0600 and an existing one loses its group-write and world bits, also
   after log rotation) and to stderr (``-l``, else ``log_level``), from ``/`` (the
   daemon changes its working directory there first: nothing is imported from where it
   was started);
4. with ``-d``: double fork, new session, stdio on ``/dev/null``; the parent returns 0;
5. claim ``pidfile``: lock it (``flock``) for as long as the daemon runs and write the
   pid.  Only a running daemon holds the lock (the kernel drops it when the process
   dies, zombie or not), so a pid left in the file by a killed daemon, now reused by
   an unrelated process, never blocks a start; install the SIGTERM/SIGINT handler,
   build ``flows/<node>.flo`` on a ``SelectSkedder`` (tick ``TICK`` s) with the opts
   preloaded at ``.raetsalt.opts``, run it;
6. exit with ``.raetsalt.exit``: 0 after a signal, 1 after a failure, 77 for a minion
   whose key was rejected or denied.

Signals: the first SIGTERM/SIGINT sets ``.raetsalt.signal.stop``; the flow then closes
the node in its exit actions and stops itself (at once: the handler also wakes the
selector).  A second signal stops every framer directly (exit actions still run).
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

from raetsalt import syspaths
from raetsalt.cli._flags import add_version_flags
from raetsalt.config import LOG_LEVELS, load_node_config
from raetsalt.daemon.service import EXIT_FAILURE, EXIT_OK, ensure_dirs
from raetsalt.daemon.strictmodes import check_private_dirs
from raetsalt.drivers.logfile import setup_logging
from raetsalt.errors import ConfigError
from raetsalt.log import clip

log = logging.getLogger("raetsalt.daemon")

EXIT_CONFIG = 78
"""sysexits' EX_CONFIG: the configuration is unusable."""

TICK = 0.1
"""Skedder tick (s): how often time-based flow transitions are evaluated when idle.
Sockets and road timers wake the loop at once, whatever the tick."""


def parse_args(node: str, argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"raetsalt-{node}",
        description=f"Run the raetsalt {node} daemon (in the foreground unless -d).",
    )
    add_version_flags(parser)
    parser.add_argument(
        "-c",
        "--config-dir",
        default=syspaths.CONFIG_DIR,
        help=f"directory holding the '{node}' config file (default: %(default)s)",
    )
    parser.add_argument(
        "-d", "--daemon", action="store_true", help="run in the background (writes the pidfile)"
    )
    parser.add_argument(
        "-l", "--log-level", choices=LOG_LEVELS, help="console log level (default: log_level)"
    )
    parser.add_argument("--log-file", help="log file (default: log_file from the config)")
    parser.add_argument("--pid-file", help="pid file (default: pidfile from the config)")
    return parser.parse_args(list(argv) if argv is not None else None)


def claim_pidfile(path: str) -> int:
    """Lock ``path`` and write our pid into it; returns the descriptor, which must stay
    open while the daemon runs (closing it, or dying, releases the lock).
    ``RuntimeError`` names the holder when another daemon has the lock."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RuntimeError(f"{path}: already running as pid {holder}") from None
        except BaseException:
            os.close(fd)
            raise
        # The previous holder may have removed the file between our open and our lock:
        # then we locked an orphan, and must lock what is at ``path`` now.
        try:
            current = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        mine = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev,
                                                                       mine.st_ino):
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


def release_pidfile(path: str, fd: int) -> None:
    """Remove ``path`` (still locked by us, so nobody else holds it) and unlock."""
    try:
        os.unlink(path)
    except OSError:
        pass
    os.close(fd)


def daemonize() -> bool:
    """Double fork into a new session with stdio on /dev/null.  True in the daemon,
    False in the original process (which should exit 0)."""
    if os.fork() > 0:
        return False
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.chdir("/")
    sys.stdout.flush()
    sys.stderr.flush()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)
    return True


def main(node: str, argv: Sequence[str] | None = None) -> int:
    """Run the ``node`` ('master' or 'minion') daemon; returns the exit code."""
    args = parse_args(node, argv)
    prog = f"raetsalt-{node}"
    warnings: list[str] = []  # logged once logging is set up
    try:
        opts = load_node_config(args.config_dir, node, warnings)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if node == "master":
        from raetsalt.auth import check_access_config

        try:
            warnings += check_access_config(opts)
        except ConfigError as exc:
            print(f"{prog}: {opts['conf_file']}: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    if args.log_file:
        opts["log_file"] = os.path.abspath(args.log_file)
    if args.pid_file:
        opts["pidfile"] = os.path.abspath(args.pid_file)
    # Nothing may come from where the daemon was started (a world-writable /tmp): the
    # config's paths are absolute by now, and children import only this raetsalt.
    os.chdir("/")
    console_level = args.log_level or opts["log_level"]
    problem = check_private_dirs(opts)  # before anything is created there
    if problem is None:
        try:
            ensure_dirs(opts)
        except OSError:
            pass  # reported below
        problem = check_private_dirs(opts)  # and what was created on the way
    if problem is not None:
        print(f"{prog}: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        ensure_dirs(opts)
        setup_logging(opts, console_level, node=node)
    except OSError as exc:
        print(
            f"{prog}: cannot prepare {exc.filename or 'directories'}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    for warning in warnings:
        log.warning("%s", warning)
    if args.daemon and not daemonize():
        return EXIT_OK
    try:
        pid_fd = claim_pidfile(opts["pidfile"])
    except (RuntimeError, OSError) as exc:
        log.error("%s", exc)
        return EXIT_FAILURE
    try:
        return run_flow(node, opts)
    finally:
        release_pidfile(opts["pidfile"], pid_fd)


def run_flow(node: str, opts: dict[str, Any]) -> int:
    """Build and run ``flows/<node>.flo`` until it stops; returns ``.raetsalt.exit``."""
    # ioflo only after ``import raetsalt`` (done above): it needs collections.abc.
    from raetsalt.flo import flow_path
    from raetsalt.flo.skedder import build

    automation = salt_surfaces = None
    if node == "master":
        from raetsalt.daemon import automation as automation_process

        automation = automation_process.start(opts)  # the reactor and event_return
        if automation is not None:
            # Its bus events are held from the bus's first moment until it subscribes.
            opts["__bus_holds"] = [automation_process.BUS_CLAIM]
        from raetsalt.daemon import saltbus

        salt_surfaces = saltbus.start(opts)  # Salt's local clients and engines
    try:
        skedder = build(
            flow_path(node),
            name=f"raetsalt-{node}",
            period=TICK,
            real=True,
            preloads=[("raetsalt.opts", {"value": opts})],
        )
    except Exception as exc:  # noqa: BLE001 - ParseError, RuntimeError, import errors
        log.error("cannot build the %s flow: %s", node, exc)
        for child in (automation, salt_surfaces):
            if child is not None:
                child.stop()
        return EXIT_FAILURE
    stores = [house.store for house in skedder.houses]
    signals: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        signals.append(signum)
        if len(signals) == 1:
            for store in stores:
                store.create("raetsalt.signal").update(stop=True, signum=signum)
            skedder.waiter.wake()
        else:
            skedder.request_stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.info(
        "raetsalt-%s %s starting (pid %d, config %s)",
        node,
        clip(opts["id"], bare=True),
        os.getpid(),
        opts["conf_file"],
    )
    code = EXIT_FAILURE
    try:
        skedder.run()
        code = int(stores[0].fetch(".raetsalt.exit").value or 0) if stores else EXIT_FAILURE
    except Exception:  # noqa: BLE001 - anything escaping the flow ends the daemon
        log.exception("the %s flow failed", node)
        code = EXIT_FAILURE
    finally:
        for child in (automation, salt_surfaces):
            if child is not None:
                child.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # Safety net: a node left open by an aborted flow is closed here.
        for store in stores:
            share = store.fetch(".raetsalt.node")
            if share is not None and share.value is not None:
                share.value.close()
                share.value = None
    if signals:
        log.info("raetsalt-%s stopped on %s (exit %d)", node, signal.Signals(signals[0]).name, code)
    else:
        log.info("raetsalt-%s exiting with %d", node, code)
    return code
