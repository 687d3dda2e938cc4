"""A real PostgreSQL server for the tests (a pytest plugin: the ``postgres`` fixture).

Started once per session: ``initdb`` into a fresh directory under /tmp, password
authentication only (scram, a random password), listening on a Unix socket in that
directory and nowhere else (``listen_addresses = ''``), started with ``pg_ctl -w`` and
stopped at the end.  PostgreSQL refuses to run as root: as root, the server runs as
``nobody`` (the directory is given to it); otherwise as the user running the tests.

The binaries: ``initdb``/``pg_ctl`` on PATH, else Debian's
/usr/lib/postgresql/<version>/bin.  ``make test`` installs Debian's ``postgresql``
package when neither is there and it runs as root; without them the tests that need the
server fail (they must run, not skip) and say how to install it.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

INSTALL_HINT = ("PostgreSQL's server binaries (initdb, pg_ctl) are not installed: run "
                "'make test' as root (it installs Debian's postgresql package) or "
                "'apt-get install postgresql'")
PORT = 5432
"""Only names the socket file (.s.PGSQL.5432) in the server's own directory."""
RUN_AS = "nobody"


def server_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                            key=lambda p: int(Path(p).parent.name) if Path(p).parent.name
                            .isdigit() else 0, reverse=True):
        if os.access(os.path.join(candidate, "initdb"), os.X_OK):
            return Path(candidate)
    return None


@dataclass
class Postgres:
    """A running test server: connect with ``conninfo``; ``stop``/``start`` it."""

    bindir: Path
    root: Path
    user: str = "raetsalt"
    password: str = field(default_factory=lambda: secrets.token_hex(16))
    dbname: str = "salt"
    port: int = PORT
    _as: list[str] = field(default_factory=list)
    _made: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def host(self) -> str:
        """The socket's directory (libpq's ``host`` for a Unix socket)."""
        return str(self.root / "sock")

    @property
    def conninfo(self) -> str:
        return (f"host={self.host} port={self.port} user={self.user} "
                f"password={self.password} dbname={self.dbname}")

    def _run(self, *command: str) -> None:
        done = subprocess.run([*self._as, *command], capture_output=True, text=True,
                              timeout=120, cwd="/")
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n"
                               f"{done.stdout}\n{done.stderr}")

    def init(self) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(RUN_AS)
            for path in (self.root, self.root / "sock"):
                path.mkdir(mode=0o700, exist_ok=True)
                os.chown(path, entry.pw_uid, entry.pw_gid)
            self._as = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
                        "--clear-groups", "--"]
        else:
            (self.root / "sock").mkdir(mode=0o700, exist_ok=True)
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            os.chown(pwfile, pwd.getpwnam(RUN_AS).pw_uid, -1)
        pwfile.chmod(0o600)
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", self.user,
                  f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        pwfile.unlink()
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"listen_addresses = ''\nunix_socket_directories = '{self.host}'\n"
                       f"port = {self.port}\nfsync = off\nlog_min_messages = warning\n"
                       "max_connections = 50\nshared_buffers = 16MB\n")

    def start(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-t", "120",
                  "-l", str(self.root / "server.log"), "start")

    def stop(self) -> None:
        """A fast shutdown: sessions are ended, the socket goes away."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-t", "120",
                  "-m", "fast", "stop")

    def running(self) -> bool:
        done = subprocess.run([*self._as, str(self.bindir / "pg_ctl"), "-D", str(self.data),
                               "status"], capture_output=True, timeout=30, cwd="/")
        return done.returncode == 0

    def create_database(self, prefix: str) -> str:
        """A new empty database (``prefix`` and a number); its connection string."""
        import psycopg

        self._made += 1
        name = prefix if prefix == self.dbname else f"{prefix}_{self._made}"

        admin = self.conninfo.replace(f"dbname={self.dbname}", "dbname=postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.conninfo.replace(f"dbname={self.dbname}", f"dbname={name}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server of this test session (module docstring)."""
    bindir = server_bin()
    if bindir is None:
        pytest.fail(INSTALL_HINT)
    root = Path(tempfile.mkdtemp(prefix="rspg", dir="/tmp"))
    server = Postgres(bindir, root)
    try:
        server.init()
        server.start()
        server.create_database(server.dbname)  # the superuser's default db is 'postgres'
        yield server
    finally:
        if server.running():
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
