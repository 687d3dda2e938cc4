"""The config schema: every key raetsalt knows, what it accepts, its default and its doc.

One ``Option`` row per key (``SCHEMA``), in the order the example files print them.
``raetsalt.config`` loads and checks files against this table; the example files
``conf/master`` and ``conf/minion`` are generated from it (``python -m raetsalt.config``).
What a key accepts is a ``Spec`` from ``raetsalt.config_specs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raetsalt import config_specs as s
from raetsalt.config_specs import SALTENV_RE, Spec, SpecMismatch, id_problem

__all__ = [
    "BY_NAME",
    "DEFAULT_MASTER_PORT",
    "DEFAULT_MINION_RAET_PORT",
    "DERIVED_KEYS",
    "EVENT_MATCH_TYPES",
    "LOG_LEVELS",
    "NODES",
    "Option",
    "Opts",
    "PATH_KEYS",
    "ROOTS_KEYS",
    "SALTENV_RE",
    "SCHEMA",
    "SUPPORTED_TRANSPORTS",
    "Spec",
    "SpecMismatch",
    "check_node",
    "default_opts",
    "id_problem",
    "options_for",
]

Opts = dict[str, Any]

NODES: tuple[str, ...] = ("master", "minion")
SUPPORTED_TRANSPORTS: tuple[str, ...] = ("raet",)
DEFAULT_MASTER_PORT = 4506
DEFAULT_MINION_RAET_PORT = 4510

# Keys the loader sets itself; a config file may not set them.
DERIVED_KEYS: frozenset[str] = frozenset({"conf_file", "conf_dir", "__role", "__salt",
                                          "__masters"})

# Salt's log levels, least to most severe, plus ``quiet``.
LOG_LEVELS: tuple[str, ...] = (
    "all",
    "garbage",
    "trace",
    "debug",
    "profile",
    "info",
    "warning",
    "error",
    "critical",
    "quiet",
)
EVENT_MATCH_TYPES: tuple[str, ...] = ("startswith", "endswith", "find", "regex", "fnmatch")


# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True, slots=True)
class Option:
    """One row of the schema.

    ``defaults`` maps each node the key is valid for to its default.  ``default_doc``
    replaces the printed default when the real one is computed (``id``).  ``path``
    keys are resolved against ``root_dir``.  ``example`` lines are printed, commented
    out, under the key in the example files.
    """

    name: str
    spec: Spec
    defaults: Mapping[str, Any]
    doc: str
    section: str
    path: bool = False
    default_doc: Mapping[str, str] = field(default_factory=dict)
    example: tuple[str, ...] = field(default_factory=tuple)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self.defaults)


def _both(value: Any) -> dict[str, Any]:
    return {"master": value, "minion": value}


_PORT = s.integer(0, 65535)

SCHEMA: tuple[Option, ...] = (
    # ---------------------------------------------------------------- identity
    Option(
        "id",
        s.minion_id(),
        _both(None),
        "The node id.  For a minion it is the name its key is filed under on the "
        "master and what targets match; for the master it names its estate.  When "
        "unset a minion uses the host's fully qualified domain name (as Salt does) "
        "and the master uses '<hostname>_master' (as Salt's RAET master did).",
        "Identity and transport",
        default_doc={"minion": "the host's FQDN", "master": "'<hostname>_master'"},
    ),
    Option(
        "transport",
        s.choice(SUPPORTED_TRANSPORTS, why="raetsalt only speaks RAET"),
        _both("raet"),
        "Transport between master and minions.  Only 'raet' is supported.",
        "Identity and transport",
    ),
    Option(
        "user",
        s.string(nonempty=True, nullable=True),
        _both(None),
        "User the daemon switches to after start-up.  null keeps the user that started it.",
        "Identity and transport",
    ),
    # ---------------------------------------------------------------- network
    Option(
        "interface",
        s.ip_address(nullable=True),
        {"master": "0.0.0.0", "minion": None},
        "Local address the road (UDP) socket binds to.  On the master (default "
        "0.0.0.0; '::' with ipv6 true) this is where minions reach it.  A Salt minion "
        "listens nowhere, and neither does a raetsalt minion by default (null): it binds "
        "the local address its system uses to reach its master(s) and takes datagrams "
        "only from the master addresses it dials (with one master the socket is "
        "connected to it, so the kernel refuses every other source; with several, the "
        "others are dropped and counted before any crypto).  Give a minion an address "
        "(e.g. 0.0.0.0) to make it listen there for anyone, as a RAET-era minion did.",
        "Network (RAET road)",
        default_doc={"minion": "null (the address towards the master; master traffic "
                     "only)"},
    ),
    Option(
        "ipv6",
        s.boolean(),
        _both(False),
        "Use IPv6: a master binds '::' when interface is left at its default, a "
        "minion its IPv6 address towards the master; the master's host name is "
        "resolved to an IPv6 address.",
        "Network (RAET road)",
    ),
    Option(
        "raet_port",
        _PORT,
        {"master": DEFAULT_MASTER_PORT, "minion": DEFAULT_MINION_RAET_PORT},
        "UDP port of this node's road estate (Salt's RAET-era defaults: 4506 on "
        "the master, 4510 on a minion).  0 lets the system pick one.  A minion keeps "
        "its port across restarts so that a raet 0.6.8 master (an immutable road) "
        "knows it again; against a raetsalt master 0 works too (the master follows "
        "the new port once the minion's allow from it completes).",
        "Network (RAET road)",
    ),
    Option(
        "raet_alt_port",
        _PORT,
        {"minion": 4511},
        "UDP port of the caller estate that raetsalt-call uses when no minion daemon is running.",
        "Network (RAET road)",
    ),
    Option(
        "master",
        s.string_or_list(),
        {"minion": "salt"},
        "Where the master's road is: a host name or address, 'host:port', or "
        "'[ipv6]:port'; or a list of them (several masters: see master_type).  A port "
        "given here overrides master_port.  After loading, opts['master'] holds the "
        "first master's host alone and opts['master_port'] its port, as in Salt.",
        "Network (RAET road)",
    ),
    Option(
        "master_type",
        s.choice(("str", "failover"), why="'func', 'distributed' and 'disable' are not "
                 "served; a cluster's minions set cluster_id"),
        {"minion": "str"},
        "With a list of masters: 'str' connects to every master at once (hot "
        "multi-master: each job's return goes to the master that published it); "
        "'failover' holds one session, with the first master of the list that answers, "
        "and moves to the next when the road's presence says it is lost (no polling "
        "while it answers).",
        "Several masters",
        example=("master: [salt1.example.com, 'salt2.example.com:4506']",
                 "master_type: failover"),
    ),
    Option(
        "master_alive_interval",
        s.number(0.0),
        {"minion": 0.0},
        "Salt polls the master this often to notice its loss.  raetsalt's road notices "
        "it by itself (raet_alive_period); with master_type failover a master that has "
        "not answered for this many seconds (when above 0) is left for the next even "
        "if the road still tries to reach it (default: 30 s).",
        "Several masters",
    ),
    Option(
        "master_failback",
        s.boolean(),
        {"minion": False},
        "With master_type failover (or cluster_id): when not on the first master of the "
        "order, try it every master_failback_interval seconds and move back when it "
        "answers.",
        "Several masters",
    ),
    Option(
        "master_failback_interval",
        s.number(0.0),
        {"minion": 0.0},
        "Seconds between failback attempts; 0 uses master_alive_interval (Salt's rule), "
        "or 60 when that is 0 too.",
        "Several masters",
    ),
    Option(
        "random_master",
        s.boolean(),
        {"minion": False},
        "With master_type failover: shuffle the list of masters once at start (with "
        "master_failback, all but the first).",
        "Several masters",
    ),
    Option(
        "master_port",
        s.integer(1, 65535),
        {"minion": DEFAULT_MASTER_PORT},
        "UDP port of the master's road when master does not name one.",
        "Network (RAET road)",
    ),
    Option(
        "max_datagram_size",
        s.integer(576, 65507),
        _both(1024),
        "Largest UDP datagram sent or accepted, in bytes.  RAET's 1024 keeps every "
        "packet under the IPv6 minimum MTU; both ends must agree.",
        "Network (RAET road)",
    ),
    Option(
        "raet_road_bufcnt",
        s.integer(1, 10000),
        _both(2),
        "Socket send/receive buffers are sized to at least this many maximum-size "
        "datagrams (RAET's bufcnt).",
        "Network (RAET road)",
    ),
    Option(
        "raet_alive_period",
        s.number(0.0),
        _both(3.0),
        "Seconds between alive (keep-alive/presence) probes to each joined "
        "remote; also keeps NAT mappings open.  0 turns probing off.  Only a remote "
        "silent this long is probed; on a native session a probe is one small "
        "box-authenticated packet (no signature).",
        "Presence and reconnection",
    ),
    Option(
        "raet_alive_rate",
        s.number(0.0),
        _both(200.0),
        "Alive probes per second at most on average: with more remotes than "
        "raet_alive_rate x raet_alive_period the period grows with their number "
        "(a master of 10,000 minions probes a minion silent for 50 s; the minions' own "
        "probes keep it informed before that).  0 keeps the period fixed.",
        "Presence and reconnection",
    ),
    Option(
        "raet_handshake_rate",
        s.number(0.0),
        _both(2000.0),
        "Handshakes (join requests and allow hellos) the road takes per second, half "
        "as many at once; the others, and all of them while the road's socket has a "
        "backlog, get a small unsigned 'busy' answer and come back later with a "
        "jittered back-off (sessions that work are never affected).  0: no limit.",
        "Presence and reconnection",
    ),
    Option(
        "raet_recall_window",
        s.integer(0, 100000),
        {"master": 256},
        "A master restarted from its keep calls its known minions back (an allow "
        "each, within raet_handshake_rate), this many at a time, instead of waiting "
        "for each to notice it was gone (up to 20 s with 10,000 minions).  0: it waits.",
        "Presence and reconnection",
    ),
    Option(
        "raet_crypto_threads",
        s.integer(0, 16),
        {"master": 0},
        "Threads that check the signatures and agree the box keys of a batch of "
        "handshake packets beside the master's loop (libsodium runs them in parallel "
        "with it); what arrives in order is still handled in order.  0: the loop does "
        "it all (the default until it is measured on a master with a core to spare: "
        "on a loaded machine the thread rarely runs and the loop pays for the batches).",
        "Presence and reconnection",
    ),
    Option(
        "raet_reap_interim",
        s.number(0.0),
        {"master": 3600.0},
        "Seconds a remote may stay silent before the master reaps it (stops "
        "probing it and reports it as reaped).  0 never reaps.",
        "Presence and reconnection",
    ),
    Option(
        "presence_events",
        s.boolean(),
        {"master": False},
        "Fire salt/presence/present and salt/presence/change events.",
        "Presence and reconnection",
    ),
    Option(
        "random_reauth_delay",
        s.number(0.0),
        {"minion": 10.0},
        "Upper bound, in seconds, of the random delay before a minion re-joins "
        "after losing the master, so that a restarted master is not flooded.",
        "Presence and reconnection",
    ),
    Option(
        "acceptance_wait_time",
        s.number(0.0),
        {"minion": 10.0},
        "Seconds a minion waits before retrying while its key is pending.",
        "Presence and reconnection",
    ),
    Option(
        "acceptance_wait_time_max",
        s.number(0.0),
        {"minion": 0.0},
        "Ceiling for the doubling retry wait while pending; 0 means the wait does not grow.",
        "Presence and reconnection",
    ),
    Option(
        "rejected_retry",
        s.boolean(),
        {"minion": False},
        "When the master rejects this minion's key: false exits (code 77, as Salt "
        "does); true keeps retrying as if pending.  Only a reject signed with the "
        "master's key counts: an unsigned one (first contact, a raet 0.6.8 master) is "
        "logged and the minion keeps trying.",
        "Presence and reconnection",
    ),
    Option(
        "master_finger",
        s.string(nullable=True),
        {"minion": None},
        "Fingerprint of the master's key, as 'raetsalt-key -F' prints it on the master "
        "(hash_type, colon-separated hex pairs): the minion pins it and refuses any "
        "master whose key has another one (one ERROR line; it keeps trying).  Empty: "
        "the key seen at first contact is trusted from then on.",
        "Presence and reconnection",
    ),
    # ---------------------------------------------------------------- paths
    Option(
        "root_dir",
        s.string(nonempty=True),
        _both("/"),
        "Directory the relative paths below are joined to.  A relative root_dir "
        "is taken relative to the directory of this config file (Salt uses the "
        "working directory).",
        "Paths",
    ),
    Option(
        "pki_dir",
        s.string(nonempty=True),
        {"master": "etc/raetsalt/pki/master", "minion": "etc/raetsalt/pki/minion"},
        "Key store: this node's keys and, on the master, the accepted, pending, "
        "rejected and denied minion keys.",
        "Paths",
        path=True,
    ),
    Option(
        "cachedir",
        s.string(nonempty=True),
        {"master": "var/cache/raetsalt/master", "minion": "var/cache/raetsalt/minion"},
        "Cache directory (job cache under <cachedir>/jobs on the master, remote "
        "estate state, minion data).",
        "Paths",
        path=True,
    ),
    Option(
        "sock_dir",
        s.string(nonempty=True),
        {"master": "var/run/raetsalt/master", "minion": "var/run/raetsalt/minion"},
        "Directory of the local yard (Unix datagram) sockets: the event bus and "
        "local clients.  Keep it short: a socket path must fit in 107 bytes.",
        "Paths",
        path=True,
    ),
    Option(
        "sock_dir_group",
        s.string(nonempty=True, nullable=True),
        _both(None),
        "Group whose members may use the event bus and local clients without "
        "being root: sock_dir gets mode 0750 and this group, the bus socket 0660.  "
        "null: only the daemon's user (sock_dir 0700, sockets 0600).",
        "Paths",
    ),
    Option(
        "pidfile",
        s.string(nonempty=True),
        {"master": "var/run/raetsalt-master.pid", "minion": "var/run/raetsalt-minion.pid"},
        "File the daemon writes its process id to.",
        "Paths",
        path=True,
    ),
    Option(
        "module_dirs",
        s.string_list(),
        {"minion": []},
        "Extra directories searched for execution modules; relative entries are "
        "joined to root_dir.",
        "Paths",
    ),
    # ---------------------------------------------------------------- includes
    Option(
        "default_include",
        s.string(nonempty=True),
        {"master": "master.d/*.conf", "minion": "minion.d/*.conf"},
        "Glob of extra config files, relative to this file's directory, read after "
        "this file in sorted order.",
        "Includes",
    ),
    Option(
        "include",
        s.string_or_list(),
        _both([]),
        "Further config files or globs (relative to the including file's "
        "directory) read after default_include.  A plain path that does not exist "
        "is an error; a glob may match nothing.",
        "Includes",
        example=("include:", "  - extra.conf", "  - site.d/*.conf"),
    ),
    # ---------------------------------------------------------------- logging
    Option(
        "log_file",
        s.string(nonempty=True),
        {"master": "var/log/raetsalt/master", "minion": "var/log/raetsalt/minion"},
        "Log file.",
        "Logging",
        path=True,
    ),
    Option(
        "log_level",
        s.choice(LOG_LEVELS),
        _both("warning"),
        "Level of messages written to the console.",
        "Logging",
    ),
    Option(
        "log_level_logfile",
        s.choice(LOG_LEVELS, nullable=True),
        _both(None),
        "Level of messages written to log_file; null means the same as log_level.",
        "Logging",
    ),
    # ---------------------------------------------------------------- events
    Option(
        "event_match_type",
        s.choice(EVENT_MATCH_TYPES),
        _both("startswith"),
        "Default way get_event matches a tag when the caller gives no match_type.",
        "Event bus",
    ),
    Option(
        "max_event_size",
        s.integer(1024),
        _both(1048576),
        "Largest event payload, in bytes; larger data is trimmed.",
        "Event bus",
    ),
    # ---------------------------------------------------------------- keys
    Option(
        "auto_accept",
        s.boolean(),
        {"master": False},
        "Accept every new minion key at once.  Only for closed test networks.",
        "Minion keys",
    ),
    Option(
        "open_mode",
        s.boolean(),
        {"master": False},
        "Accept every minion, even one whose key changed (overwrites the stored "
        "key).  Only for closed test networks.",
        "Minion keys",
    ),
    Option(
        "autosign_file",
        s.string(nonempty=True, nullable=True),
        {"master": None},
        "File of minion ids (globs or anchored regexes, one per line) whose new "
        "keys are accepted automatically.  Ignored when group- or world-writable "
        "unless permissive_pki_access is true.",
        "Minion keys",
        path=True,
    ),
    Option(
        "autoreject_file",
        s.string(nonempty=True, nullable=True),
        {"master": None},
        "Like autosign_file, but matching ids are rejected; checked first.",
        "Minion keys",
        path=True,
    ),
    Option(
        "permissive_pki_access",
        s.boolean(),
        {"master": False},
        "Allow group-writable autosign/autoreject files.",
        "Minion keys",
    ),
    Option(
        "auth_events",
        s.boolean(),
        {"master": True},
        "Fire a salt/auth event for every key decision.",
        "Minion keys",
    ),
    Option(
        "max_pending_keys",
        s.integer(1),
        {"master": 1000},
        "Most minion keys waiting for an operator (raetsalt-key -L 'Unaccepted').  "
        "Joins of further new ids are dropped and counted, and the master says so "
        "once in its log and in raetsalt-key -L, until keys are accepted, rejected "
        "or deleted.  Joins are unauthenticated: this bounds what a flood of forged "
        "ids can add to the keep.",
        "Minion keys",
    ),
    # ---------------------------------------------------------------- jobs
    Option(
        "timeout",
        s.integer(1),
        {"master": 5},
        "Seconds the raetsalt CLI waits for returns when -t is not given.",
        "Jobs",
    ),
    Option(
        "master_job_cache",
        s.choice(("local_cache", "pgjsonb")),
        {"master": "local_cache"},
        "Job cache backend: Salt's 'local_cache' (files under <cachedir>/jobs) or "
        "'pgjsonb' (PostgreSQL, in Salt's pgjsonb tables jids and salt_returns; needs "
        "the 'cluster' extra).  pgjsonb finds the database in cluster_store, else in "
        "Salt's returner.pgjsonb.host/port/user/pass/db keys; rows go through a spool "
        "under <cachedir>/pgjsonb-spool, so an outage loses none.",
        "Jobs",
        example=("master_job_cache: pgjsonb", "returner.pgjsonb.host: db.example.com",
                 "returner.pgjsonb.user: salt", "returner.pgjsonb.pass: salt",
                 "returner.pgjsonb.db: salt", "returner.pgjsonb.port: 5432"),
    ),
    Option(
        "cluster_store",
        s.string(nonempty=True, nullable=True),
        {"master": None},
        "A libpq connection string (or postgresql:// URI) for the PostgreSQL "
        "database master_job_cache: pgjsonb uses; when set, the returner.pgjsonb.* "
        "keys are not read.",
        "Jobs",
        example=("cluster_store: 'host=/run/postgresql dbname=salt user=salt'",),
    ),
    Option(
        "cluster_id",
        s.string(nonempty=True, nullable=True),
        {"master": None, "minion": None},
        "The name of this master's cluster (Salt 3007's key).  With cluster_store set, "
        "the masters of one cluster share their operators' key decisions through that "
        "database: a minion accepted on one master joins every other without a "
        "re-accept, a key deleted or rejected on one ends the minion's session on "
        "all, and a key waiting on one is listed and decided on all; and their eauth "
        "tokens: a token made on one master works on all, a logout on one ends it on "
        "all.  On a minion listing several masters: they are one cluster, and the "
        "minion holds one session, with the master a rendezvous hash of its id picks "
        "among them, moving to its next choice on loss.",
        "Jobs",
        example=("cluster_id: fleet1",),
    ),
    Option(
        "cluster_pki_dir",
        s.string(nonempty=True, nullable=True),
        {"master": None},
        "Where the cluster's long-term master keys are (cluster.json, 0600; Salt "
        "3007's key).  The first master creates them; copy the file once to the "
        "other masters.  Every master of the cluster presents these keys to its "
        "minions and to the other masters, and the masters' own road accepts no other.",
        "Jobs",
        path=True,
        example=("cluster_pki_dir: /etc/raetsalt/pki/cluster",),
    ),
    Option(
        "cluster_peers",
        s.string_list(),
        {"master": []},
        "The other masters of the cluster, host or host:port of their cluster road "
        "(Salt 3007's key; the port defaults to cluster_port).  Jobs published on "
        "any master reach the minions another master holds over this road; a "
        "datagram from an address that is not listed is dropped and counted.",
        "Jobs",
        example=("cluster_peers: [10.0.0.2:4520, 10.0.0.3:4520]",),
    ),
    Option(
        "cluster_port",
        s.integer(0, 65535),
        {"master": 4520},
        "The UDP port of this master's cluster road (the masters' own road; needs "
        "cluster_id, cluster_store and cluster_pki_dir).",
        "Jobs",
    ),
    Option(
        "keep_jobs",
        s.integer(0),
        {"master": 24},
        "Hours a job and its returns stay in the job cache; 0 keeps them forever.",
        "Jobs",
    ),
    Option(
        "minion_message_rate",
        s.number(0.001),
        {"master": 200.0},
        "Messages a second each minion may send the master's services (returns, "
        "hellos, peer publish, Salt file and pillar requests, clock requests), on "
        "average; beyond it they are dropped and counted, and the master says so once "
        "a minute per minion.",
        "Jobs",
    ),
    Option(
        "minion_message_burst",
        s.number(1.0),
        {"master": 2000.0},
        "Messages a minion may send at once above minion_message_rate.",
        "Jobs",
    ),
    Option(
        "minion_return_rate",
        s.number(1.0),
        {"master": 8388608.0},
        "Bytes of returns (their stored JSON text) a second each minion may put in "
        "the job cache, on average (8 MiB); beyond it returns are dropped and counted.",
        "Jobs",
    ),
    Option(
        "minion_return_burst",
        s.number(1.0),
        {"master": 67108864.0},
        "Bytes of returns a minion may send at once above minion_return_rate (64 MiB); "
        "keep it above the largest return a minion sends.",
        "Jobs",
    ),
    Option(
        "minion_backlog_max",
        s.integer(1),
        {"master": 67108864},
        "Bytes of one minion's returns accepted but not yet on disk (64 MiB); while "
        "the job cache writer is that far behind, its further returns are dropped.",
        "Jobs",
    ),
    Option(
        "job_cache_backlog_max",
        s.integer(1),
        {"master": 268435456},
        "Bytes of all returns accepted but not yet on disk (256 MiB); beyond it "
        "returns are dropped (counted, logged) until the writer catches up, so the "
        "master's memory stays bounded whatever minions send.",
        "Jobs",
    ),
    Option(
        "nodegroups",
        s.nodegroups(),
        {"master": {}},
        "Named compound targets for -N.",
        "Jobs",
        example=("nodegroups:", "  web: 'web* or G@role:web'", "  db: [db1, db2]"),
    ),
    Option(
        "grains",
        s.mapping(),
        {"minion": {}},
        "Static grains of this minion, merged over the detected ones.",
        "Jobs",
        example=("grains:", "  roles: [web]", "  datacenter: east"),
    ),
    Option(
        "mine_functions",
        s.mapping(),
        {"minion": {}},
        "Functions whose results this minion stores in the master's mine (Salt's "
        "mine_functions; the pillar's mine_functions are merged over them): name -> "
        "list of arguments, or alias -> [mine_function: name, arguments...].",
        "Mine",
        example=("mine_functions:", "  network.ip_addrs: [eth0]",
                 "  web_ips: [mine_function: network.ip_addrs, allow_tgt: 'lb*']"),
    ),
    Option(
        "mine_interval",
        s.integer(0),
        {"minion": 60},
        "Minutes between two runs of mine.update (the first runs when the minion "
        "gets its pillar after it started).  0 turns the periodic runs off.",
        "Mine",
    ),
    Option(
        "mine_enabled",
        s.boolean(),
        {"minion": True},
        "Whether the minion runs mine.update by itself (at start and every "
        "mine_interval minutes).",
        "Mine",
    ),
    # ---------------------------------------------------------------- access control
    Option(
        "peer",
        s.rule_mapping(),
        {"master": {}},
        "Which minions may publish which functions to other minions (publish.*): "
        "minion-id regex -> list of function regexes or {target: [functions]} "
        "(Salt's peer; regexes match at the start only, add $ for exact).  Empty: "
        "no peer publishing.  Checked when the master starts.",
        "Access control",
        example=("peer:", "  '.*\\.example\\.com':", "    - test.*"),
    ),
    Option(
        "peer_run",
        s.rule_mapping(),
        {"master": {}},
        "Which minions may run which runners on the master (publish.runner): "
        "minion-id regex -> list of runner regexes.",
        "Access control",
        example=("peer_run:", "  'web.*':", "    - manage.up"),
    ),
    Option(
        "mine_get",
        s.optional_rule_mapping(),
        {"master": None},
        "Which minions may read which mine functions (mine.get): minion-id regex -> "
        "list of function regexes (Salt's mine_get; regexes match at the start).  "
        "Unset: every minion may read every function.  A refused read fails with "
        "the reason, is logged and fired as raetsalt/mine_get/<id>/denied.",
        "Access control",
        example=("mine_get:", "  'web.*':", "    - network.ip_addrs"),
    ),
    Option(
        "publisher_acl",
        s.rule_mapping(),
        {"master": {}},
        "What local non-root users may run through the raetsalt CLI: user (or "
        "regex) -> list of functions or {target: [functions]}; '@runner' or "
        "'@<module>' entries for raetsalt-run.  When set, the master opens a "
        "command socket <sock_dir>_cmd/master.sock for those users.",
        "Access control",
        example=("publisher_acl:", "  fred:", "    - test.*", "    - 'web*':", "      - pkg.*"),
    ),
    Option(
        "publisher_acl_blacklist",
        s.blacklist(),
        {"master": {}},
        "Users and modules (regexes) that publisher_acl and external_auth never allow.",
        "Access control",
        example=("publisher_acl_blacklist:", "  users: [root]", "  modules: [cmd.*]"),
    ),
    Option(
        "external_auth",
        s.external_auth(),
        {"master": {}},
        "External authentication (raetsalt -a file|pam): backend -> user -> rules, "
        "as in Salt; the file backend takes ^filename, ^filetype (text, htpasswd, "
        "htdigest), ^hashtype...",
        "Access control",
        example=("external_auth:", "  pam:", "    fred:", "      - test.*"),
    ),
    Option(
        "token_expire",
        s.integer(1),
        {"master": 43200},
        "Seconds an eauth token stays valid.",
        "Access control",
    ),
    Option(
        "rest_cherrypy",
        s.mapping(),
        {"master": {}},
        "raetsalt-api (Salt's rest_cherrypy HTTP API): port, host, ssl_crt, ssl_key, "
        "disable_ssl, webhook_url, webhook_disable_auth, thread_pool, "
        "max_request_body_size, app, app_path, static, static_path...; checked by "
        "raetsalt-api when it starts (README, REST API).",
        "Access control",
        example=("rest_cherrypy:", "  port: 8000", "  ssl_crt: /etc/pki/api.crt",
                 "  ssl_key: /etc/pki/api.key"),
    ),
    Option(
        "keep_acl_in_token",
        s.boolean(),
        {"master": False},
        "Store the user's allowed functions in the token at login instead of "
        "looking them up on every call.",
        "Access control",
    ),
    # ---------------------------- road reassembly limits (docs/security.md, Unfinished messages)
    Option(
        "raet_reassembly_per_remote",
        s.integer(1024 * 1024),
        _both(32 * 1024 * 1024),
        "Bytes one remote estate may make this node hold in messages it has not "
        "delivered yet (partial ones, or complete ones waiting for an earlier one).  "
        "Each message reserves its announced size plus an eighth; below the 16 MiB "
        "message limit, larger messages from one remote cannot be received.  Beyond "
        "it frames are refused (the sender retries) and counted as reassembly_limit.",
        "Limits (road reassembly)",
    ),
    Option(
        "raet_reassembly_total",
        s.integer(1024 * 1024),
        _both(256 * 1024 * 1024),
        "The same cap for all remote estates together.",
        "Limits (road reassembly)",
    ),
    Option(
        "raet_reassembly_timeout",
        s.number(1.0),
        _both(30.0),
        "Seconds a partial message may go without a new piece before it is "
        "discarded (counted as reassembly_timeout); its sender's message then fails.",
        "Limits (road reassembly)",
    ),
    # ---------------------------------- native session keys (docs/native-profile.md, Key rotation)
    Option(
        "raet_rekey_interval",
        s.number(10.0),
        _both(120.0),
        "Seconds after which a native session's short-term key is replaced by a fresh "
        "one, agreed inside the session without pausing it (forward secrecy: a key "
        "stolen from a running process opens at most its own period's traffic).",
        "Road sessions",
    ),
    Option(
        "raet_rekey_messages",
        s.integer(1000),
        _both(1 << 24),
        "Datagrams sealed under one native session key after which it is replaced, "
        "whatever raet_rekey_interval says (WireGuard's message count).",
        "Road sessions",
    ),
    Option(
        "raet_rekey_reject_after",
        s.number(15.0),
        _both(180.0),
        "Seconds after which a native session key that no rotation replaced (a path "
        "that drops the key frames) is refused: the session is ended and handshaken "
        "again, with a warning (WireGuard's REJECT_AFTER_TIME).  At least 1.5 times "
        "raet_rekey_interval.",
        "Road sessions",
    ),
    Option(
        "raet_rekey_reject_messages",
        s.integer(1500),
        _both(1 << 25),
        "Datagrams sealed under one native session key after which it is refused the "
        "same way if no rotation replaced it.  At least 1.5 times raet_rekey_messages.",
        "Road sessions",
    ),
    Option(
        "raet_rekey_min_gap",
        s.number(0.0),
        _both(5.0),
        "Seconds a native session key is used at least before the other end may start "
        "the next rotation (at most half of raet_rekey_interval): an earlier key offer "
        "is dropped and counted (rekey_rate), so a peer cannot make this daemon rotate "
        "keys as fast as it likes.",
        "Road sessions",
    ),
)

# --------------------------------------------------------------------------- Salt bridge
# Keys of the Salt bridge (Salt's loader, file server and pillar over RAET;
# raetsalt.saltbridge).

ROOTS_KEYS: tuple[str, ...] = ("file_roots", "pillar_roots")
"""Mappings of saltenv -> directories; relative directories are joined to root_dir."""


_SALT_SECTION = "Salt modules, states, files and pillar"
SALTBRIDGE_OPTIONS: tuple[Option, ...] = (
    Option(
        "execution_mode",
        s.choice(("auto", "native", "salt")),
        {"minion": "auto"},
        "Which functions the minion runs: 'auto' runs raetsalt's built-in functions "
        "natively and everything else through Salt's loader when the salt package is "
        "importable (Salt's grains too); 'native' never uses Salt (module_dirs hold "
        "raetsalt-style modules); 'salt' runs every function Salt has through Salt's "
        "loader (only publish.*, event.* and the job-control saltutil functions stay "
        "raetsalt's) and refuses to start without salt.",
        _SALT_SECTION,
    ),
    Option(
        "file_client",
        s.choice(("remote", "local")),
        {"minion": "remote"},
        "Where Salt's file client and pillar come from: 'remote' asks the master over "
        "the road (salt:// from its file_roots, pillar compiled there); 'local' uses "
        "this minion's own file_roots and pillar_roots (masterless states).",
        _SALT_SECTION,
    ),
    Option(
        "file_roots",
        s.roots(),
        _both({"base": ["srv/salt"]}),
        "Salt's file_roots: saltenv -> directories served as salt:// (on the master; on "
        "a minion only with file_client: local).  Only files inside these directories "
        "are served: '..' and symlinks that lead out are refused.",
        _SALT_SECTION,
        example=("file_roots:", "  base: [/srv/salt]", "  dev: [/srv/salt-dev]"),
    ),
    Option(
        "pillar_roots",
        s.roots(),
        _both({"base": ["srv/pillar"]}),
        "Salt's pillar_roots: saltenv -> directories with top.sls and pillar sls "
        "files, compiled on the master for each minion (with Salt's renderers when "
        "salt is importable there, else YAML only).",
        _SALT_SECTION,
        example=("pillar_roots:", "  base: [/srv/pillar]"),
    ),
    Option(
        "state_top",
        s.string(nonempty=True),
        {"master": "top.sls"},
        "The top file of the states, relative to each saltenv's file_roots.",
        _SALT_SECTION,
    ),
    Option(
        "renderer",
        s.string(nonempty=True),
        {"master": "jinja|yaml"},
        "Salt's default render pipe for sls files (sent to minions with the states).",
        _SALT_SECTION,
    ),
    Option(
        "hash_type",
        s.choice(("md5", "sha1", "sha224", "sha256", "sha384", "sha512")),
        {"master": "sha256", "minion": "sha256"},
        "Hash of the files the master serves (minions compare it with their cache), and "
        "of key fingerprints (raetsalt-key -f/-F, a minion's master_finger).",
        _SALT_SECTION,
    ),
    Option(
        "file_buffer_size",
        s.integer(4096, 1048576),
        {"master": 65536},
        "Largest piece of a file sent in one road message (Salt's key; Salt's master "
        "default is 1 MiB).  A minion fetches a file piece by piece, so other messages "
        "to it are never queued behind more than one piece.",
        _SALT_SECTION,
    ),
)
SCHEMA = SCHEMA + SALTBRIDGE_OPTIONS

# ---------------------------------------------------------------- security limits
# Limits against local users starving the command socket and guessing eauth passwords
# (docs/security.md, Local users; read by raetsalt.drivers.cmdsock.Limits and
# raetsalt.auth.limits.LoginPolicy).  Kept as one block apart from the table above.
SCHEMA += (
    Option(
        "command_socket_max_connections",
        s.integer(1, 100000),
        {"master": 64},
        "Connections the command socket (local users other than root) holds at once, "
        "all users together.  When it is full, a user with fewer connections takes the "
        "oldest one of the user holding the most.",
        "Security limits",
    ),
    Option(
        "command_socket_max_per_uid",
        s.integer(1, 100000),
        {"master": 8},
        "Connections one local user (uid) may hold on the command socket; more are "
        "closed at once.",
        "Security limits",
    ),
    Option(
        "command_socket_frame_timeout",
        s.number(0.1),
        {"master": 5.0},
        "Seconds a command-socket client has to send its first request after "
        "connecting, and to finish any request it has begun; slower connections are "
        "closed.",
        "Security limits",
    ),
    Option(
        "command_socket_idle_timeout",
        s.number(1.0),
        {"master": 60.0},
        "Seconds a command-socket connection may stay open with nothing in flight (no "
        "returns or answers still due to it).",
        "Security limits",
    ),
    Option(
        "eauth_fail_delay",
        s.number(0.0),
        {"master": 1.0},
        "Seconds the answer to a failed external_auth login is held back; it doubles "
        "with every further failure in a row of the same user name or calling uid.  "
        "Other users and the master are not slowed.  0 turns the delay off.",
        "Security limits",
    ),
    Option(
        "eauth_fail_delay_max",
        s.number(0.0),
        {"master": 16.0},
        "Longest hold-back of a failed login's answer, in seconds (keep it well under "
        "the 30 s the raetsalt CLI waits for a login's answer).",
        "Security limits",
    ),
    Option(
        "eauth_lockout_after",
        s.integer(0),
        {"master": 5},
        "Failed logins in a row after which a user name, or a calling uid, is locked "
        "out for eauth_lockout_time (every login refused unchecked).  0: never.",
        "Security limits",
    ),
    Option(
        "eauth_lockout_time",
        s.number(1.0),
        {"master": 600.0},
        "Seconds a lockout lasts; failures are forgotten this long after the last one.",
        "Security limits",
    ),
)

# ---------------------------------------------------------------- reactor and returners
# The master's automation process (raetsalt.daemon.automation): the reactor and
# event_return.  Module settings (sqlite3.database, redis.host...) pass through as they
# are, for the returners.
_AUTOMATION = "Reactor and returners"
SCHEMA += (
    Option(
        "reactor",
        s.reactor_map(),
        {"master": []},
        "Salt's reactor: a list of one-key mappings, a tag glob to an SLS file or a "
        "list of files, rendered with Salt's renderers (tag and data in the template) "
        "for every event whose tag matches; their local.*, runner.*, wheel.* and "
        "caller.* reactions run in the master's automation process.  Needs the salt "
        "extra.",
        _AUTOMATION,
        example=("reactor:", "  - 'salt/minion/*/start':", "    - /srv/reactor/start.sls"),
    ),
    Option(
        "reactor_worker_threads",
        s.integer(1, 64),
        {"master": 4},
        "Threads rendering and carrying out reactions (Salt's default is 10).",
        _AUTOMATION,
    ),
    Option(
        "reactor_niceness",
        s.integer(0, 19),
        {"master": 5},
        "Niceness of the process running the reactor and event_return: under load the "
        "master's own loop, which serves the bus, comes first.  0 keeps the master's.",
        _AUTOMATION,
    ),
    Option(
        "automation_backlog_max_bytes",
        s.integer(1 << 20),
        {"master": 256 << 20},
        "Bytes of events the master's bus keeps for its automation process (reactor, "
        "event_return) while that process is behind (a burst) or restarting; an event "
        "counts at least 64 bytes.  Beyond, the oldest are dropped, counted and logged.  "
        "Other bus listeners keep 16 MiB.",
        _AUTOMATION,
    ),
    Option(
        "reactor_cluster_window",
        s.number(1.0),
        {"master": 60.0},
        "With cluster_id and cluster_store: each reaction to an event is claimed in the "
        "store, so an event several masters of the cluster see (same tag and data, "
        "_stamp aside) reacts on one of them; the same event again within this many "
        "seconds does not react again.  When the store cannot be reached each master "
        "reacts by itself (logged).",
        _AUTOMATION,
    ),
    Option(
        "reactor_worker_hwm",
        s.integer(1),
        {"master": 10000},
        "Events waiting for a reactor thread; beyond, new ones are dropped, counted and "
        "logged (the bus is never held up).",
        _AUTOMATION,
    ),
    Option(
        "return",
        s.string_or_list(),
        {"minion": []},
        "Returners every job published to this minion also goes to (besides those the "
        "publication names with --return): master_bus, sqlite3, or Salt's returners.",
        _AUTOMATION,
    ),
    Option(
        "schedule",
        s.mapping(),
        {"minion": {}},
        "Salt's scheduler: job name -> Salt's job options (function, args, seconds, "
        "minutes, cron, when, returner...), merged with the pillar's 'schedule'.  Run by "
        "Salt's Schedule in a process beside the Salt zygote (needs the salt extra); the "
        "returns go to the master's job cache under real jids.",
        _AUTOMATION,
        example=("schedule:", "  ping:", "    function: test.ping", "    seconds: 60"),
    ),
    Option(
        "beacons",
        s.mapping(),
        {"minion": {}},
        "Salt's beacons: beacon module -> its config (a list of mappings), merged with "
        "the pillar's 'beacons'.  Run by Salt's beacon machinery beside the Salt zygote "
        "(needs the salt extra); events reach the master's bus as "
        "salt/beacon/<id>/<beacon>/..., a beat's events batched on the road.",
        _AUTOMATION,
        example=("beacons:", "  diskusage:", "    - /: 90%", "    - interval: 60"),
    ),
    Option(
        "event_return",
        s.string_or_list(),
        {"master": []},
        "Returners given every event of the master's bus in batches: the built-in "
        "'sqlite3' (sqlite3.database) and 'pgjsonb' (Salt's salt_events table, with "
        "psycopg 3 from the cluster extra; the database of cluster_store or "
        "returner.pgjsonb.*), or Salt's returners that have event_return.  "
        "Events go through an on-disk spool under <cachedir>/event_return: a returner "
        "that fails gets the same batch again later, nothing is dropped.",
        _AUTOMATION,
    ),
    Option(
        "event_return_queue",
        s.integer(0),
        {"master": 0},
        "Most events per batch given to the event_return returners (0: 500).",
        _AUTOMATION,
    ),
    Option(
        "event_return_whitelist",
        s.string_list(),
        {"master": []},
        "Tag globs: when set, only matching events go to event_return.",
        _AUTOMATION,
    ),
    Option(
        "event_return_blacklist",
        s.string_list(),
        {"master": []},
        "Tag globs of events event_return leaves out.",
        _AUTOMATION,
    ),
    Option(
        "event_return_spool_max",
        s.integer(1 << 20),
        {"master": 1 << 30},
        "Bytes the event_return spool may hold while its returners are behind; beyond, "
        "new events are dropped, counted and logged.",
        _AUTOMATION,
    ),
)

_SALT_LOCAL = "Salt's local clients and engines"
SCHEMA += (
    Option(
        "salt_local_clients",
        s.boolean(),
        {"master": False},
        "Serve Salt's own client code on the master's host (the salt extra): Salt's "
        "event bus sockets in Salt's sock_dir (get_master_event, fire_event) fed from "
        "and into raetsalt's bus, and Salt's local request channel on the loopback "
        "address (ret_port) for salt.client.LocalClient (root key, eauth, tokens).",
        _SALT_LOCAL,
    ),
    Option(
        "ret_port",
        s.integer(1, 65535),
        {"master": 4506},
        "TCP port (on 127.0.0.1 only) where Salt's LocalClient reaches the master when "
        "salt_local_clients is on: Salt's LocalClient connects to <interface>:ret_port, "
        "so interface must be a wildcard or loopback address.",
        _SALT_LOCAL,
    ),
    Option(
        "engines",
        s.engines_list(),
        {"master": [], "minion": []},
        "Salt's engines (the salt extra): a list of engine names or one-key mappings "
        "name -> options, started by Salt's start_engines.  On the master, in a child "
        "of the master: their events reach raetsalt's bus through Salt's event sockets "
        "(served for them even without salt_local_clients).  On a minion, beside "
        "Salt's scheduler (Salt's loader: execution_mode auto or salt): their "
        "event.send goes to the master's bus.",
        _SALT_LOCAL,
        example=("engines:", "  - webhook:", "      address: 127.0.0.1", "      port: 8000"),
    ),
)

BY_NAME: dict[str, Option] = {opt.name: opt for opt in SCHEMA}
PATH_KEYS: tuple[str, ...] = tuple(opt.name for opt in SCHEMA if opt.path)


def options_for(node: str) -> tuple[Option, ...]:
    """The schema rows valid on ``node`` ('master' or 'minion'), in table order."""
    check_node(node)
    return tuple(opt for opt in SCHEMA if node in opt.defaults)


def default_opts(node: str) -> Opts:
    """The defaults of ``node`` as an opts dict, before paths and ``id`` are filled in."""
    check_node(node)
    # Copy containers so that callers mutating opts cannot change the table.
    return {opt.name: _copy(opt.defaults[node]) for opt in SCHEMA if node in opt.defaults}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def check_node(node: str) -> None:
    if node not in NODES:
        raise ValueError(f"node must be 'master' or 'minion', got {node!r}")
