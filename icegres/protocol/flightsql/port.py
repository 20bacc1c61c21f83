"""What the Flight SQL service may call on its server, and what the write handlers may call on
the service: protocols, so that `service` never imports `server` and `writes` never imports
`service`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    import trio

    from icegres.config import Settings
    from icegres.engine.lake import Engine
    from icegres.engine.txn import TxnState
    from icegres.protocol.backoff import AuthBackoff
    from icegres.protocol.flightsql.bindings import Params
    from icegres.protocol.flightsql.connections import Connections
    from icegres.protocol.flightsql.sessions import Bounded, Prepared, Result, Session
    from icegres.sql.statement import Statement


class ServerPort(Protocol):
    """The Flight SQL server as its service sees it."""

    settings: Settings
    engine: Engine
    limiter: trio.CapacityLimiter
    backoff: AuthBackoff  # failed-login back-off per client address, pgwire's in `icegres serve`
    connections: Connections  # slots (pgwire's in `icegres serve`) and authentication timeouts

    async def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in a worker thread behind the query limiter; cancellable."""
        ...


class QueryPort(Protocol):
    """The query side of the service, as the write handlers use it (a write prepared as a
    query runs there; a query inside a transaction reads the transaction's view)."""

    server: ServerPort
    database: str
    results: Bounded[bytes, Result]

    async def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def prepared(self, session: Session, handle: bytes) -> Prepared: ...

    async def start_query(self, session: Session, stmt: Statement, params: list[Params] | None,
                          txn: TxnState | None = None) -> Result: ...

    async def describe_query(self, session: Session, stmt: Statement, txn: TxnState | None = None,
                             fresh: bool = True) -> tuple[pa.Schema, pa.Schema]: ...
