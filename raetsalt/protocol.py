"""The command protocol: how ``raetsalt``, ``raetsalt-run`` and ``raetsalt-call`` talk to
the daemons, and how master and minion exchange jobs over the road.

Every message is a mapping with a ``route`` (``raetsalt.routing``):
``{route: {src: [estate, yard, share], dst: [estate, yard, share]}, ...fields}``.  The
destination *share* says what the message is.  Share names that the manor yard serves
itself (``event_req``, ``event_fire``, ``event_unreq``) are the bus; everything below is
handed to the daemon's job service.

Lane: command-line clients (never over the network)
---------------------------------------------------
A client binds its own yard in the daemon's ``sock_dir`` on the daemon's lane
(``<sock_dir>/<lane>.cl<8 hex>.uxd``; ``raetsalt.drivers.laneclient``) and sends to the
manor yard.  Every request carries ``req`` (a client-chosen string); every reply and
every later message about that request echoes it.  Replies go to the client's yard
(``dst [None, <client yard>, <share>]``).

=================  ==========================================================================
master ``publish`` ``{req, tgt, tgt_type, fun, arg, delimiter, preview}``: publish a job.
                   ``arg`` is Salt's publication list: positional values, then keyword
                   arguments packed as one ``{"__kwarg__": true, k: v}`` mapping.
    -> ``pub_ack``  ``{req, jid, minions, missing, not_connected}`` (sorted id lists:
                   the expected returners, listed ids without an accepted key, expected
                   minions that are not answering now); or ``{req, error}``.  With
                   ``preview`` only ``{req, minions}``, nothing is published.
    -> ``job_ret``  ``{req, jid, returns: [[id, {return, retcode, success[, out]}],
                   ...]}``: the minions' returns as they arrive (also from minions that
                   were not expected), many per message (what came in since the last one
                   while the client was reading, at most ``RETURNS_PER_MESSAGE``), each
                   minion once.  ``alive`` (instead of returns: ``returns`` empty):
                   ids of expected minions that say they still run the job
                   (``raetsalt.services.progress``).  The client decides when it has
                   waited enough.
master ``runner``  ``{req, fun, arg}``: run a runner on the master (``arg`` as above).
    -> ``run_ret``  ``{req, return}`` or ``{req, error}``.
minion ``call``    ``{req, fun, arg}``: ``raetsalt-call`` without ``--local``; the minion
                   daemon runs the job like a published one (in its own process).
    -> ``call_ret`` ``{req, ret: {jid, id, fun, fun_args, return, retcode, success[, out]},
                   missing_fun: bool}`` or ``{req, error, code}`` (``code`` is the exit
                   code the CLI should use, e.g. 2 when the minion is not connected).
minion ``publish``  Peer publishing (``publish.publish``/``full_data``, run in a job process
                   on the minion): the same fields and answers as master ``publish``
                   (``pub_ack``, ``job_ret``; no ``preview``), plus ``ret`` (a returner
                   name, passed on).  The minion daemon relays it to the master (below);
                   a refusal is ``{req, error, denied: true}``.
minion ``runner``  ``{req, fun, arg, timeout}``: ``publish.runner``; answered by
                   ``run_ret`` as master ``runner`` (``denied: true`` on a refusal).
minion ``salt_req`` ``{req, load, timeout}``: a load of Salt's request channel from a
                   job process (``raetsalt.saltbridge.channel``), relayed to the master
                   like ``publish`` (below).
    -> ``salt_ret`` ``{req, ret}`` or ``{req, error[, refused: true]}``.
=================  ==========================================================================

Peer publishing: how a job process reaches the master
-----------------------------------------------------
A ``publish.*`` function runs in the job's forked process, which has no road.  It opens a
client yard on its own minion daemon's lane (like ``raetsalt-call``) and sends
``publish``/``runner`` there.  The daemon (``raetsalt.services.peer.PeerRelay``) gives the
request a relay id ``rid``, forwards it over its road session to the master and maps
the master's answers back to the client yard and its ``req``.  The master takes the
requester's id from the road (the role its key was accepted under), never from the
payload: a forwarded ``id`` field is ignored.  It decides with ``peer`` (publishes) or
``peer_run`` (runners); a refusal is logged (warning, with the rule), fired on the
master bus as ``raetsalt/peer/<id>/denied`` (``{id, kind, check, fun, [tgt, tgt_type,]
reason, rule}``) and answered with ``error`` naming the function, the target and why;
the rules themselves and other minions' permissions never go back to the minion.
A publication a peer made is published with the arguments exactly as checked (``k=v``
strings become the ``__kwarg__`` mapping), and its ``user`` is the minion id.

Road: master <-> minion (authenticated estates)
-----------------------------------------------
=====================  ======================================================================
minion ``minion_hello`` ``{grains, start[, start_time, utc_offset]}``: after every
                       (re)connection and whenever its grains change.  ``start`` is
                       true on the first hello of a minion process to each master,
                       with ``start_time`` (when the daemon started, Unix seconds)
                       and ``utc_offset`` (its zone, seconds east of UTC); the master
                       then fires ``salt/minion/<id>/start`` built from them (the
                       same event on every master), or from its own clock when they
                       are missing or implausible.
minion ``clock_req``    ``{}``: asks for the master's clock, after every (re)connection
                       (see "Job deadlines").
master ``clock``        ``{time}``: the answer to a clock_req: the master's wall clock
                       (Unix seconds) when it answered.
master ``fun``          ``{jid, tgt, tgt_type, fun, arg, delimiter, user, ret, ttl,
                       expires}``: Salt's publication plus its deadline.  Sent only to
                       minions that are connected now and that the target may match
                       (nodegroups already expanded); each minion re-checks it
                       (``match_self``) and ignores it when it does not match.
minion ``running``      ``{jids}``: published jobs still running on the minion, every few
                       seconds while they run (``raetsalt.services.progress``).
minion ``return``       ``{jid, fun, fun_args, return, retcode, success[, out]}``.  ``jid``
                       ``"req"``: a ``raetsalt-call`` result; the master gives it a jid.
minion ``peer_publish`` ``{rid, tgt, tgt_type, fun, arg, ret, timeout}``: a relayed
                       ``publish`` (see "Peer publishing").
minion ``peer_runner``  ``{rid, fun, arg, timeout}``: a relayed ``runner``.
master ``peer_ack``     ``{rid, ...}``: the ``pub_ack`` for relay ``rid``.
master ``peer_ret``     ``{rid, ...}``: a ``job_ret`` for relay ``rid``.
master ``peer_run_ret`` ``{rid, ...}``: the ``run_ret`` for relay ``rid``.
minion ``salt_req``     ``{rid, load, timeout}``: a relayed Salt request
                       (``raetsalt.saltbridge.service``: file server and pillar;
                       ``raetsalt.services.mine``: the mine's ``_mine*`` loads).
master ``salt_ret``     ``{rid, ret}`` or ``{rid, error[, refused]}``.
minion ``pillar_refresh`` ``{}``: compile this minion's pillar again and push it.
master ``pillar``       ``{pillar}``: the minion's pillar, after every hello and refresh.
=====================  ======================================================================

Job deadlines
-------------
A publication carries its deadline: ``ttl``, the seconds the publisher waits for returns
(``-t``, else the master's ``timeout``), and ``expires``, the master's wall-clock time
when that wait ends.  The master never queues a job for a minion that is not connected
(the client reports it ``[Not connected]`` at once); a minion drops a publication whose
deadline has passed, so a job that the road delivers late (the minion was frozen, its
link down for a while) never runs later, as in Salt.

Clocks need not agree.  After every (re)connection the minion sends ``clock_req``; the
answer ``clock`` of a round trip that left at ``t1`` and came back at ``t2`` bounds
``master - minion`` between ``time - t2`` and ``time - t1``.  The minion narrows these
bounds over its exchanges (asking again, at most 3 more times per connection, while they
are wider than 0.2 s), widens old bounds by 1e-4 s per second for drift, and drops a publication
only when even the most favourable reading says it is more than 0.5 s late.  A
publication that arrives before the first answer waits for it (at most ``min(ttl, 5)``
seconds; without an answer it is judged by the minion's own clock), and however it is
judged, a job never starts later than ``ttl`` seconds after it arrived.

Who is asking
-------------
The identity of a request never comes from its payload:

* a **minion** is the *role* of the road remote the message came from (the id its key was
  accepted under; the road authenticated it);
* a **local client on the lane** is the owner (uid) of the socket file at the source path
  the kernel reported for the datagram, and only when that file is directly in
  ``sock_dir``: there only root and the daemon's user can create files (0700, or 0750
  with a group that may not write), so the owner proves who bound it.  A yard bound
  anywhere else is refused for ``publish``/``runner``: its owner could have swapped in a
  hard link to someone else's socket after sending (``raetsalt.drivers.cmdsock``);
* a **local client on the command socket** (other users; the master opens
  ``<sock_dir>_cmd/master.sock`` when ``publisher_acl`` or ``external_auth`` is set) is
  the uid the kernel recorded at ``connect`` (``SO_PEERCRED``).  Frames and answers are
  the same bodies as on the lane (``raetsalt.drivers.cmdsock``);
* an **eauth** user is whoever ``eauth``/``username``/``password`` (or a ``token`` from
  ``mk_token``) authenticated; see ``raetsalt.daemon.access``.

``Requester`` carries it to the services; ``MasterJobs`` applies ``peer``/``peer_run``
(minions), ``publisher_acl`` (local users; root and the master's user are unrestricted,
the blacklist applies to all) or ``external_auth`` (eauth users).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket

# Lane shares (client <-> daemon).
SHARE_PUBLISH = "publish"
SHARE_PUB_ACK = "pub_ack"
SHARE_JOB_RET = "job_ret"
SHARE_RUNNER = "runner"
SHARE_RUN_RET = "run_ret"
SHARE_CALL = "call"
SHARE_CALL_RET = "call_ret"

# Road shares of peer publishing (minion -> master requests, master -> minion answers).
SHARE_PEER_PUBLISH = "peer_publish"
SHARE_PEER_RUNNER = "peer_runner"
SHARE_PEER_ACK = "peer_ack"
SHARE_PEER_RET = "peer_ret"
SHARE_PEER_RUN_RET = "peer_run_ret"

# The Salt bridge (raetsalt.saltbridge): Salt's request channel (the same share names on
# the minion's lane and over the road) and pillar.
SHARE_SALT_REQ = "salt_req"
SHARE_SALT_RET = "salt_ret"
SHARE_PILLAR = "pillar"
SHARE_PILLAR_REFRESH = "pillar_refresh"

PEER_ANSWERS: dict[str, str] = {
    SHARE_PUB_ACK: SHARE_PEER_ACK,
    SHARE_JOB_RET: SHARE_PEER_RET,
    SHARE_RUN_RET: SHARE_PEER_RUN_RET,
    SHARE_SALT_RET: SHARE_SALT_RET,
}
"""Lane answer share -> the road share that carries it to a peer minion."""
LANE_ANSWERS: dict[str, str] = {road: lane for lane, road in PEER_ANSWERS.items()}

# Road shares (master <-> minion).
SHARE_HELLO = "minion_hello"
SHARE_CLOCK_REQ = "clock_req"
SHARE_CLOCK = "clock"
SHARE_FUN = "fun"
SHARE_RETURN = "return"

RETURNS_PER_MESSAGE = 512
"""The most minion returns one ``job_ret`` message carries."""

MAX_JOB_TTL = 86400.0
"""The longest time-to-live a publication may carry (a day; ``-t`` beyond is cut)."""

KWARG_MARK = "__kwarg__"
CALL_JID = "req"
"""The jid of a ``raetsalt-call`` return; the master assigns a real one."""


@dataclass(frozen=True, slots=True)
class ToClient:
    """An action of a job service: send ``body`` over the lane to the client yard ``yard``."""

    yard: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Requester:
    """Who sent a request, as the daemon established it (never from the payload).

    ``kind``: ``'user'`` (a local client: ``name`` its user name, ``uid`` its uid,
    ``groups`` its groups), ``'minion'`` (``name`` the authenticated road role) or
    ``'eauth'`` (``name`` the user ``backend`` authenticated, by password or token;
    ``acl`` the rules kept in the token with ``keep_acl_in_token``)."""

    kind: str
    name: str
    uid: int | None = None
    groups: tuple[str, ...] = ()
    backend: str | None = None
    acl: tuple[Any, ...] | None = None


def pack_args(args: list[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    """Salt's publication ``arg``: positional values, then the keyword arguments as one
    mapping marked ``__kwarg__`` (left out when there are none)."""
    packed = list(args)
    if kwargs:
        packed.append({KWARG_MARK: True, **kwargs})
    return packed


def unpack_args(arg: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """Inverse of ``pack_args``: every ``__kwarg__`` mapping becomes keyword arguments."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for item in arg:
        if isinstance(item, dict) and item.get(KWARG_MARK) is True:
            kwargs.update({k: v for k, v in item.items() if k != KWARG_MARK})
        else:
            args.append(item)
    return args, kwargs


def share_of(body: Mapping[str, Any]) -> str | None:
    """The destination share of a message body, or None when it has no usable route."""
    try:
        share = body["route"]["dst"][2]
    except (KeyError, IndexError, TypeError):
        return None
    return share if isinstance(share, str) else None


def lane_reply(estate: str | None, yard: str, share: str, **fields: Any) -> dict[str, Any]:
    """A message from a daemon's manor to the client yard ``yard``."""
    return {
        "route": {"src": [estate, "manor", None], "dst": [estate, yard, share]},
        **fields,
    }


def road_message(src: str | None, dst: str | None, share: str, **fields: Any) -> dict[str, Any]:
    """A message from estate ``src`` to estate ``dst``'s manor, share ``share``."""
    return {"route": {"src": [src, "manor", None], "dst": [dst, "manor", share]}, **fields}


def text_untrusted(body: Mapping[str, Any], key: str, *, default: str | None = None) -> str:
    """A string field of a peer's message; raises only BadPacket."""
    value = body.get(key, default)
    if not isinstance(value, str):
        raise BadPacket(f"field {key!r} must be a string", DropReason.BODY)
    return value


def list_untrusted(body: Mapping[str, Any], key: str) -> list[Any]:
    """A list field (missing: empty); raises only BadPacket."""
    value = body.get(key, [])
    if not isinstance(value, list):
        raise BadPacket(f"field {key!r} must be a list", DropReason.BODY)
    return value


def job_returns(body: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(minion, return)`` pairs of a ``job_ret`` message; malformed entries (and
    anything past ``RETURNS_PER_MESSAGE``) are left out."""
    returns = body.get("returns")
    if not isinstance(returns, list):
        return []
    pairs = []
    for entry in returns[:RETURNS_PER_MESSAGE]:
        if (isinstance(entry, list | tuple) and len(entry) == 2
                and isinstance(entry[0], str) and isinstance(entry[1], dict)):
            pairs.append((entry[0], entry[1]))
    return pairs


def target_untrusted(body: Mapping[str, Any]) -> tuple[Any, str, str]:
    """``(tgt, tgt_type, delimiter)`` of a publication; raises only BadPacket."""
    tgt = body.get("tgt")
    if not isinstance(tgt, str) and not (
        isinstance(tgt, list) and all(isinstance(t, str) for t in tgt)
    ):
        raise BadPacket("tgt must be a string or a list of strings", DropReason.BODY)
    # An unknown tgt_type is left to raetsalt.targeting, which names the problem.
    tgt_type = text_untrusted(body, "tgt_type", default="glob")
    delimiter = text_untrusted(body, "delimiter", default=":")
    return tgt, tgt_type, delimiter


MAX_RETURNER_TEXT = 256
"""Longest ``ret_config`` a publication may carry."""
MAX_RETURNER_ITEMS = 256
"""Most values (counted through nested containers) in a publication's ``ret_kwargs``."""


def _items(value: Any, budget: int) -> int:
    """What is left of ``budget`` after counting the values of ``value``; < 0 when over."""
    budget -= 1
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return -1
            budget = _items(item, budget - 1)
            if budget < 0:
                break
    elif isinstance(value, list | tuple):
        for item in value:
            budget = _items(item, budget)
            if budget < 0:
                break
    elif isinstance(value, str | bytes) and len(value) > MAX_RETURNER_TEXT * 16:
        return -1
    return budget


def returner_options_untrusted(body: Mapping[str, Any]) -> dict[str, Any]:
    """A publish request's ``ret_config`` and ``ret_kwargs`` (the returners' settings,
    passed on to the minions); raises only BadPacket."""
    out: dict[str, Any] = {}
    config = text_untrusted(body, "ret_config", default="")
    if len(config) > MAX_RETURNER_TEXT:
        raise BadPacket("field 'ret_config' is too long", DropReason.BODY)
    if config:
        out["ret_config"] = config
    kwargs = body.get("ret_kwargs")
    if kwargs is not None and kwargs != {}:
        if not isinstance(kwargs, Mapping) or _items(kwargs, MAX_RETURNER_ITEMS) < 0:
            raise BadPacket("field 'ret_kwargs' must be a small mapping with string keys",
                            DropReason.BODY)
        out["ret_kwargs"] = dict(kwargs)
    return out
