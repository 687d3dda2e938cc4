"""A real raetsalt master with minions and a real ``raetsalt-api`` process for the REST
API tests (pepper, SaltGUI, hostile HTTP, bench).

The API binds port 0 and writes the port it got to a file (``--port-file``); the tests
read it from there.  Users (file eauth, htpasswd): ``fred`` may do everything, ``ann``
only ``test.ping`` and ``manage.up``.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemons.helpers import Daemon, World, make_world
from remote.cluster import started_cluster

from raetsalt.auth.passwords import md5_crypt

FRED = ("fred", "fred-secret")
ANN = ("ann", "ann-secret")
# The SaltGUI copy in the shared folder beside the checkout (CI lays it there too).
SALTGUI = Path(os.environ.get(
    "RAETSALT_SALTGUI",
    Path(__file__).resolve().parents[3] / "shared" / "vendor" / "saltgui" / "saltgui"))


def master_config(root: Path, api_extra: str = "", auto_accept: bool = True) -> str:
    return f"""auto_accept: {str(auto_accept).lower()}
timeout: 10
eauth_fail_delay: 0.2
eauth_fail_delay_max: 0.4
external_auth:
  file:
    ^filename: {root / 'users.htpasswd'}
    ^filetype: htpasswd
    fred:
      - '.*'
      - '@runner'
      - '@wheel'
    ann:
      - test.ping
      - '@runner': ['manage.up']
rest_cherrypy:
  port: 0
  host: 127.0.0.1
  disable_ssl: true
{api_extra}"""


class ApiProc:
    """``raetsalt-api`` run as a process; ``url`` once it listens."""

    def __init__(self, world: World, confdir: Path, scheme: str = "http") -> None:
        self.port_file = world.root / "api.port"
        # warning: the access log (info) would fill the stderr pipe nobody reads
        self.daemon = Daemon("api", confdir, "-l", "warning", "--port-file",
                             str(self.port_file))
        world.daemons.append(self.daemon)
        self.daemon.expect("raetsalt-api listening on", timeout=30)
        self.port = int(self.port_file.read_text())
        self.url = f"{scheme}://127.0.0.1:{self.port}"


@dataclass
class Site:
    world: World
    master_conf: Path
    master: Daemon
    api: ApiProc
    minions: list[str]

    @property
    def url(self) -> str:
        return self.api.url

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None, raw: bytes | None = None,
                timeout: float = 60.0) -> tuple[int, dict[str, str], bytes]:
        data = raw
        hdrs = {"Accept": "application/json", **(headers or {})}
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.url + path, data=data, headers=hdrs, method=method)
        context = None
        if self.url.startswith("https:"):
            context = ssl.create_default_context(cafile=str(self.world.root / "api.crt"))
            context.check_hostname = False
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def login(self, user: tuple[str, str] = FRED) -> str:
        status, _h, body = self.request("POST", "/login", {"username": user[0],
                                                           "password": user[1],
                                                           "eauth": "file"})
        assert status == 200, body
        return str(json.loads(body)["return"][0]["token"])

    def pepper(self, *args: str, user: tuple[str, str] = FRED, timeout: float = 60.0
               ) -> subprocess.CompletedProcess[str]:
        """The unmodified ``pepper`` CLI (salt-pepper) as a subprocess."""
        tool = Path(sys.executable).with_name("pepper")
        env = dict(os.environ, SALTAPI_URL=self.url, SALTAPI_USER=user[0],
                   SALTAPI_PASS=user[1], SALTAPI_EAUTH="file",
                   HOME=str(self.world.root))
        return subprocess.run([str(tool), *args], capture_output=True, text=True,
                              timeout=timeout, env=env)


def write_users(root: Path) -> None:
    (root / "users.htpasswd").write_text(
        f"fred:{md5_crypt(FRED[1].encode(), b'Q8x1Tz0p', b'$apr1$')}\n"
        f"ann:{md5_crypt(ANN[1].encode(), b'Z2x1Tz0q', b'$apr1$')}\n")


@contextmanager
def started_site(minions: int = 2, api_extra: str = "", tls: bool = False,
                 auto_accept: bool = True) -> Iterator[Site]:
    """A master with ``minions`` minions and the API (over TLS with a self-signed
    certificate made here when ``tls``; ``auto_accept`` as the master's)."""
    with make_world() as world:
        write_users(world.root)
        grains = {f"minion{i}": f"role: web{i}" for i in range(1, minions + 1)}
        config = master_config(world.root, api_extra, auto_accept)
        if tls:
            crt, key = world.root / "api.crt", world.root / "api.key"
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                            "-keyout", str(key), "-out", str(crt), "-days", "1",
                            "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
            config = config.replace("  disable_ssl: true\n",
                                    f"  ssl_crt: {crt}\n  ssl_key: {key}\n")
        with started_cluster(world, config, grains) as up:
            api = ApiProc(world, up.master_conf, "https" if tls else "http")
            yield Site(world, up.master_conf, up.master, api, sorted(grains))

