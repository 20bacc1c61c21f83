"""Every tail the write ladder can hold offers every member of `Tail`, and only the quorum tail is
fenced at the lake: the ladder never asks which tail it holds."""

from __future__ import annotations

import inspect

import pytest

from icegres.machines.drivers.pgtail import PgTail
from icegres.machines.drivers.quorum import QuorumLadderTail
from icegres.machines.drivers.tail import LakeFencedTail, Tail
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
def test_only_the_quorum_tail_is_fenced_at_the_lake(cls: type) -> None:
    fenced = {name for name in vars(LakeFencedTail) if not name.startswith("_")} - _members(Tail)
    assert fenced == {"writer_term", "outranked_by", "fence"}
    assert all(hasattr(cls, name) for name in fenced) == (cls is QuorumLadderTail)
