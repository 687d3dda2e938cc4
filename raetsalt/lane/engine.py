"""The sans-IO lane engine: one yard's side of a lane (docs/raet-wire.md §9).

Theory of operation
-------------------
A ``Lane`` is one yard.  The driver feeds it every datagram with the *kernel-reported*
source path (``receive_datagram(data, src_path, now)``), sends what
``datagrams_to_send(now)`` returns, and tells it when a send would block
(``send_blocked``) or found nobody (``send_failed``).  Received messages and drops come
out of ``next_event()``.  Nothing here reads a clock or touches a socket.

Identity (raet quirk Q9, docs/raet-wire.md §10): a yard is the socket path it is bound to,
which the kernel reports and which only one process can hold at a time.  A page is accepted
only when

1. it came from a bound socket (unbound senders can claim any name),
2. the path's file name is ``<our lane>.<sn>.uxd`` for the page's ``sn``,
3. ``dn`` is our own name, and
4. ``sn`` is not ours and, if ``sn`` is already known, it is known at that same path.

Anything else is dropped and counted; nothing a peer sends can raise out of the engine.

Books: a paginated message is reassembled in a book keyed by (source yard, si, bi).  Each
source may have at most ``max_books_per_yard`` open books, a book at most
``max_message_size`` bytes, and a book not completed within ``book_timeout`` seconds is
discarded.  When a source's si changes (the sender restarted) its open books are dropped,
as raet does.

Memory (docs/security.md, Unfinished messages): a book holds only the pages that came (never
a slot per announced page), and what open books hold, ``PAGE_OVERHEAD`` per page included,
is capped per source yard (``max_book_bytes_per_yard``) and for the whole lane
(``max_book_bytes``).  A page that would exceed a cap ends its book at once (the lane does
not retransmit, so the book could never complete), counted as ``yard_books_full`` or
``lane_books_full``; when the lane's cap is full, the oldest books of the yard holding the
most are ended first, so one yard cannot keep the others' messages out.
"""

from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raetsalt.errors import BadPacket, LocalError
from raetsalt.lane.page import (
    MAX_BOOK_ID,
    MAX_PAGE_SIZE,
    PackKind,
    Page,
    PageDropReason,
    check_name,
    decode_body_untrusted,
    encode_body,
    paginate,
    parse_head_untrusted,
)
from raetsalt.paths import SOCKET_SUFFIX, yard_file_name

PAGE_OVERHEAD = 128
"""Bytes a held page is charged beyond its section (object header, dict slot)."""


def names_from_path(path: str) -> tuple[str, str] | None:
    """(lane, yard) from a socket path, or None when it is not a yard socket name."""
    base = path.rpartition("/")[2]
    if not base.endswith(SOCKET_SUFFIX):
        return None
    lane, dot, yard = base[: -len(SOCKET_SUFFIX)].rpartition(".")
    if not dot or not lane or not yard:
        return None
    return lane, yard


@dataclass(frozen=True, slots=True)
class YardMessage:
    """A complete message arrived from a yard on our lane."""

    body: dict[str, Any]
    """The decoded body (always a mapping)."""
    source: str
    """The sending yard's name (verified against its socket path)."""
    source_path: str
    """The sending yard's socket path."""


@dataclass(frozen=True, slots=True)
class PageDropped:
    """A datagram was dropped; ``trigger`` is a ``PageDropReason`` string."""

    trigger: str
    source_path: str | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class YardReaped:
    """A yard was forgotten because its socket is gone (ENOENT/ECONNREFUSED on send)."""

    name: str
    path: str


LaneEvent = YardMessage | PageDropped | YardReaped


@dataclass(slots=True)
class _Book:
    session_id: str
    page_count: int
    pack_kind: PackKind
    expires: float
    sections: dict[int, bytes] = field(default_factory=dict)
    size: int = 0
    """Bytes of the sections held."""
    held: int = 0
    """What the book is charged: its sections and ``PAGE_OVERHEAD`` per page."""


@dataclass(slots=True)
class _RemoteYard:
    name: str
    path: str
    book_id: int = 0
    remote_session: str | None = None
    books: dict[tuple[str, int], _Book] = field(default_factory=dict)
    book_bytes: int = 0
    """What its open books are charged (see ``_Book.held``)."""
    tx: deque[bytes] = field(default_factory=deque)
    retry_at: float | None = None
    retry_delay: float = 0.0


class Lane:
    """One yard on a lane: paginates outgoing messages, verifies and reassembles incoming.

    :param lane_name: the lane (all yards of one node share it).
    :param yard_name: this yard's name within the lane.
    :param accept: learn unknown source yards from their pages (raet's accept mode);
        when False only yards added with ``add_yard`` are heard.
    :param session_id: this yard's session id (random when omitted).
    :param max_tx_pages: pages that may wait per destination; ``send`` refuses more.
    :param max_book_bytes_per_yard: what one source yard's open books may hold.
    :param max_book_bytes: what all open books together may hold.
    """

    def __init__(
        self,
        *,
        lane_name: str,
        yard_name: str,
        accept: bool = True,
        session_id: str | None = None,
        pack_kind: PackKind = PackKind.MSGPACK,
        max_page_size: int = MAX_PAGE_SIZE,
        max_message_size: int = 16 * 1024 * 1024,
        max_books_per_yard: int = 4,
        book_timeout: float = 5.0,
        max_tx_pages: int = 1024,
        retry_delay: float = 0.002,
        max_retry_delay: float = 0.1,
        max_book_bytes_per_yard: int = 32 * 1024 * 1024,
        max_book_bytes: int = 128 * 1024 * 1024,
    ) -> None:
        self.lane_name = check_name(lane_name, "lane name")
        self.yard_name = check_name(yard_name)
        self.accept = accept
        # raet uses 18 random characters; nothing but uniqueness across restarts matters.
        self.session_id = session_id if session_id is not None else os.urandom(9).hex()
        self.pack_kind = pack_kind
        self.max_page_size = max_page_size
        self.max_message_size = max_message_size
        self.max_page_count = min(0xFFFF, -(-max_message_size // (max_page_size - 200)) + 1)
        self.max_books_per_yard = max_books_per_yard
        self.book_timeout = book_timeout
        self.max_tx_pages = max_tx_pages
        self.retry_delay = retry_delay
        self.max_retry_delay = max_retry_delay
        self.max_book_bytes_per_yard = max_book_bytes_per_yard
        self.max_book_bytes = max_book_bytes
        self.book_bytes = 0
        """What all open books are charged."""
        self.stats: Counter[str] = Counter()
        self._yards: dict[str, _RemoteYard] = {}
        self._by_path: dict[str, _RemoteYard] = {}
        self._events: deque[LaneEvent] = deque()
        self._ready: dict[str, _RemoteYard] = {}
        self._file_name = yard_file_name(self.lane_name, self.yard_name)

    # -- yards ---------------------------------------------------------------------------

    def add_yard(self, name: str, path: str) -> None:
        """Make a yard known at ``path`` (replacing what was known under that name)."""
        check_name(name)
        if names_from_path(path) != (self.lane_name, name):
            raise LocalError(f"path {path!r} is not yard {name!r} on lane {self.lane_name!r}")
        old = self._yards.get(name)
        if old is not None:
            self._forget(old)
        yard = _RemoteYard(name=name, path=path)
        self._yards[name] = yard
        self._by_path[path] = yard

    def remove_yard(self, name: str) -> None:
        """Forget a yard and everything queued for or from it."""
        yard = self._yards.get(name)
        if yard is not None:
            self._forget(yard)

    def has_yard(self, name: str) -> bool:
        return name in self._yards

    def yard_names(self) -> list[str]:
        return list(self._yards)

    def yard_path(self, name: str) -> str | None:
        """The socket path yard ``name`` is known at (kernel-reported), or None."""
        yard = self._yards.get(name)
        return yard.path if yard is not None else None

    def backlog(self, name: str) -> int:
        """Pages waiting to go to yard ``name`` (0 for an unknown yard)."""
        yard = self._yards.get(name)
        return len(yard.tx) if yard is not None else 0

    def backed_off(self, name: str) -> bool:
        """Yard ``name``'s socket was full and has not been reported to have room since."""
        yard = self._yards.get(name)
        return yard is not None and yard.retry_at is not None

    def has_output(self) -> bool:
        """Pages wait to go to some yard (now or after a back-off)."""
        return any(yard.tx for yard in self._yards.values())

    def _forget(self, yard: _RemoteYard) -> None:
        self._close_books(yard)
        del self._yards[yard.name]
        self._by_path.pop(yard.path, None)
        self._ready.pop(yard.name, None)

    # -- sending -------------------------------------------------------------------------

    def send(
        self,
        body: Mapping[str, Any] | bytes,
        destination: str,
        *,
        pack_kind: PackKind | None = None,
    ) -> bool:
        """Queue a message for yard ``destination``.

        ``body`` is a mapping, or bytes already serialized with ``pack_kind``.  Returns
        False (and counts ``tx_refused``) when the destination's queue is full.  Raises
        LocalError for an unknown yard or a message too large to paginate.
        """
        yard = self._yards.get(destination)
        if yard is None:
            raise LocalError(f"unknown yard {destination!r} on lane {self.lane_name!r}")
        if len(yard.tx) >= self.max_tx_pages:
            self.stats["tx_refused"] += 1
            return False
        yard.tx.extend(self._paginate(body, yard, pack_kind))
        if yard.retry_at is None:
            self._ready[destination] = yard
        return True

    def pack(
        self,
        body: Mapping[str, Any] | bytes,
        destination: str,
        *,
        pack_kind: PackKind | None = None,
    ) -> list[bytes]:
        """The pages of one message for yard ``destination``, queued nowhere.

        For a sender that puts them on its socket at once itself (a client of
        its manor), so the message costs no queue or ``datagrams_to_send`` round.  Raises
        like ``send``.
        """
        yard = self._yards.get(destination)
        if yard is None:
            raise LocalError(f"unknown yard {destination!r} on lane {self.lane_name!r}")
        return self._paginate(body, yard, pack_kind)

    def _paginate(
        self, body: Mapping[str, Any] | bytes, yard: _RemoteYard, pack_kind: PackKind | None
    ) -> list[bytes]:
        kind = self.pack_kind if pack_kind is None else pack_kind
        data = body if isinstance(body, bytes) else encode_body(body, kind)
        if len(data) > self.max_message_size:
            raise LocalError(f"message of {len(data)} bytes exceeds {self.max_message_size}")
        yard.book_id = yard.book_id + 1 if yard.book_id < MAX_BOOK_ID else 1
        return paginate(
            data,
            pack_kind=kind,
            source=self.yard_name,
            destination=yard.name,
            session_id=self.session_id,
            book_id=yard.book_id,
            max_page_size=self.max_page_size,
        )

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, str]]:
        """Every page that may go now, as (datagram, destination path), in order per yard."""
        out: list[tuple[bytes, str]] = []
        if not self._ready:
            return out
        for yard in self._ready.values():
            path = yard.path
            out.extend((page, path) for page in yard.tx)
            yard.tx.clear()
        self._ready.clear()
        return out

    def send_blocked(self, path: str, datagrams: list[bytes], now: float) -> None:
        """The socket at ``path`` was full: put ``datagrams`` back in front, retry later.

        The retry delay doubles while the yard stays full (up to ``max_retry_delay``), so
        a yard that stopped reading costs a wake-up every ``max_retry_delay`` seconds.
        """
        yard = self._by_path.get(path)
        if yard is None:
            return
        self.stats["tx_blocked"] += 1
        yard.tx.extendleft(reversed(datagrams))
        yard.retry_delay = min(
            self.max_retry_delay, yard.retry_delay * 2 if yard.retry_delay else self.retry_delay
        )
        yard.retry_at = now + yard.retry_delay
        self._ready.pop(yard.name, None)

    def send_unblocked(self, path: str, now: float) -> None:
        """The socket at ``path`` has room again: send its waiting pages now, before the
        back-off timer (whose delay stays until a send goes through)."""
        yard = self._by_path.get(path)
        if yard is None or yard.retry_at is None:
            return
        self.stats["tx_unblocked"] += 1
        self._release(yard)

    def _release(self, yard: _RemoteYard) -> None:
        """End ``yard``'s back-off: its waiting pages go with the next sends."""
        yard.retry_at = None
        if yard.tx:
            self._ready[yard.name] = yard

    def send_succeeded(self, path: str) -> None:
        """A send to ``path`` went through: its yard is no longer backed off."""
        yard = self._by_path.get(path)
        if yard is not None:
            yard.retry_delay = 0.0

    def send_failed(self, path: str, now: float) -> None:
        """Nobody is bound at ``path`` any more: reap that yard (raet does the same)."""
        yard = self._by_path.get(path)
        if yard is None:
            return
        self.stats["yard_reaped"] += 1
        self._forget(yard)
        self._events.append(YardReaped(name=yard.name, path=path))

    # -- timers --------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The earliest time ``handle_timer`` has work to do, or None."""
        times = [y.retry_at for y in self._yards.values() if y.retry_at is not None]
        times.extend(b.expires for y in self._yards.values() for b in y.books.values())
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        """Release backed-off destinations and discard expired books."""
        for yard in self._yards.values():
            if yard.retry_at is not None and yard.retry_at <= now:
                self._release(yard)
            if yard.books:
                for key in [k for k, b in yard.books.items() if b.expires <= now]:
                    self._close_book(yard, key)
                    self._drop(PageDropReason.BOOK_EXPIRED, yard.path, f"book {key[1]}")

    # -- receiving -----------------------------------------------------------------------

    def next_event(self) -> LaneEvent | None:
        """The next received message, drop or reap, or None."""
        return self._events.popleft() if self._events else None

    def _drop(self, trigger: str, path: str | None, detail: str = "") -> None:
        self.stats[trigger] += 1
        self._events.append(PageDropped(trigger=trigger, source_path=path, detail=detail))

    def receive_datagram(self, data: bytes, src_path: str | None, now: float) -> None:
        """Take one datagram as received from the socket bound at ``src_path``.

        ``src_path`` must be what the kernel reported (None or "" for an unbound sender).
        """
        if not src_path:
            self._drop(PageDropReason.UNBOUND_SENDER, None)
            return
        try:
            # A head as a tuple: most messages are one page, and they need no Page object.
            kind, source, destination, session_id, book_id, number, count, offset = (
                parse_head_untrusted(
                    data, max_page_size=self.max_page_size, max_page_count=self.max_page_count
                )
            )
        except BadPacket as exc:
            self._drop(exc.trigger, src_path, str(exc))
            return
        yard = self._by_path.get(src_path)
        if yard is None or yard.name != source:
            yard = self._learn(source, src_path)
            if yard is None:
                return
        if destination != self.yard_name:
            self._drop(PageDropReason.WRONG_DESTINATION, src_path, destination)
            return
        if yard.remote_session != session_id:
            if yard.books:
                self.stats[PageDropReason.STALE_SESSION] += len(yard.books)
                self._close_books(yard)
            yard.remote_session = session_id
        if count == 1:
            self._deliver(yard, data[offset:], kind)
            return
        page = Page(kind, source, destination, session_id, book_id, number, count, data[offset:])
        self._add_page(yard, page, now)

    def _learn(self, name: str, path: str) -> _RemoteYard | None:
        """Check a page's claimed source against its socket path (see module comment)."""
        names = names_from_path(path)
        if names is None or names[1] != name:
            self._drop(PageDropReason.SPOOFED_SOURCE, path, f"claims {name!r}")
            return None
        if names[0] != self.lane_name:
            self._drop(PageDropReason.WRONG_LANE, path, names[0])
            return None
        if name == self.yard_name:
            self._drop(PageDropReason.SPOOFED_SOURCE, path, "claims our own name")
            return None
        known = self._yards.get(name)
        if known is not None and known.path != path:
            self._drop(PageDropReason.NAME_CONFLICT, path, f"{name!r} is at {known.path!r}")
            return None
        if not self.accept:
            self._drop(PageDropReason.UNACCEPTED, path, name)
            return None
        old = self._by_path.get(path)
        if old is not None:
            # A new process bound the path of a yard that is gone; start afresh.
            self._forget(old)
        yard = _RemoteYard(name=name, path=path)
        self._yards[name] = yard
        self._by_path[path] = yard
        return yard

    def _add_page(self, yard: _RemoteYard, page: Page, now: float) -> None:
        key = (page.session_id, page.book_id)
        book = yard.books.get(key)
        if book is None:
            if len(yard.books) >= self.max_books_per_yard:
                self._drop(PageDropReason.TOO_MANY_BOOKS, yard.path)
                return
            book = _Book(
                session_id=page.session_id,
                page_count=page.page_count,
                pack_kind=page.pack_kind,
                expires=now + self.book_timeout,
            )
            yard.books[key] = book
        elif book.page_count != page.page_count or book.pack_kind != page.pack_kind:
            self._close_book(yard, key)
            self._drop(PageDropReason.BOOK_MISMATCH, yard.path)
            return
        sections = book.sections
        if page.page_number in sections:
            self._drop(PageDropReason.DUPLICATE_PAGE, yard.path)
            return
        size = len(page.section)
        if book.size + size > self.max_message_size:
            self._close_book(yard, key)
            self._drop(PageDropReason.BOOK_TOO_LARGE, yard.path)
            return
        cost = size + PAGE_OVERHEAD
        if yard.book_bytes + cost > self.max_book_bytes_per_yard:
            self._close_book(yard, key)
            self._drop(PageDropReason.YARD_BOOKS_FULL, yard.path, f"book {key[1]}")
            return
        if self.book_bytes + cost > self.max_book_bytes and not self._make_room(yard, cost):
            self._close_book(yard, key)
            self._drop(PageDropReason.LANE_BOOKS_FULL, yard.path, f"book {key[1]}")
            return
        book.size += size
        book.held += cost
        yard.book_bytes += cost
        self.book_bytes += cost
        sections[page.page_number] = page.section
        if len(sections) == book.page_count:
            self._close_book(yard, key)
            data = b"".join([sections[n] for n in range(book.page_count)])
            self._deliver(yard, data, book.pack_kind)

    def _make_room(self, yard: _RemoteYard, cost: int) -> bool:
        """Free ``cost`` bytes of the lane's cap by ending the oldest books of the yard that
        holds the most, while that is a yard holding more than ``yard`` would; False if
        ``yard`` is the heaviest itself (then its own page is refused).  One yard filling
        the cap cannot keep the others' messages out."""
        while self.book_bytes + cost > self.max_book_bytes:
            heaviest = max(self._yards.values(), key=lambda y: y.book_bytes)
            if heaviest is yard or heaviest.book_bytes <= yard.book_bytes + cost:
                return False
            key = next(iter(heaviest.books))
            self._close_book(heaviest, key)
            self._drop(PageDropReason.LANE_BOOKS_FULL, heaviest.path, f"book {key[1]} evicted")
        return True

    def _close_book(self, yard: _RemoteYard, key: tuple[str, int]) -> None:
        """Forget one open book and what it was charged."""
        book = yard.books.pop(key)
        yard.book_bytes -= book.held
        self.book_bytes -= book.held

    def _close_books(self, yard: _RemoteYard) -> None:
        for key in list(yard.books):
            self._close_book(yard, key)

    def _deliver(self, yard: _RemoteYard, data: bytes, pack_kind: PackKind) -> None:
        try:
            body = decode_body_untrusted(data, pack_kind)
        except BadPacket as exc:
            self._drop(exc.trigger, yard.path, str(exc))
            return
        self._events.append(YardMessage(body=body, source=yard.name, source_path=yard.path))
