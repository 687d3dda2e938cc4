"""The keep read once (``load_state``), tolerant of unreadable documents.

One corrupt minion key file must not stop the master; that
minion is refused (not taken for a new id) and the file is named, the others are served.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raetsalt.engine import Road, RoadConfig
from raetsalt.engine.events import KeepEvent
from raetsalt.errors import KeepError
from raetsalt.keep.records import AutoMode, RemoteRecord
from raetsalt.keep.store import FileKeep
from raetsalt.testing.forge import join_request

V, P = "a" * 64, "b" * 64


def _keep(tmp_path: Path) -> FileKeep:
    keep = FileKeep(tmp_path / "keep", durable=False)
    for role in ("web1", "web2", "web3"):
        keep.status_role(role, V, P, AutoMode.ONCE)
    keep.save_remote(RemoteRecord("web1", "web1", 2, 3, ("10.0.0.1", 4510), 9, False, 0, True))
    return keep


@pytest.mark.parametrize(
    "damage",
    ["{ not json", '{"role": "web2"}', "\xff\xfe", '{"role": "other", "acceptance": "accepted",'
     ' "verhex": "a", "pubhex": "b"}'],
    ids=["json", "fields", "utf8", "name"],
)
def test_an_unreadable_role_is_broken_and_the_rest_loads(tmp_path: Path, damage: str) -> None:
    keep = _keep(tmp_path)
    keep.path_of("role", "web2").write_bytes(damage.encode("latin-1"))
    state = keep.load_state()
    assert sorted(r.role for r in state.roles) == ["web1", "web3"]
    assert list(state.broken) == ["web2"]
    assert len(state.problems) == 1 and str(keep.path_of("role", "web2")) in state.problems[0]
    assert [r.name for r in state.remotes] == ["web1"]


def test_unreadable_remotes_denied_lists_and_bad_file_names_are_skipped(tmp_path: Path) -> None:
    keep = _keep(tmp_path)
    keep.path_of("remote", "web1").write_text("[]")
    (tmp_path / "keep" / "denied" / "web3.json").write_text("{}")
    (tmp_path / "keep" / "role" / "a:b.json").write_text("{}")
    state = keep.load_state()
    assert state.remotes == [] and state.denied == {} and not state.broken
    assert len(state.problems) == 3


def test_our_own_unreadable_estate_is_fatal(tmp_path: Path) -> None:
    keep = _keep(tmp_path)
    keep.path_of("local", "estate").write_text("{")
    with pytest.raises(KeepError, match="estate.json"):
        keep.load_state()


def test_a_broken_role_is_refused_and_the_others_are_served(tmp_path: Path) -> None:
    keep = _keep(tmp_path)
    keep.path_of("role", "web2").write_text("{")
    road = Road(state=keep.load_state(), name="master", main=True,
                config=RoadConfig(auto=AutoMode.ONCE))
    for n, role in enumerate(("web2", "web3", "web4"), start=1):
        road.receive_datagram(join_request(role, verhex=V, pubhex=P, tid=n),
                              (f"10.0.0.{n}", 4510), 0.0)
    assert road.stats["drop_unreadable_key"] == 1
    assert "web2" not in road.remotes_by_name  # never taken for a new id
    assert {"web3", "web4"} <= set(road.remotes_by_name)
    writes = []
    while (event := road.next_event()) is not None:
        if isinstance(event, KeepEvent):
            writes.append(event.write())
    keep.commit(writes)
    assert keep.path_of("role", "web2").read_text() == "{"  # left for the operator
