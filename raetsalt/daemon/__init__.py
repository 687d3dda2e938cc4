"""The master and minion daemons' adapters: what touches processes, files and sockets on
behalf of the sans-IO services.

``service`` (open a node, follow its road events), ``master_adapter`` and
``minion_adapter`` (the job services on a node: the flows' steps, and their actions
carried out), ``executor`` (one forked process per job), ``grainsfile`` (a minion's
saved grains), ``jobcache``, ``cachewriter``, ``cacheproc`` and ``datacache`` (the
master's files), ``roster`` (the road's view of the minions), ``access`` (who is asking),
``keys`` (operator key commands), ``policy`` (acceptance), ``saltmaster``/``saltminion``
(the Salt bridge).  The daemons' process entry is ``raetsalt.cli.daemon``."""
