"""Time travel, metadata tables, branches and tags (docs/time-travel.md), over pgwire (psycopg) and
Flight SQL (ADBC), checked against what pyiceberg and DuckDB read from the same lake."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.test_flightsql import flight_server
from tests.e2e.test_writes import _duckdb_scan

pytestmark = pytest.mark.e2e


@dataclass
class History:
    """demo.t's three snapshots: two rows, then a third, then a column and a fourth row."""

    first: int
    second: int
    third: int
    between: dt.datetime  # after the first commit, before the second (UTC)


@dataclass
class Server:
    dsn: str
    flight_uri: str
    data_dir: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("time_travel") / "data"
    with flight_server(data_dir, command="serve") as (uri, _, _, port):
        yield Server(f"host=127.0.0.1 port={port} dbname=icegres user=icegres", uri, data_dir)


@pytest.fixture(scope="module")
def history(server: Server) -> History:
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.execute("create schema demo")
        c.execute("create table demo.t (id bigint, v text)")
        c.execute("insert into demo.t values (1, 'a'), (2, 'b')")
        time.sleep(0.02)
        between = c.execute("select now()").fetchone()[0]
        time.sleep(0.02)
        c.execute("insert into demo.t values (3, 'c')")
        c.execute("alter table demo.t add column w int")
        c.execute("insert into demo.t values (4, 'd', 7)")
        ids = [r[0] for r in c.execute('select snapshot_id from demo."t$snapshots" order by committed_at')]
    assert len(ids) == 3
    return History(*ids, between=between.astimezone(dt.UTC))


@pytest.fixture
def conn(server: Server, history: History) -> Iterator[psycopg.Connection]:
    with psycopg.connect(server.dsn, autocommit=True) as c:
        yield c


def rows(c: psycopg.Connection, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    return c.execute(sql, params).fetchall()


def _pyiceberg_table(data_dir: Path, name: str) -> Any:
    from icegres.engine.catalog import Lakehouse

    return Lakehouse.embedded(data_dir).load_table("demo", name)


# --- reading the past --------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", [
    "demo.t for version as of {id}",
    "demo.t FOR SYSTEM_VERSION AS OF {id}",
    "demo.t as of {id}",
    'demo."t@{id}"',
    "demo.t for version as of '{id}'",
])
def test_every_version_spelling_reads_the_snapshot(conn, history, spelling):
    source = spelling.format(id=history.first)
    assert rows(conn, f"select * from {source} order by id") == [(1, "a"), (2, "b")]


@pytest.mark.parametrize("spelling", [
    "demo.t for system_time as of timestamptz '{ts}'",
    "demo.t for timestamp as of timestamptz '{ts}'",
    "demo.t as of timestamp '{ts}'",
])
def test_every_time_spelling_reads_the_snapshot_current_then(conn, history, spelling):
    conn.execute("set timezone = 'UTC'")
    ts = history.between.strftime("%Y-%m-%d %H:%M:%S.%f+00")
    assert rows(conn, f"select id from {spelling.format(ts=ts)} order by id") == [(1,), (2,)]


def test_a_time_without_zone_is_the_sessions_timezone(conn, history):
    conn.execute("set timezone = 'America/Lima'")  # UTC-5, no daylight saving
    local = history.between.astimezone(dt.timezone(dt.timedelta(hours=-5))).replace(tzinfo=None)
    assert rows(conn, f"select count(*) from demo.t for system_time as of timestamp '{local}'") == [(2,)]
    # The same wall-clock time read as UTC is five hours earlier: before the table existed.
    conn.execute("set timezone = 'UTC'")
    with pytest.raises(psycopg.errors.InvalidParameterValue) as failed:
        conn.execute(f"select count(*) from demo.t for system_time as of timestamp '{local}'")
    assert failed.value.sqlstate == "22023"
    assert "has no snapshot as of" in str(failed.value)
    assert "first snapshot was made at" in failed.value.diag.message_detail


def test_an_expression_gives_the_time(conn, history):
    assert rows(conn, "select count(*) from demo.t for system_time as of now()") == [(4,)]
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("select * from demo.t for timestamp as of now() - interval '1 day'")


def test_a_snapshot_reads_with_its_own_schema(conn, history):
    second = conn.execute(f"select * from demo.t for version as of {history.second} order by id")
    assert [d.name for d in second.description] == ["id", "v"]
    third = conn.execute(f"select * from demo.t for version as of {history.third} order by id")
    assert [d.name for d in third.description] == ["id", "v", "w"]
    assert third.fetchall() == [(1, "a", None), (2, "b", None), (3, "c", None), (4, "d", 7)]


def test_one_query_reads_a_table_at_two_points(conn, history):
    sql = (f"select now_.id, then_.v from demo.t now_ left join demo.t for version as of {history.first} then_ "
           "on now_.id = then_.id order by now_.id")
    assert rows(conn, sql) == [(1, "a"), (2, "b"), (3, None), (4, None)]
    sql = f"select t.id from demo.t as of {history.second} where t.id > 1 order by t.id"  # named as the table
    assert rows(conn, sql) == [(2,), (3,)]


@pytest.mark.parametrize("sql, sqlstate, message", [
    ("select * from demo.t for version as of 42", "42704", 'snapshot 42 of table "demo.t" does not exist'),
    ("select * from demo.t for version as of 'nope'", "42704", 'branch or tag "nope" of table "demo.t" does not exist'),
    ('select * from demo."t@nope"', "42704", 'branch or tag "nope" of table "demo.t" does not exist'),
    ("select * from demo.missing for version as of 1", "42P01", 'relation "demo.missing" does not exist'),
    ("select * from demo.t for system_time as of timestamptz '2001-01-01 00:00+00'", "22023",
     'table "demo.t" has no snapshot as of 2001-01-01 00:00:00.000+00'),
    ("select * from demo.t for system_time as of null::timestamptz", "22023", "AS OF value is NULL"),
    ("select * from demo.t for version as of 1.5", "42804", "takes a snapshot id or a branch or tag name"),
])
def test_what_cannot_be_read_is_an_error_never_empty(conn, sql, sqlstate, message):
    with pytest.raises(psycopg.Error) as failed:
        conn.execute(sql)
    assert failed.value.sqlstate == sqlstate
    assert message in str(failed.value)


def test_writes_and_copy_read_snapshots_as_sources(conn, server, history):
    then = f"demo.t for version as of {history.first}"
    conn.execute(f"create table demo.copied as select * from {then}")
    assert rows(conn, "select * from demo.copied order by id") == [(1, "a"), (2, "b")]
    conn.execute("create table demo.filled (id bigint, v text)")
    assert conn.execute(f"insert into demo.filled select * from {then}").statusmessage == "INSERT 0 2"
    with conn.cursor().copy(f"copy (select id from {then} order by id) to stdout") as copy:
        assert b"".join(bytes(chunk) for chunk in copy) == b"1\n2\n"
    plan = "\n".join(r[1] for r in rows(conn, f"explain select * from {then}"))
    assert "snap_demo_t" in plan
    with psycopg.connect(server.dsn) as block:  # inside a block, CREATE TABLE AS is the block's
        block.execute(f"create table demo.copied_in_block as select * from {then}")
        block.commit()
    assert rows(conn, "select count(*) from demo.copied_in_block") == [(2,)]


def test_views_over_snapshots_and_metadata_tables(conn, history):
    conn.execute(f"create view demo.t_then as select id, v from demo.t for version as of {history.first}")
    conn.execute('create view demo.t_log as select snapshot_id, operation from demo."t$snapshots"')
    assert rows(conn, "select * from demo.t_then order by id") == [(1, "a"), (2, "b")]
    assert rows(conn, "select count(*) from demo.t_then o join demo.t n on o.id = n.id") == [(2,)]
    assert (history.first, "append") in rows(conn, "select * from demo.t_log")


def test_a_snapshot_whose_file_is_gone_is_an_error(conn, server):
    conn.execute("create table demo.gone (id bigint)")
    conn.execute("insert into demo.gone values (1), (2)")
    old = conn.execute('select snapshot_id from demo."gone$snapshots"').fetchone()[0]
    old_files = {r[0] for r in conn.execute('select file_path from demo."gone$files"')}
    conn.execute("delete from demo.gone where id = 1")  # copy-on-write: the old file leaves the head
    assert rows(conn, "select id from demo.gone") == [(2,)]
    (only_old,) = old_files - {r[0] for r in conn.execute('select file_path from demo."gone$files"')}
    # A lookup of this shape first: the next one reuses its rewrite, and still checks the files.
    assert rows(conn, f"select id from demo.gone for version as of {old} where id = 1") == [(1,)]
    Path(only_old.removeprefix("file://")).unlink()
    for sql in (f"select id from demo.gone for version as of {old} where id = 2",
                f"select * from demo.gone for version as of {old}"):
        with pytest.raises(psycopg.Error) as failed:
            conn.execute(sql)
        assert failed.value.sqlstate == "58P01"
    assert rows(conn, "select id from demo.gone") == [(2,)]


def test_repeated_lookups_of_one_snapshot_reuse_its_rewrite(conn, history):
    for i, expected in ((1, [("a",)]), (2, [("b",)]), (3, []), (1, [("a",)]), (4, [])):
        assert rows(conn, f"select v from demo.t for version as of {history.first} where id = {i}") == expected
        assert rows(conn, f'select v from demo."t@{history.second}" where id = {i}') == \
            ([("a",)] if i == 1 else [("b",)] if i == 2 else [("c",)] if i == 3 else [])


def test_a_parameter_as_the_version_is_refused(conn):
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        conn.execute("select * from demo.t for version as of %s", (1,))


def test_prepared_statements_read_snapshots_and_refs(conn, history):
    sql = f'select count(*) from demo."t@{history.first}" where id > %s'
    for _ in range(3):  # psycopg prepares server-side from the third run on
        assert conn.execute(sql, (0,), prepare=True).fetchone() == (2,)


def test_in_a_transaction_time_travel_reads_a_fixed_snapshot_outside_the_read_set(server, history):
    with psycopg.connect(server.dsn, autocommit=True) as setup:
        setup.execute("create table demo.ser (id bigint)")
        setup.execute("create table demo.ser_out (id bigint)")
        setup.execute("insert into demo.ser values (1)")
        base = setup.execute('select snapshot_id from demo."ser$snapshots"').fetchone()[0]
    with psycopg.connect(server.dsn) as a, psycopg.connect(server.dsn, autocommit=True) as b:
        a.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
        assert rows(a, f"select count(*) from demo.ser for version as of {base}") == [(1,)]
        b.execute("insert into demo.ser values (2)")
        assert rows(a, f"select count(*) from demo.ser for version as of {base}") == [(1,)]
        # Reading a snapshot is not reading the table's head: what A writes from it commits.
        a.execute("insert into demo.ser_out values (1)")
        a.commit()
        # A read of the head is in the read set: the same race now fails.
        assert rows(a, "select count(*) from demo.ser") == [(2,)]
        b.execute("insert into demo.ser values (3)")
        a.execute("insert into demo.ser_out values (2)")
        with pytest.raises(psycopg.errors.SerializationFailure):
            a.commit()


# --- metadata tables ---------------------------------------------------------------------------

TRINO_COLUMNS = {
    "snapshots": ["committed_at", "snapshot_id", "parent_id", "operation", "manifest_list", "summary"],
    "history": ["made_current_at", "snapshot_id", "parent_id", "is_current_ancestor"],
    "refs": ["name", "type", "snapshot_id", "max_reference_age_in_ms", "min_snapshots_to_keep",
             "max_snapshot_age_in_ms"],
    "manifests": ["path", "length", "partition_spec_id", "added_snapshot_id", "added_data_files_count",
                  "added_rows_count", "existing_data_files_count", "existing_rows_count",
                  "deleted_data_files_count", "deleted_rows_count", "partition_summaries"],
    "partitions": ["record_count", "file_count", "total_size"],
    "metadata_log_entries": ["timestamp", "file", "latest_snapshot_id", "latest_schema_id",
                             "latest_sequence_number"],
    "properties": ["key", "value"],
}


@pytest.mark.parametrize("which", sorted(TRINO_COLUMNS))
def test_metadata_tables_have_trinos_columns(conn, which):
    cur = conn.execute(f'select * from demo."t${which}"')
    assert [d.name for d in cur.description] == TRINO_COLUMNS[which]


def test_metadata_tables_say_what_pyiceberg_inspect_says(conn, server, history):
    table = _pyiceberg_table(server.data_dir, "t")
    snapshots = rows(conn, 'select snapshot_id, parent_id, operation, manifest_list from demo."t$snapshots" '
                           "order by committed_at")
    inspected = table.inspect.snapshots().sort_by("committed_at").to_pylist()
    assert snapshots == [(s["snapshot_id"], s["parent_id"], s["operation"], s["manifest_list"]) for s in inspected]
    assert [r[0] for r in snapshots] == [history.first, history.second, history.third]
    files = rows(conn, 'select file_path, record_count from demo."t$files" order by file_path')
    assert files == sorted((f["file_path"], f["record_count"]) for f in table.inspect.files().to_pylist())
    assert sum(n for _, n in files) == 4
    assert rows(conn, 'select record_count, file_count from demo."t$partitions"') == [(4, 3)]
    manifests = rows(conn, 'select sum(added_rows_count + existing_rows_count) from demo."t$manifests"')
    assert manifests == [(4,)]
    assert rows(conn, 'select value from demo."t$properties" where key = \'write.parquet.compression-codec\'') \
        == [("zstd",)]
    entries = rows(conn, 'select count(*) from demo."t$metadata_log_entries"')
    assert entries == [(len(table.metadata.metadata_log) + 1,)]


def test_sparks_spelling_of_metadata_tables_where_the_first_part_is_no_database(conn, history):
    assert rows(conn, "select count(*) from demo.t.snapshots") == [(3,)]
    assert rows(conn, "select count(*) from demo.t.history") == [(3,)]
    # A three-part name starting with the database (or its alias postgres) is PostgreSQL's.
    assert rows(conn, "select count(*) from icegres.demo.t") == [(4,)]
    assert rows(conn, "select count(*) from postgres.demo.t") == [(4,)]
    with pytest.raises(psycopg.errors.FeatureNotSupported) as failed:
        conn.execute("select * from demo.nope.snapshots")  # not a table: PostgreSQL's reading
    assert "cross-database references are not implemented" in str(failed.value)


# --- branches and tags -------------------------------------------------------------------------


def test_branches_and_tags_are_created_read_moved_and_dropped(conn, history, server):
    conn.execute("create table demo.refs (id bigint)")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("alter table demo.refs create branch early")  # no snapshot yet
    conn.execute("insert into demo.refs values (1), (2)")
    conn.execute("alter table demo.refs create tag v1 retain 30 days")
    conn.execute("alter table demo.refs create branch dev with snapshot retention 3 snapshots 2 days")
    conn.execute("insert into demo.refs values (3)")
    assert rows(conn, 'select count(*) from demo."refs@v1"') == [(2,)]
    assert rows(conn, "select count(*) from demo.refs for version as of 'dev'") == [(2,)]
    assert rows(conn, "select count(*) from demo.refs") == [(3,)]
    refs = rows(conn, 'select name, type, max_reference_age_in_ms, min_snapshots_to_keep, max_snapshot_age_in_ms '
                      'from demo."refs$refs" order by name')
    assert refs == [("dev", "BRANCH", None, 3, 172_800_000), ("main", "BRANCH", None, None, None),
                    ("v1", "TAG", 2_592_000_000, None, None)]
    conn.execute("alter table demo.refs replace branch dev as of version main")
    assert rows(conn, 'select count(*) from demo."refs@dev"') == [(3,)]
    # Moving a branch keeps its retention.
    assert rows(conn, 'select min_snapshots_to_keep from demo."refs$refs" where name = \'dev\'') == [(3,)]
    conn.execute("alter table demo.refs create or replace tag v1")
    assert rows(conn, 'select count(*) from demo."refs@v1"') == [(3,)]
    conn.execute("alter table demo.refs drop tag v1")
    conn.execute("alter table demo.refs drop branch if exists v1")
    assert [r[0] for r in rows(conn, 'select name from demo."refs$refs" order by name')] == ["dev", "main"]
    # Zero-copy: the branch is one metadata commit that names main's snapshot.
    table = _pyiceberg_table(server.data_dir, "refs")
    assert table.metadata.refs["dev"].snapshot_id == table.metadata.current_snapshot_id
    assert len(table.inspect.files()) == 2


@pytest.mark.parametrize("sql, sqlstate", [
    ("alter table demo.t create branch b_dup", None),
    ("alter table demo.t create branch b_dup", "42710"),
    ("alter table demo.t create tag b_dup", "42710"),
    ("alter table demo.t create branch if not exists b_dup", None),
    ("alter table demo.t replace tag nope", "42704"),
    ("alter table demo.t drop tag nope", "42704"),
    ("alter table demo.t drop branch main", "55000"),
    ("alter table demo.t create tag main", "55000"),
    ("alter table demo.t create tag t_bad as of version 12345", "42704"),
    ("alter table demo.t create branch b_bad retain 3 weeks", "42601"),
    ("alter table demo.missing create branch b", "42P01"),
])
def test_ref_ddl_errors(conn, sql, sqlstate):
    if sqlstate is None:
        conn.execute(sql)
        return
    with pytest.raises(psycopg.Error) as failed:
        conn.execute(sql)
    assert failed.value.sqlstate == sqlstate


def test_ref_ddl_is_refused_in_a_transaction_block(server, history):
    with psycopg.connect(server.dsn) as c:
        with pytest.raises(psycopg.errors.ActiveSqlTransaction):
            c.execute("alter table demo.t create tag in_block")
        c.rollback()
        assert "in_block" not in {r[0] for r in c.execute('select name from demo."t$refs"')}


def test_racing_creations_of_one_branch_one_wins(server, history):
    errors: list[str | None] = []

    def create() -> None:
        try:
            with psycopg.connect(server.dsn, autocommit=True) as c:
                c.execute("alter table demo.t create branch raced")
            errors.append(None)
        except psycopg.Error as exc:
            errors.append(exc.sqlstate)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors.count(None) == 1
    assert set(errors) - {None} <= {"42710", "40001"}


# --- other engines and Flight SQL -----------------------------------------------------------


def test_pyiceberg_reads_the_branch_icegres_created_and_duckdb_the_snapshot(conn, server, history):
    conn.execute(f"alter table demo.t create or replace tag at_first as of version {history.first}")
    table = _pyiceberg_table(server.data_dir, "t")
    tagged = table.scan(snapshot_id=table.snapshot_by_name("at_first").snapshot_id).to_arrow()
    assert sorted(tagged.column("id").to_pylist()) == [1, 2]
    ours = rows(conn, "select id, v from demo.t for version as of 'at_first' order by id")
    assert len(_duckdb_scan(table.metadata_location, "select id from {scan}")) == 4  # the head
    pinned = _duckdb_scan_at(table.metadata_location, history.first)
    assert pinned == ours == [(1, "a"), (2, "b")]


def _duckdb_scan_at(metadata_location: str, snapshot_id: int) -> list[tuple[Any, ...]]:
    location = metadata_location.removeprefix("file://")
    return _duckdb_scan(metadata_location, "select id, v from {scan} order by id".replace(
        "{scan}", f"iceberg_scan('{location}', snapshot_from_id => {snapshot_id})"))


def test_flight_sql_reads_snapshots_refs_and_metadata(server, history):
    import adbc_driver_flightsql.dbapi as adbc

    with adbc.connect(server.flight_uri, autocommit=True) as c, c.cursor() as cur:
        cur.execute(f"select id from demo.t for version as of {history.first} order by id")
        assert cur.fetchall() == [(1,), (2,)]
        cur.execute(f'select count(*) from demo."t@{history.second}" where id > ?', parameters=(1,))
        assert cur.fetchall() == [(2,)]
        cur.execute('select snapshot_id from demo."t$history" order by made_current_at')
        assert [r[0] for r in cur.fetchall()][:3] == [history.first, history.second, history.third]
        # Ref DDL and the snapshot procedures go through Flight SQL's write path too.
        cur.execute(f"alter table demo.t create or replace tag flight_tag as of version {history.second}")
        cur.execute("select count(*) from demo.t for version as of 'flight_tag'")
        assert cur.fetchall() == [(3,)]
        cur.execute("create table demo.flight_proc (id bigint)")
        cur.execute("insert into demo.flight_proc values (1)")
        cur.execute('select snapshot_id from demo."flight_proc$snapshots"')
        (first,) = cur.fetchone()
        cur.execute("insert into demo.flight_proc values (2)")
        cur.execute(f"call system.rollback_to_snapshot('demo.flight_proc', {first})")
        cur.execute("select count(*) from demo.flight_proc")
        assert cur.fetchall() == [(1,)]


# --- snapshot procedures -----------------------------------------------------------------------


def _head(c: psycopg.Connection, table: str) -> int:
    return c.execute(f'select snapshot_id from demo."{table}$refs" where name = \'main\'').fetchone()[0]


def test_rollback_set_current_fast_forward_and_cherrypick(server):
    notices: list[str] = []
    with psycopg.connect(server.dsn, autocommit=True) as c:
        c.add_notice_handler(lambda n: notices.append(n.message_primary))
        c.execute("create table demo.proc (id bigint)")
        c.execute("insert into demo.proc values (1)")
        s1 = _head(c, "proc")
        time.sleep(0.02)
        between = c.execute("select now()").fetchone()[0].astimezone(dt.UTC)
        time.sleep(0.02)
        c.execute("insert into demo.proc values (2)")
        s2 = _head(c, "proc")
        c.execute("alter table demo.proc create branch dev")

        assert c.execute(f"call system.rollback_to_snapshot('demo.proc', {s1})").statusmessage == "CALL"
        assert notices[-1] == f'table "demo.proc": snapshot {s2} -> {s1}'
        assert rows(c, "select id from demo.proc") == [(1,)]
        c.execute("call iceberg.system.set_current_snapshot(table => 'demo.proc', ref => 'dev')")
        assert rows(c, "select id from demo.proc order by id") == [(1,), (2,)]
        c.execute("set timezone = 'America/Lima'")
        local = between.astimezone(dt.timezone(dt.timedelta(hours=-5))).replace(tzinfo=None)
        c.execute(f"call system.rollback_to_timestamp('demo.proc', TIMESTAMP '{local}')")
        assert _head(c, "proc") == s1
        c.execute("call system.fast_forward('demo.proc', 'main', 'dev')")
        assert _head(c, "proc") == s2
        c.execute(f"call system.set_current_snapshot('demo.proc', {s1})")
        c.execute(f"call system.cherrypick_snapshot('demo.proc', {s2})")
        assert rows(c, "select id from demo.proc order by id") == [(1,), (2,)]
        picked = c.execute('select parent_id, summary from demo."proc$snapshots" order by committed_at desc '
                           "limit 1").fetchone()
        assert picked[0] == s1 and picked[1]["source-snapshot-id"] == str(s2)

    # pyiceberg sees main where the procedures left it
    table = _pyiceberg_table(server.data_dir, "proc")
    assert table.metadata.current_snapshot().parent_snapshot_id == s1


@pytest.mark.parametrize("sql, sqlstate", [
    ("call system.nope('demo.t')", "42883"),
    ("call sys.rollback_to_snapshot('demo.t', 1)", "42883"),
    ("call system.rollback_to_snapshot('demo.t', 1)", "42704"),
    ("call system.rollback_to_snapshot('demo.missing', 1)", "42P01"),
    ("call system.rollback_to_snapshot(table => 'demo.t', snapshot_id => 1, x => 1)", "42883"),
    ("call system.set_current_snapshot('demo.t')", "22023"),
    ("call system.set_current_snapshot(table => 'demo.t', ref => 'nope')", "42704"),
    ("call system.rollback_to_timestamp('demo.t', TIMESTAMP '2001-01-01 00:00')", "22023"),
    ("call system.rollback_to_snapshot('demo.t', )", "42601"),
])
def test_procedure_errors(conn, sql, sqlstate):
    before = _head(conn, "t")
    with pytest.raises(psycopg.Error) as failed:
        conn.execute(sql)
    assert failed.value.sqlstate == sqlstate
    assert _head(conn, "t") == before  # an error changes nothing


def test_rollback_to_a_snapshot_that_is_no_ancestor_is_refused(conn, history):
    conn.execute("create table demo.fork (id bigint)")
    conn.execute("insert into demo.fork values (1)")
    first = _head(conn, "fork")
    conn.execute("insert into demo.fork values (2)")
    second = _head(conn, "fork")
    conn.execute(f"call system.set_current_snapshot('demo.fork', {first})")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute(f"call system.rollback_to_snapshot('demo.fork', {second})")  # a child, not an ancestor
    conn.execute(f"alter table demo.fork create branch side as of version {second}")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("call system.fast_forward('demo.fork', 'side', 'main')")  # side is ahead of main


def test_procedures_are_refused_in_a_block(server, history):
    with psycopg.connect(server.dsn) as c:
        with pytest.raises(psycopg.errors.ActiveSqlTransaction):
            c.execute("call system.fast_forward('demo.t', 'main', 'main')")


def test_branch_diff_as_a_table_function(conn, server, history):
    conn.execute("create table demo.bd (id bigint)")
    conn.execute("insert into demo.bd values (1)")
    conn.execute("alter table demo.bd create branch bd_dev")
    conn.execute("insert into demo.bd values (2), (3)")
    got = rows(conn, "select state, commits, rows_added from branch_diff('bd_dev', 'main', 'demo') d "
                     "where d.\"table\" = 'demo.bd'")
    assert got == [("advanced", 1, 2)]
    cli = subprocess.run([sys.executable, "-m", "icegres", "branch", "diff", "bd_dev", "main", "--namespace", "demo",
                          "--json", "--data-dir", str(server.data_dir), "--log-level", "warning"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    by_table = {d["table"]: d for d in json.loads(cli.stdout)}
    sql = {r[0]: r[1:] for r in rows(conn, 'select "table", state, a, b, fork from branch_diff(\'bd_dev\', \'main\', \'demo\')')}
    assert {t: (d["state"], d["a"], d["b"], d["fork"]) for t, d in by_table.items()} == sql
    with pytest.raises(psycopg.errors.UndefinedFunction):
        conn.execute("select * from branch_diff('a')")
