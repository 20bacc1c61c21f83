"""How many connections are served at once, and who may take the last few slots.

One `Slots` per process: pgwire's connections and Flight SQL's HTTP/2 connections count against
the same `--max-connections` (`icegres serve` runs both front ends as one server, and both run on
trio's thread, so the counter needs no lock). Where each front end takes and releases its slot:
protocol/pgwire/session.py, protocol/flightsql/connections.py.

PostgreSQL's rules (15), which clients and poolers already know how to read (pgwire's terms; Flight
SQL's are in its module):

- A connection takes a slot once its startup packet is read (PostgreSQL's backend gets its PGPROC
  then), before authentication; a CancelRequest is a startup packet of its own kind and never
  takes one. Beyond `max_connections` the client gets FATAL 53300 "sorry, too many clients
  already".
- The last `superuser_reserved_connections` slots are for superusers: once authenticated, a
  non-superuser that finds no more than that many slots free gets FATAL 53300 "remaining
  connection slots are reserved for non-replication superuser connections".
- A socket that has not sent its startup packet holds no slot (PostgreSQL's postmaster child
  holds none either); `--authentication-timeout` closes it. So idle sockets cannot lock out
  clients that log in, and what they hold is one task and a buffer of at most 10 KB each.

`Slots` is the counter alone: no trio, no sockets; the session asks it at those two points.
"""

from __future__ import annotations

from dataclasses import dataclass

from icegres.pg import errors as E
from icegres.pg.errors import PgError

TOO_MANY = "sorry, too many clients already"
RESERVED = "remaining connection slots are reserved for non-replication superuser connections"


@dataclass
class Slots:
    max_connections: int
    reserved: int
    superusers: frozenset[str] | None  # None: everyone is one (trust)
    taken: int = 0

    def take(self) -> None:
        """A startup packet was read: take a slot, or FATAL 53300 when none is left."""
        if self.taken >= self.max_connections:
            raise PgError(E.TOO_MANY_CONNECTIONS, TOO_MANY, severity="FATAL")
        self.taken += 1

    def release(self) -> None:
        assert self.taken > 0
        self.taken -= 1

    def is_superuser(self, user: str) -> bool:
        return self.superusers is None or user in self.superusers

    def check_reserved(self, user: str) -> None:
        """After authentication (holding a slot): FATAL 53300 for a non-superuser when only the
        reserved slots were left for it."""
        if self.reserved and not self.is_superuser(user) and self.max_connections - self.taken < self.reserved:
            raise PgError(E.TOO_MANY_CONNECTIONS, RESERVED, severity="FATAL")
