"""How ``raetsalt`` and ``raetsalt-run`` reach the master and say who they are.

Transport: root and the master's own user (who can create files in ``sock_dir``) use
the lane; everyone else uses the master's command socket
(``raetsalt.drivers.cmdsock``), where the kernel tells the master their uid.  The master
opens that socket only when ``publisher_acl`` or ``external_auth`` is configured.

eauth (as Salt's ``-a``): ``-a EAUTH`` sends ``--username``/``--password`` (prompted
for when missing and a terminal is there) with the request; with ``-T`` the CLI first
asks the master for a token (``mk_token``), keeps it in ``~/.raetsalt_token`` (mode
0600) and sends the token instead.  Later calls without ``-a`` by a user on the command
socket send that token if the file exists, until it expires (``token_expire``).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time
from typing import Any

from raetsalt import protocol as p
from raetsalt.drivers.cmdsock import StreamClient, command_socket_path
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.errors import DaemonNotRunning, DaemonUnavailable

TOKEN_FILE = "~/.raetsalt_token"
SHARE_MK_TOKEN = "mk_token"
SHARE_TOKEN_RET = "token_ret"


MasterClient = CommandClient | StreamClient
"""How a CLI talks to the master: its lane, or its command socket."""


class AuthProblem(Exception):
    """Logging in failed; the message is for the user."""


def add_auth_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-a", "--auth", "--eauth", "--external-auth", dest="eauth",
                        default=None, metavar="EAUTH",
                        help="log in with this external_auth backend (file, pam)")
    parser.add_argument("--username", default=None, help="eauth user name")
    parser.add_argument("--password", default=None, help="eauth password")
    parser.add_argument("-T", "--make-token", dest="mktoken", action="store_true",
                        help=f"keep an eauth token in {TOKEN_FILE} for later calls")


def open_master(opts: dict[str, Any]) -> MasterClient:
    """The lane when this user may use it, else the command socket."""
    sock_dir = opts["sock_dir"]
    parent = os.path.abspath(sock_dir)
    while not os.path.exists(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)  # the nearest directory there is
    if (os.access(parent, os.X_OK) and not os.path.exists(sock_dir)
            and not os.path.exists(command_socket_path(opts))):
        # Never started here (or its sock_dir is elsewhere): not a question of rights.
        raise DaemonNotRunning(f"the raetsalt-master daemon is not running (no {sock_dir}; "
                               "is sock_dir the master's?)")
    if os.access(sock_dir, os.W_OK | os.X_OK):
        return CommandClient("master", sock_dir)
    path = command_socket_path(opts)
    if os.path.exists(path):
        return StreamClient(path)
    raise DaemonUnavailable(
        f"this user cannot use {sock_dir} and the master has no command socket at {path} "
        "(it opens one only when publisher_acl or external_auth is configured)")


def token_path() -> str:
    return os.path.expanduser(TOKEN_FILE)


def credentials(args: argparse.Namespace, client: MasterClient) -> dict[str, Any]:
    """The fields that say who we are, for every request (empty: the socket says it)."""
    if args.eauth:
        username = args.username or _ask("Username: ", secret=False)
        password = args.password if args.password is not None else _ask("Password: ",
                                                                        secret=True)
        if not args.mktoken:
            return {"eauth": args.eauth, "username": username, "password": password}
        return {"token": _make_token(client, args.eauth, username, password)}
    if isinstance(client, StreamClient):
        try:
            with open(token_path(), encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError:
            return {}
        if token:
            return {"token": token}
    return {}


def _ask(prompt: str, *, secret: bool) -> str:
    if not sys.stdin.isatty():
        raise AuthProblem(f"eauth needs {'--password' if secret else '--username'} "
                          "(no terminal to ask on)")
    return getpass.getpass(prompt) if secret else input(prompt)


def _make_token(client: MasterClient, backend: str, username: str,
                password: str) -> str:
    req = client.request(SHARE_MK_TOKEN, eauth=backend, username=username, password=password)
    deadline = time.monotonic() + 30.0
    while (remaining := deadline - time.monotonic()) > 0:
        for body in client.receive(remaining):
            if body.get("req") != req or p.share_of(body) != SHARE_TOKEN_RET:
                continue
            if "error" in body or not isinstance(body.get("token"), str):
                raise AuthProblem(str(body.get("error") or "no token"))
            _save_token(body["token"])
            return str(body["token"])
    raise DaemonUnavailable("no answer from the master to the login within 30 s")


def _save_token(token: str) -> None:
    path = token_path()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)
