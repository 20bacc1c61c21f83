"""One statement through icegres's engine in-process and through a real PostgreSQL, rows as text."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa

Rows = list[tuple[str | None, ...]]


def engine_session(data_dir: Path) -> Any:
    """A QueryContext over a fresh embedded lake holding demo.t (id bigint: 1, 2)."""
    from icegres.engine.catalog import Lakehouse
    from icegres.engine.lake import Engine, SessionEnv
    from icegres.engine.query import open_session

    lake = Lakehouse.embedded(data_dir)
    lake.create_namespace_if_missing("demo")
    t = lake.catalog.create_table(("demo", "t"), schema=pa.schema([pa.field("id", pa.int64())]))
    t.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    engine = Engine(lake)
    engine.refresh()
    return open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))


def ours(qctx: Any, sql: str) -> Rows:
    from icegres.sql.statement import classify

    _, stream = qctx.start(classify(sql))
    rows: Rows = []
    for batch in stream:
        table = batch.to_pyarrow()
        rows.extend(tuple(None if v is None else str(v) for v in row.values()) for row in table.to_pylist())
    return rows


def theirs(pg: psycopg.Connection, sql: str) -> Rows:
    return [tuple(None if v is None else str(v) for v in row) for row in pg.execute(sql).fetchall()]


@contextmanager
def beside_postgres(data_dir: Path, postgres: Any) -> Iterator[list[str]]:
    """An icegres server over a fresh lake in `data_dir`, with the DSNs to compare it by:
    [the real PostgreSQL's, icegres's]."""
    from tests.support.icegres_server import running_icegres

    with running_icegres(data_dir) as icegres:
        yield [postgres.dsn(), icegres.dsn()]


def outcome(conn: psycopg.Connection, sql: str) -> tuple[Any, ...]:
    """What one statement did, as two servers are compared by: its tag and rows as text, or its
    SQLSTATE, message and DETAIL."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            rows = [tuple(None if v is None else str(v) for v in r) for r in cur.fetchall()] if cur.description else None
            return ("ok", cur.statusmessage, rows)
    except psycopg.Error as exc:
        return ("error", exc.sqlstate, exc.diag.message_primary, exc.diag.message_detail)
