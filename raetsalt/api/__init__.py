"""``raetsalt-api``: Salt's rest_cherrypy HTTP API served on top of a raetsalt master.

One concern per module: ``config`` (the ``rest_cherrypy:`` options), ``auth`` (tokens,
credentials, permissions), ``master`` (the link to the master's lane), ``lowstate`` (the
``client`` dispatch of ``POST /``), ``wheel`` (key and minion functions), ``sse`` (the
event stream), ``formats`` (request bodies and ``Accept`` negotiation), ``app`` (the
CherryPy wiring) and ``main`` (the daemon).
"""
