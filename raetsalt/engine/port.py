"""``RoadPort``: all a transaction (or a native channel) may ask of its road.

Transactions never see ``Road`` itself: they get this narrow port, so the engine's
imports run one way (road -> transactions -> port -> remote), a transaction can be tested
against a stub port, and every call back into the road is one of these:

* services: ``transmit`` / ``transmit_datagram`` (queue a datagram), ``emit`` (an event),
  ``arm`` (a timer), the boxes (``seal_body``, ``open_coat``, ``open_body``,
  ``long_box``), ``drop`` (count a datagram found bad late), ``want_flush``,
  ``announced_period`` (the presence hint a native channel sends);
* join bookkeeping: ``name_holder``, ``decide_key`` (the key policy over the road's
  records), ``adopt_identity``, ``rename``, ``forget_join``, ``register_lazy`` / ``forget_lazy``,
  ``remote_changed`` (persist the remote if it changed);
* life-cycle hooks, named after the protocol event that calls them: ``on_joined``,
  ``on_allowed``, ``on_unjoined``, ``on_unallowed``, ``on_alive_timeout``,
  ``on_connect_failed``, ``on_message_finished``, ``on_renew``, ``on_estate_moved``,
  ``on_path_validated``, ``on_adoption_failed``.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from raetsalt.drops import DropReason
from raetsalt.engine.config import RoadConfig
from raetsalt.engine.events import Event
from raetsalt.engine.identity import JoinBody, LocalEstate
from raetsalt.engine.reassembly import ReassemblyBudget
from raetsalt.engine.remote import Address, Exchange, Remote, SessionChannel
from raetsalt.engine.timers import Timed
from raetsalt.keep.policy import KeyDecision
from raetsalt.wire.enums import CoatKind
from raetsalt.wire.header import Header

if TYPE_CHECKING:
    from raetsalt.crypto import SessionBox
    from raetsalt.engine.precrypt import Precomputed
    from raetsalt.wire.packet import Packet


class RoadPort(Protocol):
    """The road as its transactions see it (``Road`` implements it)."""

    config: RoadConfig
    stats: Counter[str]
    secret_rng: random.Random
    """Choices a peer must not predict (native/recovery.py's skipped packet numbers): the
    system's CSPRNG, or the seeded generator a test gives the road."""
    reassembly: ReassemblyBudget
    """What unfinished incoming messages may hold, per remote and in all."""
    precomputed: Precomputed
    """Signature checks and box keys a driver computed ahead (``engine/precrypt.py``)."""

    @property
    def local(self) -> LocalEstate: ...

    # -- services -------------------------------------------------------------------------

    def transmit(self, header: Header, coat: bytes, address: Address) -> None:
        """Pack (and sign, for foot kind nacl) a packet and queue it."""

    def transmit_datagram(self, data: bytes, address: Address) -> None:
        """Queue a datagram the caller packed and signed itself."""

    def emit(self, event: Event) -> None: ...

    def arm(self, owner: Timed, when: float | None) -> None:
        """Wake ``owner.on_timer`` at ``when`` (None: not at all)."""

    def want_flush(self, channel: SessionChannel) -> None:
        """``channel`` has something to send at the next ``datagrams_to_send``."""

    def open_coat(self, remote: Remote, coat: bytes, coat_kind: CoatKind) -> bytes: ...

    def seal_body(self, remote: Remote, body: bytes, coat_kind: CoatKind) -> bytes: ...

    def open_body(self, remote: Remote, packet: Packet) -> Any: ...

    def long_box(self, remote: Remote) -> SessionBox:
        """The box between our and the remote's long-term keys (allow's vouch)."""

    def drop(self, reason: DropReason, address: Address, detail: str) -> None:
        """Count a datagram a transaction took and then found bad."""

    def announced_period(self) -> float:
        """The silence this road asks of its remotes before they probe it (0: their own
        period; ``engine/native/alive.py``): a native channel tells its remote."""

    # -- joins ----------------------------------------------------------------------------

    def name_holder(self, name: str) -> Remote | None:
        """The remote known by ``name``, if any."""

    def decide_key(self, role: str, verhex: str, pubhex: str) -> KeyDecision:
        """The key policy's answer for ``role`` presenting these keys (recorded)."""

    def adopt_identity(self, remote: Remote, join: JoinBody, *, fuid: int) -> None:
        """Take name, role, keys and flags from a join body (renaming a placeholder)."""

    def forget_join(self, txn: Exchange) -> None:
        """A join correspondent finished: it no longer receives packets."""

    def register_lazy(self, stem: bytes, txn: Exchange) -> None:
        """Segments whose head stem is ``stem`` go to ``txn`` without being parsed."""

    def forget_lazy(self, stem: bytes, txn: Exchange) -> None: ...

    def remote_changed(self, remote: Remote) -> None:
        """Persist ``remote`` if its record differs from what the keep holds."""

    # -- life cycle -----------------------------------------------------------------------

    def on_joined(self, remote: Remote, now: float, *, initiator: bool, vacuous: bool) -> None:
        """A join completed.  It proves nothing about who sent it, so a correspondent
        never moves a known estate to the joiner's address: only an allow does."""

    def on_allowed(
        self,
        remote: Remote,
        session: SessionBox,
        now: float,
        *,
        native: bool,
        initiator: bool,
        ha: Address,
        fuid: int,
        rsid: int,
        adopted: bool = False,
    ) -> None:
        """An allow completed: ``session`` is the new session, authenticated from
        ``ha`` (the path is validated there); ``adopted``: no join before it."""

    def on_unjoined(self, remote: Remote, now: float) -> None: ...

    def on_unallowed(self, remote: Remote, now: float) -> None: ...

    def on_alive_timeout(self, remote: Remote, now: float) -> None: ...

    def service_remote(self, remote: Remote, now: float) -> None:
        """Housekeeping of one remote now (what is due), and its timer armed again: after
        its presence or retry times changed."""

    def on_connect_failed(self, remote: Remote, now: float) -> None: ...

    def rename(self, remote: Remote, name: str) -> None:
        """``remote`` is known as ``name`` from now on (a valid name no other holds)."""

    def on_adoption_failed(self, remote: Remote) -> None:
        """The allow an adoption hello started did not complete (``engine.adopt``)."""

    def on_message_finished(self, remote: Remote, now: float) -> None: ...

    def on_renew(self, remote: Remote, now: float) -> None:
        """The other side no longer knows our ids: join again, vacuously."""

    def end_session(self, remote: Remote, reason: str, detail: str, now: float) -> None:
        """End ``remote``'s native session (``SessionEnded``): ``"key_expired"`` starts a
        new handshake at once, anything else waits for the ordinary reconnection."""

    def on_path_validated(self, remote: Remote, ha: Address) -> None:
        """A native session's remote answered a challenge from ``ha``: it lives there
        now (engine/native/migration.py)."""

    def on_estate_moved(self, placeholder: Remote, known: Remote) -> None:
        """The estate we joined at ``placeholder``'s address is ``known`` (same name,
        role and keys), which lived at another address: ``placeholder`` takes over."""
