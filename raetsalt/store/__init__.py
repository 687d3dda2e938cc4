"""The shared store in PostgreSQL (the ``cluster`` extra: psycopg 3).

What works now: the master's job cache in Salt's ``pgjsonb`` tables (``master_job_cache:
pgjsonb``), written in batches by threads off the event loop through an on-disk spool, so
a database outage neither blocks the loop nor loses a return.

- ``pgconfig``: where the database is, from Salt's ``returner.pgjsonb.*`` keys or a libpq
  ``cluster_store`` string (pure);
- ``rows``: a publish record or a return as the row the tables hold (pure);
- ``schema``: the tables (Salt's ``jids``, ``salt_returns``, ``salt_events``) and the
  statements that write and read them (pure text);
- ``spool``: the append-only, synced files every row goes through (a driver);
- ``pgwriter``: the spooler and shipper threads (a driver);
- ``pgjobcache``: the ``JobStore`` the master's job service uses (an adapter).
"""
