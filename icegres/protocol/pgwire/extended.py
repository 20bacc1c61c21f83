"""The extended query protocol's statements and portals, what Parse learns of a query, and how a
Parse of a text the session described before is answered without waiting for a worker thread.

pgbench -M extended, pgjdbc (before a statement's 5th execution) and psycopg (before its 6th)
send each execution as an unnamed `Parse Bind Describe Execute Sync`. Parse must know the
parameter types (Bind decodes the values by them) and the result columns (Describe sends them),
and only the engine knows those, after the freshness check: a worker-thread hop of its own before
the Execute's, which made such a point lookup cost about twice a simple query (issue 25).

So when Parse names a text (and client-given parameter types) that the session described before,
outside a transaction block, it is answered *provisionally* from that description: ParseComplete,
and then what Bind and Describe answer, are queued but not sent (`Provisional`). The description
is checked against the lake, exactly as Parse would have described it, before any of that leaves
the session: by the Execute's own worker-thread job, before it plans (no hop of its own), or else
before the first other message or flush (one hop, as Parse had). If the lake now describes the
statement otherwise (DDL landed in between) or not at all, what was queued is dropped, and Parse,
Bind and Describe are answered again as they would have been. The client only ever receives
answers from a description the lake held while the session was answering them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.engine.params import cast_type_oids
from icegres.engine.plan_cache import Bounded
from icegres.engine.row_source import RowSource
from icegres.pg import errors as E
from icegres.pg.errors import PgError
from icegres.pg.params import decode_param
from icegres.pg.types import pg_type_for_arrow
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.results import expand_formats, row_description
from icegres.sql.statement import Kind, Statement

if TYPE_CHECKING:
    from icegres.engine.query import QueryContext
    from icegres.pg.clock import TextSettings

DESCRIBED_MAX = 64  # texts a session remembers the description of
TEXT_OID = 25  # PostgreSQL resolves a parameter of unknown type to text


@dataclass
class Prepared:
    sql: str
    statement: Statement
    param_oids: list[int]  # final: client-given, else a cast's, else inferred, else text
    schema: pa.Schema | None = None  # result columns, None for commands without rows
    # A big statement's big literals, as the parameters after its own that its compaction made
    # of them (statements.py): bound at every execution, never described to the client.
    big: dict[str, Any] | None = None


@dataclass
class Portal:
    prepared: Prepared
    params: list[Any]
    formats: list[int] | None  # None until the result schema is known
    result_formats: tuple[int, ...]
    source: RowSource | None = None
    tag_rows: int = 0
    finished: bool = False

    def values(self) -> dict[str, Any] | None:
        """The statement's parameter values by name ("1" for $1), its big literals' too."""
        values = {str(i + 1): v for i, v in enumerate(self.params)}
        return {**values, **self.prepared.big} if self.prepared.big else values or None


def bind(prepared: Prepared, msg: m.Bind, text: TextSettings) -> Portal:
    """The portal a Bind makes of `prepared`: its values decoded by the statement's parameter
    types, its result formats checked against the statement's columns."""
    nparams = len(prepared.param_oids)
    if len(msg.params) != nparams:
        raise PgError(
            E.PROTOCOL_VIOLATION,
            f"bind message supplies {len(msg.params)} parameters, but prepared statement "
            f'"{msg.statement}" requires {nparams}',
        )
    pformats = expand_formats(msg.param_formats, nparams) if nparams else []
    values = [
        decode_param(raw, oid, fmt, settings=text)
        for raw, oid, fmt in zip(msg.params, prepared.param_oids, pformats, strict=True)
    ]
    formats = None
    if prepared.schema is not None:
        formats = expand_formats(msg.result_formats, len(prepared.schema))
    return Portal(prepared, values, formats, msg.result_formats)


def rows_description(prepared: Prepared, formats: list[int] | None) -> bytes:
    """What Describe says of the rows of a statement (formats None: all text, as for a
    statement) or of a portal: RowDescription, or NoData for a command without rows."""
    schema = prepared.schema
    if schema is not None:
        return row_description(schema, formats or [0] * len(schema))
    if prepared.statement.kind is Kind.SHOW:
        return show_description(prepared.statement)
    return m.NO_DATA


def show_description(stmt: Statement) -> bytes:
    return m.row_description([m.FieldDescription(stmt.name or "setting", 25, -1)])


@dataclass(frozen=True)
class Description:
    """What Parse answers about a statement: its parameters' final types and its result columns."""

    param_oids: tuple[int, ...]
    schema: pa.Schema | None

    def same_as(self, other: Description) -> bool:
        """Whether the two answer a client alike (ParameterDescription, RowDescription, how Bind
        decodes each value)."""
        if self.param_oids != other.param_oids:
            return False
        if self.schema is None or other.schema is None:
            return self.schema is other.schema
        return self.schema.equals(other.schema, check_metadata=True)


PARAMS_MAX = 65535  # Bind's and ParameterDescription's counts are unsigned 16-bit


def param_oids(stmt: Statement, given: tuple[int, ...] | list[int], inferred: dict[int, pa.DataType],
               big: dict[str, Any] | None = None) -> tuple[int, ...]:
    """Each parameter's type as ParameterDescription gives it: the client's, else the type a
    `$n::type` cast names, else what the engine inferred, else text. The parameters `big` names
    are not the client's: they come after its own and are not counted."""
    own = min(map(int, big)) - 1 if big else stmt.max_param
    count = max([len(given), *(k for k in inferred if k <= own)], default=0)
    count = max(count, own)
    if count > PARAMS_MAX:
        # Bind and ParameterDescription count in 16 bits, so no client could ever supply such a
        # parameter. PostgreSQL 15 accepts the Parse, then wraps the count in ParameterDescription
        # (65,536 is sent as 0) and refuses every Bind (08P01); its own word for a parameter that
        # cannot exist, here and now, is clearer.
        raise PgError(E.UNDEFINED_PARAMETER, f"there is no parameter ${count}")
    casts = cast_type_oids(stmt.sql)
    oids = []
    for i in range(count):
        client = given[i] if i < len(given) else 0
        if client:
            oids.append(client)
        elif i + 1 in casts:
            oids.append(casts[i + 1])
        elif i + 1 in inferred:
            oids.append(pg_type_for_arrow(inferred[i + 1]).oid)
        else:
            oids.append(TEXT_OID)
    return tuple(oids)


def describe_query(qctx: QueryContext, stmt: Statement, given: tuple[int, ...],
                   big: dict[str, Any] | None = None) -> Description:
    """What Parse of a query answers, from the lake as it is now (`big`: its big literals'
    values, Prepared.big). Blocking: a worker thread."""
    schema, inferred = qctx.describe(stmt, params=big)
    return Description(param_oids(stmt, given, inferred, big), schema)


@dataclass
class Provisional:
    """An unnamed statement answered at Parse from an earlier description, not yet checked.

    `out_at` is where its ParseComplete starts in the session's output buffer: nothing from there
    on has been sent. `before` is the unnamed statement and portal it replaced, `messages` the
    Parse and the Binds and Describes answered on its description since, in order: what is put
    back and answered again if the description no longer holds."""

    prepared: Prepared
    given: tuple[int, ...]
    described: Description
    out_at: int
    before: tuple[Prepared | None, Portal | None]
    messages: list[m.FrontendMessage] = field(default_factory=list)
    held: bool = False  # checked, and the lake describes it so (set by whichever thread checked)

    def answers(self, msg: m.FrontendMessage, portals: dict[str, Portal]) -> bool:
        """Whether `msg` may be answered before the check: a Bind of the unnamed statement to the
        unnamed portal, a Describe of either (all put back and answered again if the check
        fails), or the Execute of that portal (whose job checks first). Anything else comes after
        the check."""
        if isinstance(msg, m.Bind):
            return msg.statement == "" and msg.portal == ""
        if isinstance(msg, m.Describe):
            return msg.name == ""
        if isinstance(msg, m.Execute):
            portal = portals.get(msg.portal)
            return portal is not None and portal.prepared is self.prepared
        return False

    def check(self, qctx: QueryContext) -> bool:
        """Describe the statement afresh; whether that is the description it was answered with.
        Blocking: a worker thread. A statement that no longer describes at all does not hold:
        answered again, its Parse reports why."""
        try:
            fresh = describe_query(qctx, self.prepared.statement, self.given)
        except Exception:
            return False
        self.held = fresh.same_as(self.described)
        return self.held


class Descriptions:
    """A session's memory of what Parse described: (text, client-given parameter types) -> the
    classified statement and its description. Only ever a guess to answer from; `Provisional`
    checks it."""

    def __init__(self) -> None:
        self._known: Bounded[tuple[str, tuple[int, ...]], tuple[Statement, Description]] = Bounded(DESCRIBED_MAX)

    def remember(self, sql: str, given: tuple[int, ...], stmt: Statement, described: Description) -> None:
        self._known.put((sql, given), (stmt, described))

    def recall(self, sql: str, given: tuple[int, ...]) -> tuple[Statement, Description] | None:
        key = (sql, given)
        known = self._known.get(key)
        if known is not None:
            self._known.touch(key)
        return known

    def forget(self, sql: str, given: tuple[int, ...]) -> None:
        self._known.pop((sql, given))

    def provisional(self, msg: m.Parse, out_at: int, before: tuple[Prepared | None, Portal | None]) -> Provisional | None:
        """`msg` answered from memory, or None: not remembered."""
        known = self.recall(msg.sql, msg.param_oids)
        if known is None:
            return None
        stmt, described = known
        prepared = Prepared(msg.sql, stmt, list(described.param_oids), described.schema)
        return Provisional(prepared, msg.param_oids, described, out_at, before, [msg])
