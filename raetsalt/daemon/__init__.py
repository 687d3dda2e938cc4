"""The master and minion daemons' adapters: what touches processes, files and sockets on
behalf of the sans-IO services.

``runner`` (process plumbing), ``service`` (open a node, follow its road events),
``jobs`` (the job services on a node: carry out their actions), ``executor`` (one forked
process per job), ``jobcache`` and ``datacache`` (the master's files), ``roster`` (the
road's view of the minions), ``access`` (who is asking), ``keys`` (operator key
commands), ``policy`` (acceptance), ``saltmaster``/``saltminion`` (the Salt bridge)."""
