"""The master's Salt-surfaces process: Salt's own client code and engines on the
master's host, over raetsalt's master (needs the salt extra).

``start(opts)`` (called by ``raetsalt-master``) starts one child when
``salt_local_clients`` is on or ``engines:`` is set; without the salt extra it says so
in one line.  The child reads the master's config file the way Salt's clients do
(``salt.config.master_config``), so it serves exactly where they will look:

* Salt's event bus sockets in Salt's ``sock_dir`` (``raetsalt.saltbridge.ipcbus``), fed
  by a listener on raetsalt's bus, firing into it;
* with ``salt_local_clients``: the root and master-user keys in Salt's ``cachedir`` and
  Salt's local request channel on the loopback address (``raetsalt.saltbridge.localreq``),
  so ``salt.client.LocalClient`` publishes through the master, and Salt's
  ``RunnerClient``/``WheelClient`` calls go to the handler ``main`` is given (the child's
  entry is ``raetsalt.api.saltclients``, which gives it ``raetsalt.api.lowcalls``);
* with ``engines:``: Salt's ``salt.engines.start_engines`` with Salt's master opts and
  Salt's ``ProcessManager`` (its engine processes are restarted when they die, as on a
  Salt master).  The engines are started before the serving threads, so their processes
  are forked from a process with one thread.
"""

from __future__ import annotations

import logging
import os
import pwd
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raetsalt.daemon.automation import Automation, child_setup, spawn_child

if TYPE_CHECKING:
    from raetsalt.saltbridge.localreq import CallHandlers

log = logging.getLogger("raetsalt.saltbus")

_CHILD = ("import sys; sys.path.insert(0, sys.argv[1]); "
          "from raetsalt.api.saltclients import main; sys.exit(main())")
NAME = "the Salt clients/engines process"
READ_WAIT = 0.25
CHECK_ENGINES = 5.0
"""Seconds between looks at the engine processes (Salt's ProcessManager restarts)."""


def plan(opts: Mapping[str, Any]) -> dict[str, bool]:
    """What the child will serve; says once (one line) why a configured part will not."""
    wanted = {"clients": bool(opts.get("salt_local_clients")),
              "engines": bool(opts.get("engines"))}
    if any(wanted.values()):
        from raetsalt.saltbridge.mastersalt import salt_engines_available

        if not salt_engines_available():
            keys = " and ".join(k for k, on in (("salt_local_clients", wanted["clients"]),
                                               ("engines", wanted["engines"])) if on)
            log.warning("%s: ignored: Salt is not installed; install the salt extra (pip "
                        "install 'raetsalt[salt]') to use %s", keys,
                        "them" if " and " in keys else "it")
            return {"clients": False, "engines": False}
    return wanted


def start(opts: Mapping[str, Any]) -> Automation | None:
    wanted = plan(opts)
    if not any(wanted.values()):
        return None
    return spawn_child(_CHILD, opts, wanted, NAME)


def main(calls: CallHandlers | None = None) -> int:
    """The child's work; ``calls`` serves Salt's runner and wheel calls (None: only
    publications are served)."""
    setup = child_setup()
    if setup is None:
        return 1
    opts, wanted, stop = setup
    try:
        return run(opts, wanted, stop, calls)
    except Exception as exc:  # noqa: BLE001 - one line; the master goes on without it
        log.error("%s failed: %s", NAME, " ".join(str(exc).split())[:300]
                  or type(exc).__name__)
        log.debug("%s failed", NAME, exc_info=True)
        return 1


def _master_user(opts: Mapping[str, Any]) -> str:
    user = opts.get("user")
    return str(user) if user else pwd.getpwuid(os.geteuid()).pw_name


def run(opts: dict[str, Any], wanted: Mapping[str, bool], stop: threading.Event,
        calls: CallHandlers | None = None) -> int:
    from raetsalt.drivers.uxd import prepare_sock_dir
    from raetsalt.event import MasterEvent
    from raetsalt.paths import resolve_group
    from raetsalt.saltbridge.ipcbus import EventSockets
    from raetsalt.saltbridge.mastersalt import salt_master_opts, start_salt_engines

    salt_opts = salt_master_opts(str(opts["conf_file"]))
    salt_sock_dir = str(salt_opts["sock_dir"])
    if os.path.realpath(salt_sock_dir) != os.path.realpath(str(opts["sock_dir"])):
        # As raetsalt's own sock_dir: 0700, or 0750 for sock_dir_group.
        prepare_sock_dir(salt_sock_dir, resolve_group(opts.get("sock_dir_group")))
    bus = MasterEvent(str(opts["sock_dir"]), opts={"event_match_type": "startswith"},
                      listen=False)
    while not stop.is_set() and not (os.path.exists(bus.manor_path)
                                     and bus.connect_pub(READ_WAIT)):
        stop.wait(READ_WAIT / 5)
    if stop.is_set():
        bus.destroy()
        return 0
    firer = MasterEvent(str(opts["sock_dir"]), listen=False)
    fire_lock = threading.Lock()

    def fire(tag: str, data: dict[str, Any]) -> bool:
        with fire_lock:
            return firer.fire_event(data, tag)

    sockets = EventSockets(salt_sock_dir, fire)
    proc_mgr = (start_salt_engines(salt_opts, "raetsalt-master engines")
                if wanted.get("engines") else None)
    server = None
    if wanted.get("clients"):
        from raetsalt.saltbridge.localreq import RequestServer, acl_users, write_keys

        unrestricted = ["root", _master_user(opts)]
        keys = write_keys(str(salt_opts["cachedir"]),
                          [*unrestricted, *acl_users(opts.get("publisher_acl"))])
        try:
            server = RequestServer(opts, salt_opts, keys, calls, unrestricted)
        except Exception as exc:  # noqa: BLE001 - zmq's bind errors: one line, bus stays
            log.error("salt_local_clients: Salt's request channel not served on 127.0.0.1:%s:"
                      " %s", salt_opts.get("ret_port"), exc)
    threads = [threading.Thread(target=sockets.serve, args=(stop,), name="saltbus-ipc",
                                daemon=True)]
    if server is not None:
        threads.append(threading.Thread(target=server.serve, args=(stop,),
                                        name="saltbus-req", daemon=True))
    for thread in threads:
        thread.start()
    log.info("Salt's event sockets in %s%s%s (pid %d)", salt_sock_dir,
             f", Salt's request channel on {server.endpoint}" if server else "",
             ", engines started" if proc_mgr is not None else "", os.getpid())
    try:
        feeder = threading.Thread(target=_feed, args=(bus, sockets, server, stop),
                                  name="saltbus-feed", daemon=True)
        feeder.start()
        while not stop.wait(CHECK_ENGINES):
            if proc_mgr is not None:
                proc_mgr.check_children()
    finally:
        stop.set()
        if proc_mgr is not None:
            proc_mgr.stop_restarting()
            proc_mgr.kill_children()
        for thread in threads:
            thread.join(2.0)
        sockets.close()
        if server is not None:
            server.close()
        bus.destroy()
        firer.destroy()
    return 0


def _feed(bus: Any, sockets: Any, server: Any, stop: threading.Event) -> None:
    """raetsalt's bus -> Salt's subscribers (and the returns of the jobs Salt's clients
    published -> Salt's job cache)."""
    while not stop.is_set():
        event = bus.get_event(wait=READ_WAIT, full=True)
        while event is not None:
            tag = str(event["tag"])
            data = event["data"] if isinstance(event["data"], dict) else {"data": event["data"]}
            sockets.publish(tag, data)
            if server is not None:
                server.note_return(tag, data)
            event = bus.get_event_noblock()

