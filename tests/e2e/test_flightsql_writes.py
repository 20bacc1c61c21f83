"""Writes over Arrow Flight SQL with the real ADBC driver (adbc_driver_flightsql.dbapi, Go inside).

One `icegres serve --flight-port` process serves both protocols over one engine, so every write
made over Flight is checked over pgwire (psycopg) and vice versa, and pyiceberg reads the catalog
to count the commits a write made.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import psycopg.errors
import pyarrow as pa
import pytest

from tests.e2e.test_flightsql import flight_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CONNECT_TIMEOUT_S = 10


@dataclass
class Both:
    """One server, two protocols, and pyiceberg on the same catalog."""

    uri: str
    pg_port: int
    data_dir: Path
    log_path: Path
    catalog_properties: dict[str, str] | None = None  # None: the embedded SQLite catalog
    _catalog: Any = field(default=None, repr=False)

    def pg(self) -> psycopg.Connection:
        return psycopg.connect(f"host=127.0.0.1 port={self.pg_port} dbname=icegres user=icegres",
                               autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    def flight(self, **kwargs: Any) -> adbc.Connection:
        return adbc.connect(self.uri, **kwargs)

    def snapshots(self, ns: str, name: str) -> int:
        from pyiceberg.catalog import load_catalog

        if self._catalog is None and self.catalog_properties is not None:
            self._catalog = load_catalog("check", **self.catalog_properties)
        if self._catalog is None:
            self._catalog = load_catalog("icegres", type="sql",
                                         uri=f"sqlite:///{self.data_dir.resolve() / 'catalog.db'}",
                                         warehouse=(self.data_dir.resolve() / "warehouse").as_uri())
        return len(self._catalog.load_table((ns, name)).metadata.snapshots)


@pytest.fixture(scope="module", params=["embedded", "seaweedfs"])
def both(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    """Embedded (SQLite catalog, local files), and SeaweedFS (its REST catalog with SigV4, S3)."""
    data_dir = tmp_path_factory.mktemp("flightwrites") / "data"
    data_dir.mkdir()
    env, properties = None, None
    if request.param == "seaweedfs":
        stack = request.getfixturevalue("stack")
        env, properties = stack.env(), stack.pyiceberg_properties()
    with flight_server(data_dir, command="serve", env=env) as (uri, _, log_path, pg_port):
        yield Both(uri, pg_port, data_dir, log_path, properties)


@pytest.fixture
def ns(both: Both) -> str:
    name = f"fw_{uuid.uuid4().hex[:10]}"
    with both.pg() as pg:
        pg.execute(f"create schema {name}")
    return name


def rows(both: Both, sql: str) -> list[tuple[Any, ...]]:
    with both.pg() as pg:
        return pg.execute(sql).fetchall()


# --- DML ----------------------------------------------------------------------------------------

def test_execute_dml_reports_rowcount_and_pgwire_sees_it(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"create table {ns}.t (id bigint not null, name text)")
        cur.execute(f"insert into {ns}.t values (1, 'a'), (2, 'b'), (3, 'c')")
        assert cur.rowcount == 3
        assert rows(both, f"select id, name from {ns}.t order by id") == [(1, "a"), (2, "b"), (3, "c")]
        cur.execute(f"update {ns}.t set name = 'z' where id >= 2")
        assert cur.rowcount == 2
        cur.execute(f"delete from {ns}.t where id = 1")
        assert cur.rowcount == 1
        cur.execute(f"insert into {ns}.t values (4, 'd') returning id, upper(name) as up")
        assert cur.fetchall() == [(4, "D")]
        assert cur.rowcount == 1
    assert rows(both, f"select id, name from {ns}.t order by id") == [(2, "z"), (3, "z"), (4, "d")]


def test_execute_update_and_script(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"create table {ns}.t (id bigint, v bigint)")
        stmt = cur.adbc_statement
        stmt.set_sql_query(f"insert into {ns}.t values (1, 10), (2, 20)")
        assert stmt.execute_update() == 2  # DoPut(CommandStatementUpdate), descriptor only
        stmt.set_sql_query(f"select * from {ns}.t")
        assert stmt.execute_update() == 2  # a query as an update: its row count, as "SELECT n"
        before = both.snapshots(ns, "t")
        # A script is one implicit transaction: both statements land in one commit.
        cur.executescript(f"insert into {ns}.t values (3, 30); update {ns}.t set v = v + 1 where id = 1")
        assert both.snapshots(ns, "t") == before + 1
        # A failing script leaves nothing behind.
        with pytest.raises(adbc_driver_manager.Error, match="42P01"):
            cur.executescript(f"insert into {ns}.t values (9, 90); insert into {ns}.nope values (1)")
    assert rows(both, f"select id, v from {ns}.t order by id") == [(1, 11), (2, 20), (3, 30)]


def test_parameters_and_executemany_are_one_commit(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"create table {ns}.t (id bigint, name text, score double precision)")
        cur.execute(f"insert into {ns}.t values ($1, $2, $3)", parameters=(1, "one", 1.5))
        assert cur.rowcount == 1
        before = both.snapshots(ns, "t")
        cur.executemany(f"insert into {ns}.t values ($1, $2, $3)",
                        [(i, f"n{i}", i / 2) for i in range(2, 202)])
        assert cur.rowcount == 200
        assert both.snapshots(ns, "t") == before + 1  # the whole batch is one Iceberg commit
        cur.executemany(f"update {ns}.t set name = $1 where id = $2", [("even", 2), ("four", 4)])
        assert cur.rowcount == 2  # once per row, in one implicit transaction
        cur.executemany(f"insert into {ns}.t (score, id) values ($2, $1)", [(300, 0.25), (301, None)])
        assert cur.rowcount == 2
    assert rows(both, f"select count(*), sum(id) from {ns}.t where id < 300") == [(201, sum(range(1, 202)))]
    assert rows(both, f"select id, name, score from {ns}.t where id >= 300 order by id") == [
        (300, None, 0.25), (301, None, None)]
    assert rows(both, f"select name from {ns}.t where id in (2, 4) order by id") == [("even",), ("four",)]


def test_errors_map_to_status_with_sqlstate(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"create table {ns}.k (id bigint not null, primary key (id))")
        cur.execute(f"insert into {ns}.k values (1)")
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.execute(f"insert into {ns}.k values (1)")
        assert "ALREADY_EXISTS" in str(exc.value) and "23505" in str(exc.value)
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.executemany(f"insert into {ns}.k values ($1)", [(5,), (6,), (5,)])
        assert "ALREADY_EXISTS" in str(exc.value) and "23505" in str(exc.value)
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.execute(f"insert into {ns}.k values (null)")
        assert "23502" in str(exc.value)
        with pytest.raises(adbc_driver_manager.NotSupportedError) as exc:
            cur.execute("begin")
        assert "0A000" in str(exc.value) and "BeginTransaction" in str(exc.value)
        cur.execute(f"select count(*) from {ns}.k")
        assert cur.fetchall() == [(1,)]


# --- transactions -------------------------------------------------------------------------------

def test_commit_and_rollback_with_autocommit_off(both, ns):
    with both.pg() as pg:
        pg.execute(f"create table {ns}.t (id bigint, v bigint)")
        pg.execute(f"insert into {ns}.t values (1, 10)")
    c = both.flight()  # autocommit off: the driver sends BeginTransaction at once
    try:
        with c.cursor() as cur:
            cur.execute(f"insert into {ns}.t values (2, 20)")
            cur.execute(f"select count(*) from {ns}.t")
            assert cur.fetchall() == [(2,)]  # its own staged write
            assert rows(both, f"select count(*) from {ns}.t") == [(1,)]  # nobody else's yet
            c.rollback()
            cur.execute(f"select count(*) from {ns}.t")
            assert cur.fetchall() == [(1,)]
            cur.executemany(f"insert into {ns}.t values ($1, $2)", [(3, 30), (4, 40)])
            cur.execute(f"update {ns}.t set v = 11 where id = 1")
            assert rows(both, f"select count(*) from {ns}.t") == [(1,)]
            c.commit()
            assert rows(both, f"select id, v from {ns}.t order by id") == [(1, 11), (3, 30), (4, 40)]
            # Snapshot isolation: a transaction keeps reading the snapshot it first saw.
            cur.execute(f"select count(*) from {ns}.t")
            assert cur.fetchall() == [(3,)]
            with both.pg() as pg:
                pg.execute(f"insert into {ns}.t values (5, 50)")
            cur.execute(f"select count(*) from {ns}.t")
            assert cur.fetchall() == [(3,)]
            c.commit()
            cur.execute(f"select count(*) from {ns}.t")
            assert cur.fetchall() == [(4,)]
            # A failed statement aborts the transaction (25P02) until it ends, as in PostgreSQL.
            with pytest.raises(adbc_driver_manager.Error, match="42P01"):
                cur.execute(f"insert into {ns}.nope values (1)")
            with pytest.raises(adbc_driver_manager.Error, match="25P02"):
                cur.execute(f"insert into {ns}.t values (6, 60)")
            c.rollback()
            cur.execute(f"select count(*) from {ns}.t")
            assert cur.fetchall() == [(4,)]
    finally:
        c.close()


def test_get_info_reports_transactions(both):
    with both.flight(autocommit=True) as c:
        info = c.adbc_get_info()
    assert info["vendor_name"] == "icegres"
    import pyarrow.flight

    client = pyarrow.flight.FlightClient(both.uri)
    try:
        from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
        from icegres.protocol.flightsql import messages as M

        cmd = M.pack_any(sql.CommandGetSqlInfo(info=[3, 8, 563, 573]))
        flight_info = client.get_flight_info(pyarrow.flight.FlightDescriptor.for_command(cmd))
        table = client.do_get(flight_info.endpoints[0].ticket).read_all()
    finally:
        client.close()
    values = {r["info_name"]: r["value"] for r in table.to_pylist()}
    # 8 = FLIGHT_SQL_SERVER_TRANSACTION: 2, transactions and savepoints (test_flightsql_savepoints.py).
    assert values == {3: False, 8: 2, 563: True, 573: True}


def test_one_conflict_between_protocols_is_one_40001(both, ns):
    with both.pg() as pg:
        pg.execute(f"create table {ns}.t (id bigint, v bigint)")
        pg.execute(f"insert into {ns}.t values (1, 0), (2, 0)")
    # Flight commits first: the pgwire transaction loses.
    c = both.flight()
    try:
        with c.cursor() as cur, both.pg() as pg:
            cur.execute(f"update {ns}.t set v = 1 where id = 1")
            pg.execute("begin")
            pg.execute(f"update {ns}.t set v = 2 where id = 1")
            c.commit()
            with pytest.raises(psycopg.errors.SerializationFailure):
                pg.execute("commit")
    finally:
        c.close()
    assert rows(both, f"select v from {ns}.t where id = 1") == [(1,)]
    # pgwire commits first: the Flight transaction loses, with ABORTED and 40001.
    c = both.flight()
    failures = []
    try:
        with c.cursor() as cur, both.pg() as pg:
            cur.execute(f"update {ns}.t set v = 3 where id = 2")
            with pg.transaction():
                pg.execute(f"update {ns}.t set v = 4 where id = 2")
            with pytest.raises(adbc_driver_manager.Error) as exc:
                c.commit()
            failures.append(str(exc.value))
    finally:
        c.close()
    assert len(failures) == 1 and "40001" in failures[0] and "Aborted" in failures[0]
    assert rows(both, f"select id, v from {ns}.t order by id") == [(1, 1), (2, 4)]


def test_visibility_across_protocols_on_the_next_statement(both, ns):
    with both.flight(autocommit=True) as c, c.cursor() as cur, both.pg() as pg:
        cur.adbc_ingest("t", pa.table({"id": [1, 2], "v": ["a", "b"]}), mode="create", db_schema_name=ns)
        assert pg.execute(f"select count(*) from {ns}.t").fetchone() == (2,)
        pg.execute(f"insert into {ns}.t values (3, 'c')")
        cur.execute(f"select count(*) from {ns}.t")
        assert cur.fetchall() == [(3,)]
        cur.execute(f"delete from {ns}.t where id = 1")
        assert pg.execute(f"select id from {ns}.t order by id").fetchall() == [(2,), (3,)]


# --- bulk ingest --------------------------------------------------------------------------------

def test_ingest_in_every_mode(both, ns):
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        assert cur.adbc_ingest("t", data, mode="create", db_schema_name=ns) == 3
        assert both.snapshots(ns, "t") == 1  # one stream, one commit
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.adbc_ingest("t", data, mode="create", db_schema_name=ns)
        assert "ALREADY_EXISTS" in str(exc.value) and "42P07" in str(exc.value)
        assert cur.adbc_ingest("t", data.slice(0, 2), mode="append", db_schema_name=ns) == 2
        assert both.snapshots(ns, "t") == 2
        assert cur.adbc_ingest("t", data.slice(2), mode="create_append", db_schema_name=ns) == 1
        assert rows(both, f"select count(*) from {ns}.t") == [(6,)]
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.adbc_ingest("missing", data, mode="append", db_schema_name=ns)
        assert "NOT_FOUND" in str(exc.value) and "42P01" in str(exc.value)
        assert cur.adbc_ingest("fresh", data, mode="create_append", db_schema_name=ns) == 3
        other = pa.table({"x": pa.array([1.5], pa.float64())})
        assert cur.adbc_ingest("t", other, mode="replace", db_schema_name=ns) == 1
    assert rows(both, f"select * from {ns}.t") == [(1.5,)]
    assert rows(both, f"select id, name from {ns}.fresh order by id") == [(1, "a"), (2, "b"), (3, "c")]


def test_ingest_empty_streams(both, ns):
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    empty = pa.RecordBatchReader.from_batches(schema, [pa.record_batch([[], []], schema=schema)])
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        # The schema travels with one empty batch: create makes an empty table.
        assert cur.adbc_ingest("e", empty, mode="create", db_schema_name=ns) == 0
        cur.execute(f"select * from {ns}.e")
        table = cur.fetch_arrow_table()
        assert table.num_rows == 0 and table.column_names == ["id", "name"]
        # An empty pyarrow Table makes the driver send no message at all: refused, clearly.
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.adbc_ingest("e2", schema.empty_table(), mode="create", db_schema_name=ns)
        assert "INVALID_ARGUMENT" in str(exc.value) and "empty batch" in str(exc.value)
    assert rows(both, f"select count(*) from {ns}.e") == [(0,)]


def test_ingest_schema_mismatch_and_refusals(both, ns):
    data = pa.table({"id": pa.array([1], pa.int64()), "name": ["a"]})
    with both.flight(autocommit=True) as c, c.cursor() as cur:
        cur.adbc_ingest("t", data, mode="create", db_schema_name=ns)
        wrong = pa.table({"id": pa.array([2], pa.int64()), "colour": ["red"]})
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.adbc_ingest("t", wrong, mode="append", db_schema_name=ns)
        text = str(exc.value)
        assert "INVALID_ARGUMENT" in text and "42804" in text and "colour" in text
        badtype = pa.table({"id": ["not a number"], "name": ["b"]})
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.adbc_ingest("t", badtype, mode="append", db_schema_name=ns)
        assert "INVALID_ARGUMENT" in str(exc.value) and "22P02" in str(exc.value)
        with pytest.raises(adbc_driver_manager.NotSupportedError) as exc:
            cur.adbc_ingest("tmp", data, mode="create", db_schema_name=ns, temporary=True)
        assert "temporary" in str(exc.value) and "0A000" in str(exc.value)
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.adbc_ingest("t", data, mode="append", catalog_name="elsewhere", db_schema_name=ns)
        assert "3D000" in str(exc.value)
        # A subset of the columns appends; the others are NULL. (The driver keeps a statement's
        # catalog option, so it is named again: this server's own.)
        assert cur.adbc_ingest("t", pa.table({"id": pa.array([3], pa.int64())}), mode="append",
                               catalog_name="icegres", db_schema_name=ns) == 1
    assert rows(both, f"select id, name from {ns}.t order by id") == [(1, "a"), (3, None)]
    assert "Traceback" not in both.log_path.read_text(errors="replace")


# --- with the write buffer on -------------------------------------------------------------------

def test_writes_through_the_write_buffer(tmp_path_factory):
    # Autocommit INSERTs take the same buffered path as pgwire's; transactions, executemany and
    # ingest stay synchronous and see the buffered rows (settled into the lake first).
    data_dir = tmp_path_factory.mktemp("flightbuffer") / "data"
    data_dir.mkdir()
    with flight_server(data_dir, "--write-buffer-ms", "50", command="serve") as (uri, _, log, pg_port):
        both = Both(uri, pg_port, data_dir, log)
        with both.flight(autocommit=True) as c, c.cursor() as cur, both.pg() as pg:
            cur.execute("create table public.b (id bigint, v text)")
            cur.execute("insert into public.b values (1, 'a'), (2, 'b')")
            assert cur.rowcount == 2
            assert pg.execute("select count(*) from public.b").fetchone() == (2,)
            pg.execute("insert into public.b values (3, 'c')")
            cur.execute("select count(*) from public.b")
            assert cur.fetchall() == [(3,)]
            cur.executemany("insert into public.b values ($1, $2)", [(4, "d"), (5, "e")])
            cur.adbc_ingest("b", pa.table({"id": pa.array([6], pa.int64()), "v": ["f"]}), mode="append")
            cur.execute("delete from public.b where id = 1")
            assert cur.rowcount == 1
        t = both.flight()
        try:
            with t.cursor() as cur:
                cur.execute("update public.b set v = 'z' where id = 2")
                t.commit()
        finally:
            t.close()
        assert rows(both, "select id, v from public.b order by id") == [
            (2, "z"), (3, "c"), (4, "d"), (5, "e"), (6, "f")]
        assert "Traceback" not in log.read_text(errors="replace")
