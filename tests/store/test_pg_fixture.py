"""The test PostgreSQL server itself: real, reachable only on its socket, restartable."""

from __future__ import annotations

import psycopg
from pg import Postgres


def test_the_server_answers_on_its_socket_only(postgres: Postgres) -> None:
    with psycopg.connect(postgres.conninfo) as conn:
        row = conn.execute("SELECT current_setting('listen_addresses'), "
                           "current_setting('unix_socket_directories')").fetchone()
    assert row == ("", postgres.host)


def test_a_wrong_password_is_refused(postgres: Postgres) -> None:
    bad = postgres.conninfo.replace(postgres.password, "x" + postgres.password)
    try:
        psycopg.connect(bad).close()
    except psycopg.OperationalError as exc:
        assert "password authentication failed" in str(exc)
    else:
        raise AssertionError("a wrong password was accepted")
