"""flightsql/drain.py: once a drain starts, only the calls that go on with a query begun before it
may start, every call is counted while it runs, and the drain waits for unread tickets."""

from __future__ import annotations

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from icegres.protocol.flightsql.drain import RELEASING_ACTIONS, Drain

pytestmark = pytest.mark.unit


def test_calls_run_counted_and_new_ones_are_refused_once_draining():
    drain = Drain()
    with drain.call("DoPut"):
        assert drain.running == 1 and drain.busy([])
        drain.start()  # a call already running goes on
    assert drain.running == 0 and not drain.busy([False])
    for rpc in ("DoPut", "Handshake", "GetSchema", "ListActions", "ListFlights"):
        with pytest.raises(GRPCError) as refused, drain.call(rpc):
            pass
        assert refused.value.status is Status.UNAVAILABLE and "57P03" in refused.value.message
    for rpc in ("DoGet", "DoAction", "GetFlightInfo"):  # they check what they were asked
        with drain.call(rpc):
            pass


def test_while_draining_only_a_query_begun_before_goes_on():
    drain = Drain()
    drain.check(goes_on=False)  # no drain: anything
    drain.start()
    drain.check(goes_on=True)
    with pytest.raises(GRPCError):
        drain.check(goes_on=False)
    assert RELEASING_ACTIONS == {"ClosePreparedStatement", "CloseSession"}


def test_an_issued_ticket_keeps_the_drain_waiting_until_its_doget():
    drain = Drain()
    drain.start()
    assert drain.busy([False, True]) and not drain.busy([False, False])
