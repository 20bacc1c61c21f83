"""Graceful drain for Flight SQL: which calls still run once SIGTERM started the drain, and when
the drain is over.

pgwire's drain (protocol/pgwire/server.py) stops accepting and lets each running statement finish,
up to --drain-timeout-s. Flight SQL's unit is the call, and a query is two of them: GetFlightInfo
plans it and pulls its first message (a long aggregate is all there), then DoGet streams the
rest over the same or another connection. So, once the drain starts:

- the listening sockets close: a new connection is refused (FlightServer.drain);
- a call already running goes on;
- a new call is refused with UNAVAILABLE and PostgreSQL's word to a client arriving during a
  shutdown, 57P03 "the database system is shutting down" — except the calls that go on with a
  query the client began before: the GetFlightInfo of a prepared statement (ADBC's execute is
  CreatePreparedStatement, GetFlightInfo, DoGet), a DoGet (its ticket's statement was accepted
  by the GetFlightInfo that issued it), and the actions that only let go of something
  (ClosePreparedStatement, CloseSession), which a client closing its cursor or connection sends;
- the drain is over once no call runs and every query ticket issued has been asked for
  (`busy`), and, if any call ran during the drain, none has for RELEASE_GRACE_S: a client whose
  query just ended sends its ClosePreparedStatement next, and a server gone by then fails that
  query's cursor (ADBC redials for it and reports the refused connection); or at the timeout. The
  server then closes, cancelling whatever still runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from grpclib.const import Status
from grpclib.exceptions import GRPCError

# The calls that may start during a drain; GetFlightInfo and DoAction then say whether what they
# were asked goes on with a query begun before (`check`).
RUN_WHILE_DRAINING = frozenset({"DoGet", "DoAction", "GetFlightInfo"})
RELEASING_ACTIONS = frozenset({"ClosePreparedStatement", "CloseSession"})
# How long a drain that served calls waits, with none running, for the releasing ones.
RELEASE_GRACE_S = 0.5


def shutting_down() -> GRPCError:
    return GRPCError(Status.UNAVAILABLE, "the database system is shutting down (SQLSTATE 57P03)")


class Drain:
    """One service's calls in flight, and whether it drains. Used on the asyncio loop only (the
    handlers' thread), so plain counters."""

    def __init__(self) -> None:
        self.draining = False
        self.running = 0
        self.served = False  # a call ran during the drain

    def start(self) -> None:
        self.draining = True
        self.served = self.running > 0

    @contextmanager
    def call(self, rpc: str) -> Iterator[None]:
        """One call of `rpc`, counted while it runs; refused (GRPCError) if it may not start."""
        if self.draining and rpc not in RUN_WHILE_DRAINING:
            raise shutting_down()
        self.served = self.served or self.draining
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1

    def check(self, goes_on: bool) -> None:
        """A running call's request may be served: it goes on with a query begun before the drain,
        or no drain runs (GRPCError if not)."""
        if self.draining and not goes_on:
            raise shutting_down()

    def busy(self, awaiting_doget: Iterable[bool]) -> bool:
        """Whether the drain must go on: a call runs, or a query ticket was issued and no DoGet
        asked for it yet (`awaiting_doget`: per result kept)."""
        return self.running > 0 or any(awaiting_doget)
