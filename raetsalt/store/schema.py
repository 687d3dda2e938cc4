"""The job cache tables and the statements on them (pure text).

The tables are Salt's ``pgjsonb`` returner's (``jids``, ``salt_returns``,
``salt_events``: same names, columns, types and indexes), so Salt's own queries and
dashboards read them, and a database Salt's pgjsonb already created is used as it is.
One index is added: ``salt_returns`` unique on ``(jid, id)``, so a row written again
(the spool is replayed after a crash or an outage) replaces itself instead of doubling;
as in the file job cache, a minion's later return for the same job wins.  Masters that
start together create the tables once (an advisory lock).
"""

from __future__ import annotations

LOCK = 0x7261657473616C74  # "raetsalt": the advisory lock around creating the tables

CREATE = (
    f"SELECT pg_advisory_xact_lock({LOCK})",
    """CREATE TABLE IF NOT EXISTS jids (
        jid varchar(255) NOT NULL PRIMARY KEY,
        load jsonb NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS idx_jids_jsonb ON jids USING gin (load) "
    "WITH (fastupdate=on)",
    """CREATE TABLE IF NOT EXISTS salt_returns (
        fun varchar(50) NOT NULL,
        jid varchar(255) NOT NULL,
        return jsonb NOT NULL,
        id varchar(255) NOT NULL,
        success varchar(10) NOT NULL,
        full_ret jsonb NOT NULL,
        alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW())""",
    "CREATE INDEX IF NOT EXISTS idx_salt_returns_id ON salt_returns (id)",
    "CREATE INDEX IF NOT EXISTS idx_salt_returns_jid ON salt_returns (jid)",
    "CREATE INDEX IF NOT EXISTS idx_salt_returns_fun ON salt_returns (fun)",
    "CREATE INDEX IF NOT EXISTS idx_salt_returns_return ON salt_returns "
    "USING gin (return) WITH (fastupdate=on)",
    "CREATE INDEX IF NOT EXISTS idx_salt_returns_full_ret ON salt_returns "
    "USING gin (full_ret) WITH (fastupdate=on)",
    "CREATE UNIQUE INDEX IF NOT EXISTS raetsalt_salt_returns_jid_id "
    "ON salt_returns (jid, id)",
    "CREATE SEQUENCE IF NOT EXISTS seq_salt_events_id",
    """CREATE TABLE IF NOT EXISTS salt_events (
        id BIGINT NOT NULL UNIQUE DEFAULT nextval('seq_salt_events_id'),
        tag varchar(255) NOT NULL,
        data jsonb NOT NULL,
        alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW(),
        master_id varchar(255) NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS idx_salt_events_tag ON salt_events (tag)",
    "CREATE INDEX IF NOT EXISTS idx_salt_events_data ON salt_events "
    "USING gin (data) WITH (fastupdate=on)",
)

INSERT_LOAD = ("INSERT INTO jids (jid, load) VALUES (%s, %s::jsonb) "
               "ON CONFLICT (jid) DO UPDATE SET load = EXCLUDED.load")
"""Parameters: jid, load."""

INSERT_RETURN = (
    "INSERT INTO salt_returns (fun, jid, return, id, success, full_ret, alter_time) "
    "SELECT %s, %s, coalesce(r.f -> 'return', 'null'::jsonb), %s, %s, r.f, to_timestamp(%s) "
    "FROM (SELECT %s::jsonb AS f) AS r "
    "ON CONFLICT (jid, id) DO UPDATE SET fun = EXCLUDED.fun, return = EXCLUDED.return, "
    "success = EXCLUDED.success, full_ret = EXCLUDED.full_ret, "
    "alter_time = EXCLUDED.alter_time")
"""Parameters: fun, jid, id, success, time (epoch), full_ret."""

CLEAN = (
    "DELETE FROM jids WHERE jid < %(jid)s",
    "DELETE FROM salt_returns WHERE jid < %(jid)s",
    "DELETE FROM salt_events WHERE alter_time < to_timestamp(%(before)s)",
)

SELECT_LOAD = "SELECT load FROM jids WHERE jid = %s"
SELECT_RETURNS = "SELECT id, full_ret FROM salt_returns WHERE jid = %s"
SELECT_JIDS = "SELECT jid FROM jids"
