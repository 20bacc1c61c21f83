"""Flight SQL's connection standing (protocol/flightsql/connections.py) driven without sockets:
grpclib's connection and stream are stand-ins that record what the server did to them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from icegres.pg.errors import PgError
from icegres.protocol.flightsql.connections import Connections
from icegres.protocol.limits import RESERVED, TOO_MANY, Slots

pytestmark = pytest.mark.unit


class _Connection(SimpleNamespace):
    __hash__ = object.__hash__  # a dictionary key, by identity, as grpclib's Connection is


class FakeProtocol:
    """What `Connections` touches of grpclib's H2Protocol: it records GOAWAYs and closes."""

    def __init__(self) -> None:
        self.log: list[str] = []
        h2 = SimpleNamespace(close_connection=lambda additional_data=b"": self.log.append("goaway"))
        peer = SimpleNamespace(addr=lambda: ("127.0.0.1", 4242))
        self.connection = _Connection(_connection=h2, flush=lambda: None, get_peer=lambda: peer,
                                      is_closing=lambda: "closed" in self.log)
        self.processor = SimpleNamespace(close=lambda reason: self.log.append("closed"))

    def call(self) -> SimpleNamespace:
        return SimpleNamespace(_stream=SimpleNamespace(connection=self.connection))


def run(body) -> None:
    asyncio.run(body())


def test_a_slot_at_the_first_call_and_53300_beyond_the_limit_then_goaway():
    async def body() -> None:
        slots = Slots(2, 0, frozenset({"root"}))
        conns = Connections(slots, authentication_timeout_s=60, trust=False)
        a, b, c = FakeProtocol(), FakeProtocol(), FakeProtocol()
        for p in (a, b, c):
            conns.opened(p)
        assert slots.taken == 0  # connected, no call yet: no slot
        conns.admit(a.call())
        conns.admit(a.call())  # a second call on the same connection takes nothing more
        slots.take()  # a pgwire session takes the last
        assert slots.taken == 2

        async def refused_call() -> str:
            try:
                conns.admit(c.call())
            except PgError as err:
                return err.message
            return "admitted"

        assert await asyncio.create_task(refused_call()) == TOO_MANY
        await asyncio.sleep(0)
        assert c.log == ["goaway"]  # once the refused call had answered; not closed yet (linger)
        assert await asyncio.create_task(refused_call()) == TOO_MANY  # refused for good
        conns.closed(conns._open[a.connection])
        assert slots.taken == 1
        conns.admit(b.call())  # a's slot went back
        assert slots.taken == 2 and b.log == []

    run(body)


def test_the_reserved_slots_are_checked_at_the_first_authenticated_call():
    async def body() -> None:
        slots = Slots(3, 1, frozenset({"root"}))
        conns = Connections(slots, authentication_timeout_s=60, trust=False)
        ps = [FakeProtocol() for _ in range(4)]
        for p in ps:
            conns.opened(p)
        conns.admit(ps[0].call())
        conns.authenticated(ps[0].call(), "alice")
        conns.admit(ps[1].call())
        conns.authenticated(ps[1].call(), "alice")  # 1 free after its own: not into the reserve
        conns.admit(ps[2].call())  # the last slot, before anyone knows whose connection it is
        with pytest.raises(PgError, match=RESERVED):
            conns.authenticated(ps[2].call(), "alice")
        assert slots.taken == 2  # its slot given back at once
        conns.authenticated(ps[1].call(), "alice")  # passed before: never checked again
        conns.admit(ps[3].call())
        conns.authenticated(ps[3].call(), "root")
        assert slots.taken == 3

    run(body)


@pytest.mark.parametrize("trust", [False, True])
def test_the_authentication_timeout_closes_what_has_not_authenticated(trust):
    async def body() -> None:
        slots = Slots(5, 0, None if trust else frozenset({"root"}))
        conns = Connections(slots, authentication_timeout_s=0.05, trust=trust)
        silent, called, logged_in = FakeProtocol(), FakeProtocol(), FakeProtocol()
        for p in (silent, called, logged_in):
            conns.opened(p)
        conns.admit(called.call())
        conns.admit(logged_in.call())
        conns.authenticated(logged_in.call(), "alice")
        await asyncio.sleep(0.2)
        assert silent.log == ["goaway", "closed"]
        # Under trust a call is the authentication; otherwise only credentials that verify are.
        assert called.log == ([] if trust else ["goaway", "closed"])
        assert logged_in.log == []

    run(body)
