"""icegres over pgwire, icegres's engine in-process, and DuckDB + iceberg, on the same tables."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import Peer


def arrow_rows(batches: list[Any]) -> list[tuple]:
    rows: list[tuple] = []
    for b in batches:
        rows.extend(zip(*[c.to_pylist() for c in b.columns], strict=True))
    return rows


class PgwirePeer(Peer):
    """psycopg 3 with its defaults, one autocommit connection: a simple Query for a new text, a
    prepared statement after psycopg has seen a text 5 times."""

    def __init__(self, conninfo: str, name: str) -> None:
        import psycopg

        self.name = name
        self.conn = psycopg.connect(conninfo, autocommit=True)

    def run(self, sql: str) -> list[tuple]:
        return self.conn.execute(sql).fetchall()

    def close(self) -> None:
        self.conn.close()


class InProcessPeer(Peer):
    """icegres's engine in this process, no wire: `ctx.sql(q).collect()` (Arrow batches)."""

    def __init__(self, backend: Any, name: str = "in-process") -> None:
        self.name = name
        self.engine = inprocess_engine(backend)
        self.ctx = self.engine.new_context("public")

    def run(self, sql: str) -> list[tuple]:
        return arrow_rows(self.ctx.sql(sql).collect())


class DuckPeer(Peer):
    """DuckDB 1.5.5 in process, `iceberg_scan('<current metadata file>')` behind views named like
    icegres's tables (a view inlines, so filters push into the scan). Opened once, as a server
    would; extensions installed offline from their wheels."""

    def __init__(self, locations: dict[str, str], name: str = "duckdb",
                 extensions: tuple[str, ...] = ("avro", "iceberg"), setup: tuple[str, ...] = ()) -> None:
        from bench.datasets import duck_connect

        self.name = name
        self.con = duck_connect(extensions)
        for stmt in setup:
            self.con.execute(stmt)
        for schema in sorted({k.split(".", 1)[0] for k in locations}):
            self.con.execute(f"create schema if not exists {schema}")
        for qualified, loc in sorted(locations.items()):
            self.con.execute(f"create view {qualified} as select * from iceberg_scan('{loc}')")

    def run(self, sql: str) -> list[tuple]:
        # Arrow, not fetchall(): DuckDB's Python rows need pytz for timestamptz.
        return arrow_rows(self.con.execute(sql).to_arrow_table().to_batches())

    def close(self) -> None:
        self.con.close()


def inprocess_engine(backend: Any) -> Any:
    """icegres's engine in this process, as `icegres serve` has it for `backend`: on an object
    store with a file cache (a directory of its own, the server's default size), warmed — every
    table mounted on local copies of its files, as the server's are once copied."""
    from bench.pgwire_read import EMBEDDED
    from icegres.config import Settings
    from icegres.engine.file_cache import FileCache
    from icegres.engine.lake import Engine

    cache = None
    if backend.name != EMBEDDED:
        cache = FileCache(backend.data_dir / "file-cache-inprocess", Settings.file_cache_mb << 20)
    engine = Engine(backend.lakehouse(), file_cache=cache)
    engine.refresh()
    if cache is not None:
        cache.wait_idle(600)
        engine.refresh()
    return engine


def embedded_backend(lake: Path) -> Any:
    from bench.pgwire_read import EMBEDDED, Backend

    return Backend(EMBEDDED, lake)


@contextlib.contextmanager
def fresh_backend(name: str, tmp: Path) -> Iterator[Any]:
    """An empty lakehouse under `tmp`: the embedded one (SQLite catalog, local files), or a SeaweedFS
    stack started in `tmp` (infra/up.sh, stopped on exit whatever happens), for suites that build
    their own tables and need none of the seeded ones."""
    from bench.pgwire_read import EMBEDDED, SEAWEEDFS, Backend

    if name == EMBEDDED:
        yield Backend(EMBEDDED, tmp / "lake")
        return
    from tests.support.stack import running_stack

    stack_dir = tmp / "stack"
    stack_dir.mkdir(parents=True, exist_ok=True)
    # The stack's PostgreSQL runs as another user and must reach its state dir.
    tmp.chmod(0o711)
    stack_dir.chmod(0o711)
    print(f"starting a fresh SeaweedFS stack in {stack_dir} ...", flush=True)
    with running_stack(stack_dir) as stack:
        yield Backend(SEAWEEDFS, stack_dir / "icegres", stack.env(), stack)


def metadata_counts(conn: Any, table: str, kinds: tuple[str, ...] = ("snapshots", "manifests")) -> dict[str, int]:
    """Rows of each of `table`'s metadata tables (`ns."t$snapshots"`, `$manifests`, `$files`...) as
    the server sees its head now, through `conn` (psycopg)."""
    schema, name = table.split(".")
    return {kind: int(conn.execute(f'select count(*) from {schema}."{name}${kind}"').fetchone()[0])
            for kind in kinds}
