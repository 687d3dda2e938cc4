"""Salt's request channel over RAET, for Salt code running in a job process.

Salt's fileclient (``salt://``), remote pillar and the other minion -> master requests all
go through ``salt.channel.client.ReqChannel.factory(opts).send(load)``.  In a job
process of the Salt zygote that factory returns a ``RaetReqChannel``: the load goes to
the minion daemon's lane (``salt_req``), the daemon relays it to the master over its road
session (``raetsalt.services.peer``), and the master's answer (``salt_ret``) comes back
the same way.  Salt's own code is unchanged above the channel: its file cache, hash
checks, chunked downloads and pillar handling all work as on a ZeroMQ minion.

A refusal from the master (a path outside ``file_roots``, an unknown command, a busy
master) raises ``SaltClientError`` with the master's reason, which Salt reports as
``ERROR executing 'cp.get_file': ...``; no answer in time raises
``SaltReqTimeoutError``.  All channels of a job process share one client yard
(``close_all`` removes it when the job ends).
"""

from __future__ import annotations

import time
from typing import Any

from raetsalt import protocol as p
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.errors import DaemonUnavailable

DEFAULT_TIMEOUT = 60.0
_CLIENTS: dict[tuple[str, str], CommandClient] = {}


def _client(sock_dir: str, minion_id: str) -> CommandClient:
    key = (sock_dir, minion_id)
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = CommandClient("minion", sock_dir, minion_id)
    return client


def close_all() -> None:
    """Close the job process's client yards."""
    while _CLIENTS:
        _CLIENTS.popitem()[1].close()


class RaetReqChannel:
    """What Salt's code calls a ``ReqChannel`` (synchronous ``send``)."""

    def __init__(self, opts: dict[str, Any], **kwargs: Any) -> None:
        self.opts = opts

    def send(self, load: dict[str, Any], tries: int | None = None,
             timeout: float | None = None, raw: bool = False) -> Any:
        import salt.exceptions

        wait = float(timeout) if timeout else float(
            self.opts.get("request_channel_timeout") or DEFAULT_TIMEOUT)
        wait = max(wait, DEFAULT_TIMEOUT) if load.get("cmd") == "_pillar" else wait
        try:
            client = _client(str(self.opts["sock_dir"]), str(self.opts["id"]))
            req = client.request(p.SHARE_SALT_REQ, load=dict(load), timeout=wait)
            answer = self._wait(client, req, wait)
        except DaemonUnavailable as exc:
            raise salt.exceptions.SaltClientError(f"the raetsalt minion: {exc}") from None
        if answer is None:
            raise salt.exceptions.SaltReqTimeoutError(
                f"the master did not answer {load.get('cmd')!r} within {wait:g} s")
        if "error" in answer:
            raise salt.exceptions.SaltClientError(str(answer["error"]))
        return answer.get("ret")

    def crypted_transfer_decode_dictentry(self, load: dict[str, Any], dictkey: str | None = None,
                                          tries: int | None = None,
                                          timeout: float | None = None) -> Any:
        """Salt's pillar call: over RAET the road already encrypts; same as ``send``."""
        return self.send(load, tries=tries, timeout=timeout)

    @staticmethod
    def _wait(client: CommandClient, req: str, wait: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + wait
        while (remaining := deadline - time.monotonic()) > 0:
            for body in client.receive(min(1.0, remaining)):
                if body.get("req") == req and p.share_of(body) == p.SHARE_SALT_RET:
                    return body
            if not client.daemon_alive():
                raise DaemonUnavailable("the raetsalt-minion daemon went away")
        return None

    def close(self) -> None:
        """The shared yard stays until the job ends (``close_all``)."""

    def __enter__(self) -> RaetReqChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRaetReqChannel(RaetReqChannel):
    """The ``AsyncReqChannel`` shape: the same calls as coroutines (run to completion)."""

    async def send(self, load: dict[str, Any], tries: int | None = None,
                   timeout: float | None = None, raw: bool = False) -> Any:
        return RaetReqChannel.send(self, load, tries, timeout, raw)

    async def crypted_transfer_decode_dictentry(
            self, load: dict[str, Any], dictkey: str | None = None, tries: int | None = None,
            timeout: float | None = None) -> Any:
        return RaetReqChannel.send(self, load, tries, timeout)

    async def connect(self) -> None:
        return None
