"""raet's acceptance table with raetsalt's deliberate changes (see raetsalt.keep.store)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from raetsalt.errors import KeepError, LocalError
from raetsalt.keep import MAX_DENIED_PER_ROLE, Acceptance, AutoMode, RoleRecord
from raetsalt.keep.store import _BaseKeep

OLD = ("11" * 32, "a1" * 32)  # stored keys
NEW = ("22" * 32, "a2" * 32)  # presented keys when they differ

P, A, R = Acceptance.PENDING, Acceptance.ACCEPTED, Acceptance.REJECTED
NEVER, ONCE, ALWAYS = AutoMode.NEVER, AutoMode.ONCE, AutoMode.ALWAYS


class Row(NamedTuple):
    stored: Acceptance | None  # None: role never seen
    same_keys: bool  # presented keys equal the stored ones
    auto: AutoMode
    result: Acceptance
    after: Acceptance  # stored acceptance afterwards
    denied: bool  # presented pair recorded as denied


def rows() -> list[Row]:
    table = []
    for auto in AutoMode:
        first = P if auto is NEVER else A
        table += [
            Row(None, True, auto, first, first, False),
            Row(A, True, auto, A, A, False),
            Row(A, False, auto, R, A, True),
            Row(P, True, auto, first, first, False),
            Row(P, False, auto, R, P, True),
            Row(R, True, auto, R, R, False),
            Row(R, False, auto, R, R, False),
        ]
    return table


def _id(row: Row) -> str:
    stored = row.stored.value if row.stored else "none"
    return f"{stored}-{'same' if row.same_keys else 'other'}-{row.auto.value}"


@pytest.mark.parametrize("row", rows(), ids=_id)
def test_acceptance_table(keep: _BaseKeep, row: Row) -> None:
    if row.stored is not None:
        keep.save_role(RoleRecord("web1", row.stored, *OLD))
    presented = OLD if row.same_keys or row.stored is None else NEW

    assert keep.status_role("web1", *presented, row.auto) is row.result

    stored = keep.load_role("web1")
    assert stored is not None
    assert stored.acceptance is row.after
    # stored keys are never replaced by status_role
    assert (stored.verhex, stored.pubhex) == OLD
    assert keep.list_denied() == ({"web1": [NEW]} if row.denied else {})
    # asking again gives the same answer and changes nothing more
    assert keep.status_role("web1", *presented, row.auto) is row.result
    assert keep.load_role("web1") == stored
    assert keep.list_denied() == ({"web1": [NEW]} if row.denied else {})


def test_auto_mode_may_be_given_as_string(keep: _BaseKeep) -> None:
    assert keep.status_role("web1", *OLD, "once") is A  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        keep.status_role("web2", *OLD, "sometimes")  # type: ignore[arg-type]


def test_half_matching_keys_count_as_different(keep: _BaseKeep) -> None:
    keep.save_role(RoleRecord("web1", A, *OLD))
    assert keep.status_role("web1", OLD[0], NEW[1], ALWAYS) is R
    assert keep.status_role("web1", NEW[0], OLD[1], ALWAYS) is R
    assert keep.list_denied() == {"web1": [(OLD[0], NEW[1]), (NEW[0], OLD[1])]}


def test_pending_then_operator_accepts(keep: _BaseKeep) -> None:
    assert keep.status_role("web1", *OLD, NEVER) is P
    keep.accept_role("web1")
    assert keep.status_role("web1", *OLD, NEVER) is A


def test_roles_are_independent(keep: _BaseKeep) -> None:
    assert keep.status_role("web1", *OLD, ONCE) is A
    assert keep.status_role("web2", *NEW, NEVER) is P
    assert keep.status_role("web1", *NEW, ONCE) is R
    assert keep.list_denied() == {"web1": [NEW]}
    rec2 = keep.load_role("web2")
    assert rec2 is not None and rec2.acceptance is P


def test_denied_list_is_capped_keeping_newest(keep: _BaseKeep) -> None:
    keep.save_role(RoleRecord("web1", A, *OLD))
    pairs = [(f"{i:02x}" * 32, f"{i + 100:02x}" * 32) for i in range(MAX_DENIED_PER_ROLE + 3)]
    for pair in pairs:
        assert keep.status_role("web1", *pair, ALWAYS) is R
    assert keep.list_denied() == {"web1": pairs[-MAX_DENIED_PER_ROLE:]}


def test_status_role_validates_input(keep: _BaseKeep) -> None:
    with pytest.raises(KeepError):
        keep.status_role("../x", *OLD, ONCE)
    with pytest.raises(LocalError):
        keep.status_role("web1", None, OLD[1], ONCE)  # type: ignore[arg-type]
    assert keep.list_roles() == []


def test_status_role_writes_only_on_change(
    keep: _BaseKeep, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[tuple[str, str]] = []
    real_write = keep._write

    def counting_write(kind: str, key: str, doc: dict[str, object]) -> None:
        writes.append((kind, key))
        real_write(kind, key, doc)

    monkeypatch.setattr(keep, "_write", counting_write)
    keep.status_role("web1", *OLD, NEVER)
    assert writes == [("role", "web1")]
    for _ in range(3):
        keep.status_role("web1", *OLD, NEVER)
    assert writes == [("role", "web1")]
    keep.status_role("web1", *OLD, ONCE)  # pending -> accepted
    keep.status_role("web1", *OLD, ONCE)
    keep.status_role("web1", *NEW, ONCE)  # denied recorded
    keep.status_role("web1", *NEW, ONCE)  # already denied: nothing written
    assert writes == [("role", "web1"), ("role", "web1"), ("denied", "web1")]
