"""Server-side state of Flight SQL clients: bearer tokens, sessions, prepared statements, results.

gRPC has no connection-level session, so a session is named by what the client sends on every
call: its bearer token (after a Handshake or with a header-only token), else the HTTP/2 peer
address (one ADBC connection is one gRPC channel). Everything here is bounded: a full table
forgets its least recently used entry, so a client that never closes anything costs a fixed
amount of memory.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pyarrow as pa

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext
    from icegres.engine.row_source import RowSource
    from icegres.engine.txblock_driver import TxBlock
    from icegres.engine.txn import TxnState
    from icegres.protocol.flightsql.bindings import Params
    from icegres.sql.statement import Statement

TOKENS_MAX = 4096
SESSIONS_MAX = 1024
PREPARED_MAX = 256  # per session
RESULTS_MAX = 64  # started results awaiting their DoGet, server-wide
TRANSACTIONS_MAX = 16  # open transactions per session

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """A dict that forgets its least recently used entry beyond `limit` (thread-safe)."""

    def __init__(self, limit: int, on_evict: Any = None) -> None:
        self.limit = limit
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self._on_evict = on_evict

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        evicted = []
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.limit:
                evicted.append(self._items.popitem(last=False)[1])
        if self._on_evict is not None:
            for item in evicted:
                self._on_evict(item)

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._items.pop(key, None)

    def values(self) -> list[V]:
        with self._lock:
            return list(self._items.values())

    def __len__(self) -> int:
        return len(self._items)


def new_handle() -> bytes:
    return secrets.token_bytes(16)


@dataclass
class Prepared:
    """A prepared statement: the statement its text is (classified once, at prepare time), the
    schemas reported then, and the parameter rows bound since."""

    handle: bytes
    stmt: Statement
    dataset_schema: pa.Schema
    parameter_schema: pa.Schema
    params: list[Params] | None = None  # the rows the last DoPut bound (`bindings.py`); None: none
    transaction_id: bytes | None = None  # the transaction it was prepared in, if any
    # The query as started at prepare time, for the GetFlightInfo that follows (taken by it).
    speculation: Speculation | None = None


@dataclass
class Speculation:
    """A parameterless query started by CreatePreparedStatement.

    ADBC's `cursor.execute` prepares and sends GetFlightInfo straight after, so the query starts
    at prepare time (one plan instead of describe + plan) and its first message is pulled while
    the client turns around. GetFlightInfo takes it only if the statement would read the same
    thing now: the session's settings are still `settings`, and in autocommit the catalog's
    change token is still `token` (read before the start refreshed, so no commit finished
    since), inside a transaction it is the same open transaction at version `txn_version`.
    Otherwise it is discarded and the query runs afresh, as it would have without it.
    """

    token: int
    settings: dict[str, Any]
    txn_ident: bytes | None  # the transaction it started in (None: autocommit) ...
    txn_version: int | None  # ... and that transaction's version after the start pinned
    handle: bytes  # the Result's, in the service's results once pulled
    schema: pa.Schema  # the wire schema
    pulled: Any  # asyncio.Future[Result]: the first message pulled, the Result registered
    stop: threading.Event  # set when discarded: the pull stops at its next batch


@dataclass
class Result:
    """A query started by GetFlightInfo, waiting for its DoGet (or re-run by a second DoGet)."""

    handle: bytes
    session_key: str
    stmt: Statement
    params: list[Params] | None
    schema: pa.Schema  # the wire schema: FlightInfo's and the stream's
    source: RowSource | None  # the running stream, taken by the first DoGet
    first: list[bytes]  # FlightData messages already pulled from `source`
    exhausted: bool
    rows: int  # rows in `first`
    txn: TxnState | None = None  # the transaction the query reads in (a re-run reads there too)
    awaiting_doget: bool = False  # a FlightInfo gave out its ticket, no DoGet asked yet (drain.py)

    def close(self) -> None:
        self.source = None
        self.first = []


SAVEPOINTS_MAX = 1024  # open savepoints per transaction


@dataclass
class FlightTxn:
    """A transaction opened by BeginTransaction: its block, the transaction block machine pgwire
    runs too (after a failed statement, as in PostgreSQL, it only rolls back, to its start or to
    a savepoint; its savepoints are named by their ids in hex), and the engine transaction the
    block started (kept after the block ends, for a statement still running in it)."""

    ident: bytes
    block: TxBlock
    state: TxnState

    @property
    def failed(self) -> bool:
        return self.block.status == "E"

    def holds_savepoint(self, ident: bytes) -> bool:
        return savepoint_name(ident) in self.block.state.savepoints


def savepoint_name(ident: bytes) -> str:
    """A Flight SQL savepoint's name in its block: its id, which is unique."""
    return ident.hex()


@dataclass
class Session:
    key: str
    user: str
    qctx: QueryContext
    catalog: str
    # One statement at a time touches a session's QueryContext (plans, routes, settings); the
    # streams it started are read without it.
    lock: threading.Lock = field(default_factory=threading.Lock)
    prepared: Bounded[bytes, Prepared] = field(default_factory=lambda: Bounded(PREPARED_MAX))
    transactions: Bounded[bytes, FlightTxn] = field(default_factory=lambda: Bounded(TRANSACTIONS_MAX))
    # The ADBC driver keeps a cursor's prepared statement across commit()/rollback() and runs it
    # again with the transaction it was prepared in: an ended transaction's id then means the
    # session's current one (the driver begins the next at once), or autocommit if none is open.
    current_txn: bytes | None = None
    ended_txns: Bounded[bytes, bool] = field(default_factory=lambda: Bounded(PREPARED_MAX))

    @property
    def schema(self) -> str:
        """The first schema on search_path that exists (where unqualified names resolve)."""
        for name in self.qctx.env.search_path:
            if self.qctx.engine.has_schema(name):
                return name
        return "public"

    def set_schema(self, name: str) -> None:
        self.qctx.env.settings["search_path"] = '"' + name.replace('"', '""') + '"'
        self.qctx.forget_routes()
