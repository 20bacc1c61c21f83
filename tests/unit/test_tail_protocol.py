"""Every tail the write ladder can hold offers every member of `Tail`, and the tails writers hold in
turn (the quorum and the Postgres tail) are fenced at the lake, each under its own summary
property: the ladder never asks which tail it holds."""

from __future__ import annotations

import inspect

import pytest

from icegres.machines.drivers.pgtail import PgTail
from icegres.machines.drivers.quorum import QuorumLadderTail
from icegres.machines.drivers.tail import (
    PG_TAIL_EPOCH_PROPERTY,
    QUORUM_TERM_PROPERTY,
    LakeFencedTail,
    Tail,
)
from icegres.machines.drivers.wal import WalTail

pytestmark = pytest.mark.unit

TAILS = [WalTail, PgTail, QuorumLadderTail]


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(
        getattr(protocol, "__annotations__", {})
    )


def _offers(cls: type, name: str) -> bool:
    """A method, a property, or an attribute every instance sets (declared in a class body)."""
    return hasattr(cls, name) or any(name in getattr(k, "__annotations__", {}) for k in cls.__mro__)


@pytest.mark.parametrize("cls", TAILS, ids=lambda c: c.__name__)
def test_every_tail_offers_every_member_of_the_protocol(cls: type) -> None:
    for name in _members(Tail):
        assert _offers(cls, name), f"{cls.__name__} lacks {name}"
        declared = getattr(Tail, name, None)
        if inspect.isfunction(declared):
            offered = getattr(cls, name)
            assert inspect.iscoroutinefunction(offered) == inspect.iscoroutinefunction(declared), name
    assert {cls.kind for cls in TAILS} == {"wal", "postgres", "quorum"}


@pytest.mark.parametrize("cls", TAILS, ids=lambda c: c.__name__)
def test_the_quorum_and_postgres_tails_are_fenced_at_the_lake(cls: type) -> None:
    fenced = _members(LakeFencedTail) - _members(Tail)
    assert fenced == {"term_property", "writer_term", "outranked_by", "fence"}
    assert all(_offers(cls, name) for name in fenced) == (cls in (QuorumLadderTail, PgTail))


def test_each_kind_of_writer_term_has_its_own_summary_property() -> None:
    assert QuorumLadderTail.term_property == QUORUM_TERM_PROPERTY == "icegres.quorum-term"
    assert PgTail.term_property == PG_TAIL_EPOCH_PROPERTY != QUORUM_TERM_PROPERTY
