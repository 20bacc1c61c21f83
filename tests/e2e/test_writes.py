"""Writes over the wire: INSERT/UPDATE/DELETE/TRUNCATE/COPY and transactions, checked from outside.

Every test makes its own tables in a fresh namespace, so nothing here touches the shared seeded
demo lake. Each catalog kind gets one icegres server for the module (`Lake`): the embedded SQLite
catalog, a SQL catalog on the stack's PostgreSQL, and SeaweedFS's REST catalog. A test inspects
what a write did with pyiceberg on the same catalog (snapshots, summaries, files), with DuckDB's
Iceberg reader, or with a foreign pyiceberg writer in a subprocess that races icegres' COMMIT.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pyarrow as pa
import pytest

from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TOKEN = "icegres.commit-token"
CONNECT_TIMEOUT_S = 10
SUBPROCESS_TIMEOUT_S = 60


@dataclass
class Lake:
    """One icegres server over one catalog, plus pyiceberg properties for the same catalog."""

    kind: str
    srv: IcegresServer
    props: dict[str, str]
    _catalog: Any = field(default=None, repr=False)

    def catalog(self) -> Any:
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            self._catalog = load_catalog("icegres", **self.props)
        return self._catalog

    def table(self, ns: str, name: str) -> Any:
        """The table as the catalog has it now (a fresh load every call)."""
        return self.catalog().load_table((ns, name))

    def connect(self, **kwargs: Any) -> psycopg.Connection:
        return psycopg.connect(self.srv.dsn(), autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, **kwargs)

    def fresh_schema(self, conn: psycopg.Connection) -> str:
        ns = f"w_{uuid.uuid4().hex[:12]}"
        conn.execute(f"create schema {ns}")
        return ns


def snapshot_ids(table: Any) -> list[int]:
    return [s.snapshot_id for s in table.metadata.snapshots]


def data_files(table: Any) -> set[str]:
    if table.current_snapshot() is None:
        return set()
    return {t.file.file_path for t in table.scan().plan_files()}


@pytest.fixture(scope="module")
def embedded_lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    data_dir = tmp_path_factory.mktemp("writes") / "data"
    data_dir.mkdir()
    with running_icegres(data_dir) as srv:
        props = {"type": "sql", "uri": f"sqlite:///{data_dir.resolve() / 'catalog.db'}",
                 "warehouse": (data_dir.resolve() / "warehouse").as_uri()}
        yield Lake("embedded", srv, props)


@pytest.fixture(scope="module")
def postgres_lake(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """A SQL catalog in a fresh database of the stack's PostgreSQL; data files on local disk."""
    db = f"icegres_writes_{os.getpid()}"
    with psycopg.connect(stack.pg_url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as admin:
        admin.execute(f"drop database if exists {db}")
        admin.execute(f"create database {db}")
    uri = stack.pg_url.rsplit("/", 1)[0] + f"/{db}"
    root = tmp_path_factory.mktemp("pgwrites")
    warehouse = (root / "warehouse").as_uri()
    env = {"ICEGRES_CATALOG_URI": uri, "ICEGRES_WAREHOUSE": warehouse}
    (root / "data").mkdir()
    with running_icegres(root / "data", env=env) as srv:
        props = {"type": "sql", "uri": uri.replace("postgresql://", "postgresql+psycopg://", 1), "warehouse": warehouse}
        yield Lake("postgres", srv, props)


@pytest.fixture(scope="module")
def rest_lake(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    data_dir = tmp_path_factory.mktemp("restwrites")
    with running_icegres(data_dir, env=stack.env()) as srv:
        yield Lake("rest", srv, dict(stack.pyiceberg_properties()))


@pytest.fixture(params=["embedded", "postgres", "rest"])
def any_lake(request: pytest.FixtureRequest) -> Lake:
    return request.getfixturevalue(f"{request.param}_lake")


# --- 1. every type through INSERT and SELECT, text and binary ----------------------------------

ALL_TYPES_DDL = (
    "id bigint not null, b boolean, i integer, l bigint, r real, d double precision, "
    "n numeric(38,10), m numeric(9,2), dt date, t time, ts timestamp, tz timestamptz, "
    "s text, u uuid, bin bytea"
)
COLUMNS = ["id", "b", "i", "l", "r", "d", "n", "m", "dt", "t", "ts", "tz", "s", "u", "bin"]
IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
D = decimal.Decimal

ROWS: list[tuple[Any, ...]] = [
    (1, None, None, None, None, None, None, None, None, None, None, None, None, None, None),
    (2, False, -(2**31), -(2**63), -math.inf, -math.inf, D("-9999999999999999999999999999.9999999999"),
     D("-9999999.99"), dt.date(1, 1, 1), dt.time(0, 0), dt.datetime(1, 1, 1, 0, 0),
     dt.datetime(1000, 6, 15, 12, 0, 0, 1, tzinfo=IST), "", uuid.UUID(int=0), b""),
    (3, True, 2**31 - 1, 2**63 - 1, math.inf, math.inf, D("9999999999999999999999999999.9999999999"),
     D("9999999.99"), dt.date(9999, 12, 31), dt.time(23, 59, 59, 999999), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC), "héllo wörld ✓ 😀 日本語",
     uuid.UUID("ffffffff-ffff-ffff-ffff-ffffffffffff"), bytes(range(256))),
    (4, True, 0, 0, 1.5, math.nan, D("0.0000000001"), D("0.01"), dt.date(2024, 2, 29), dt.time(12, 34, 56, 789012),
     dt.datetime(2024, 2, 29, 12, 34, 56, 789012), dt.datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=IST),
     "tab\there\nnewline 'quote' \"dq\" \\back", uuid.uuid4(), b"\x00\x00a\x00"),
    (5, False, -1, 1, -0.0, 5e-324, D("-0.0000000001"), D("-0.01"), dt.date(1970, 1, 1), dt.time(0, 0, 0, 1),
     dt.datetime(1970, 1, 1, 0, 0, 0, 1), dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
     " leading and trailing ", uuid.uuid4(), b"\\x00\x01"),
]


def _same(expected: Any, got: Any, column: str) -> bool:
    if isinstance(expected, float):
        if column == "r":  # real: compare as float32, the column's precision
            import numpy as np

            expected, got = float(np.float32(expected)), float(np.float32(got))
        if math.isnan(expected):
            return isinstance(got, float) and math.isnan(got)
        return got == expected and math.copysign(1, got) == math.copysign(1, expected)
    if isinstance(expected, dt.datetime) and expected.tzinfo is not None:
        return isinstance(got, dt.datetime) and got.tzinfo is not None and got == expected
    return type(got) is type(expected) and got == expected if expected is not None else got is None


def _assert_rows(rows: list[tuple[Any, ...]], how: str) -> None:
    assert len(rows) == len(ROWS), how
    for want, got in zip(ROWS, rows, strict=True):
        bad = [(c, w, g) for c, w, g in zip(COLUMNS, want, got, strict=True) if not _same(w, g, c)]
        assert not bad, f"{how}: row {want[0]} differs (column, expected, got): {bad}"


def _as_text_literal(value: Any) -> Any:
    if isinstance(value, float) and value == 0 and math.copysign(1, value) < 0:
        # A bare -0.0 is a numeric literal in PostgreSQL, which has no negative zero (stored: 0);
        # quoted, float4in reads -0.
        return "-0"
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value)
    return value


def test_every_type_round_trips_text_and_binary(embedded_lake: Lake) -> None:
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        StringType,
        TimestampType,
        TimestamptzType,
        TimeType,
        UUIDType,
    )

    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t ({ALL_TYPES_DDL})")
        schema = lake.table(ns, "t").schema()
        assert [type(f.field_type) for f in schema.fields] == [
            LongType, BooleanType, IntegerType, LongType, FloatType, DoubleType, DecimalType, DecimalType,
            DateType, TimeType, TimestampType, TimestamptzType, StringType, UUIDType, BinaryType]
        assert schema.find_field("n").field_type == DecimalType(38, 10)
        assert schema.find_field("id").required
        insert = f"insert into {ns}.t values ({{}})"
        # Rows 1-2 as text parameters, 3-4 as binary parameters, 5 as literals (simple protocol).
        for row in ROWS[:2]:
            assert c.execute(insert.format(", ".join(["%t"] * len(COLUMNS))), row).statusmessage == "INSERT 0 1"
        cur = c.cursor()
        cur.executemany(insert.format(", ".join(["%b"] * len(COLUMNS))), ROWS[2:4])
        assert cur.rowcount == 2
        # Literals: uuid, bytea and numeric go in as quoted strings here, in their typed forms
        # (`'\\x..'::bytea`, `'..'::uuid`, bare 1.5) below and in test_typed_literals_keep_their_values.
        lit = psycopg.ClientCursor(c)
        lit.execute(insert.format(", ".join(["%s"] * len(COLUMNS))), [_as_text_literal(v) for v in ROWS[4]])
        assert lit.statusmessage == "INSERT 0 1"
        c.execute(f"create table {ns}.lit ({ALL_TYPES_DDL})")
        # psycopg's own literals (no -0.0 among them: see _as_text_literal); the timestamps of
        # row 4, as DataFusion casts '0001-01-01'::timestamp through nanoseconds and overflows.
        rows = [(*row[:10], *ROWS[3][10:12], *row[12:]) for row in ROWS[1:4]]
        for row in rows:
            lit.execute(f"insert into {ns}.lit values ({', '.join(['%s'] * len(COLUMNS))})", row)
        got = c.execute(f"select {', '.join(COLUMNS)} from {ns}.lit order by id").fetchall()
        for want, row in zip(rows, got, strict=True):
            bad = [(col, w, g) for col, w, g in zip(COLUMNS, want, row, strict=True) if not _same(w, g, col)]
            assert not bad, f"ClientCursor literals: row {want[0]} differs (column, expected, got): {bad}"
        query = f"select {', '.join(COLUMNS)} from {ns}.t order by id"
        _assert_rows(c.execute(query).fetchall(), "text")
        _assert_rows(c.cursor(binary=True).execute(query).fetchall(), "binary")
        _assert_rows(c.execute(query, prepare=True).fetchall(), "prepared text")
        # Each value compared inside the engine, not just after the round trip.
        assert c.execute(f"select id from {ns}.t where l = %s and n = %s", (-(2**63), ROWS[1][6])).fetchall() == [(2,)]
        assert c.execute(f"select id from {ns}.t where bin = %s", (bytes(range(256)),)).fetchall() == [(3,)]
        assert c.execute(f"select id from {ns}.t where s = ''").fetchall() == [(2,)]
        assert c.execute(f"select count(*) from {ns}.t where b is null and s is null").fetchone() == (1,)


TYPED_LITERALS = [
    pytest.param("n", "1234567890123456789.0123456789", D("1234567890123456789.0123456789"), id="numeric-literal"),
    pytest.param("bin", "'\\x00615c'::bytea", b"\x00a\\", id="bytea-cast"),
    pytest.param("u", "'00000000-0000-0000-0000-000000000001'::uuid", uuid.UUID(int=1), id="uuid-cast"),
    pytest.param("n", "'1234567890123456789.0123456789'", D("1234567890123456789.0123456789"), id="numeric-string"),
    pytest.param("bin", "'\\x00615c'", b"\x00a\\", id="bytea-string"),
    pytest.param("u", "'00000000-0000-0000-0000-000000000001'", uuid.UUID(int=1), id="uuid-string"),
    pytest.param("d", "'-Infinity'::float8", -math.inf, id="float8-cast"),
    pytest.param("tz", "'2024-01-01 00:00:00.000001+05:30'::timestamptz",
                 dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=IST), id="timestamptz-cast"),
]


@pytest.mark.parametrize(("column", "literal", "expected"), TYPED_LITERALS)
def test_typed_literals_keep_their_values(embedded_lake: Lake, column: str, literal: str, expected: Any) -> None:
    """What psql users (and psycopg's ClientCursor) send: literals in the SQL text, simple protocol."""
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t ({ALL_TYPES_DDL})")
        c.execute(f"insert into {ns}.t (id, {column}) values (1, {literal})")
        assert c.execute(f"select {column} from {ns}.t").fetchone() == (expected,)


def test_lists_round_trip(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        from pyiceberg.schema import Schema
        from pyiceberg.types import ListType, LongType, NestedField, StringType

        lake.catalog().create_table((ns, "l"), schema=Schema(
            NestedField(1, "id", LongType(), required=True),
            NestedField(2, "xs", ListType(3, LongType(), element_required=False)),
            NestedField(4, "ss", ListType(5, StringType(), element_required=False))))
        c.execute(f"insert into {ns}.l values (1, ARRAY[1, -9223372036854775808, NULL], ARRAY['a', '', NULL])")
        c.execute(f"insert into {ns}.l values (%s, %s, %s)", (2, [], ["😀"]))
        c.execute(f"insert into {ns}.l (id) values (3)")
        want = [(1, [1, -(2**63), None], ["a", "", None]), (2, [], ["😀"]), (3, None, None)]
        assert c.execute(f"select id, xs, ss from {ns}.l order by id").fetchall() == want
        assert c.cursor(binary=True).execute(f"select id, xs, ss from {ns}.l order by id").fetchall() == want


# --- 2. command tags, RETURNING, executemany ---------------------------------------------------


def test_command_tags_returning_and_executemany(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text)")
        cur = c.execute(f"insert into {ns}.t values (1, 'a'), (2, 'b'), (3, 'c')")
        assert (cur.statusmessage, cur.rowcount) == ("INSERT 0 3", 3)
        cur = c.execute(f"insert into {ns}.t (v, id) values (%s, %s), (%s, %s) returning id * 10 as x, upper(v) as v",
                        ("d", 4, "e", 5))
        assert cur.statusmessage == "INSERT 0 2"
        assert [d.name for d in cur.description] == ["x", "v"]
        assert cur.fetchall() == [(40, "D"), (50, "E")]
        cur = c.execute(f"insert into {ns}.t select id + 100, v || '!' from {ns}.t where id <= 2")
        assert cur.statusmessage == "INSERT 0 2"
        many = psycopg.connect(lake.srv.dsn(), autocommit=True, prepare_threshold=0, connect_timeout=CONNECT_TIMEOUT_S)
        with many:
            mc = many.cursor()
            mc.executemany(f"insert into {ns}.t values (%s, %s)", [(i, f"m{i}") for i in range(200, 210)])
            assert mc.rowcount == 10
            mc.executemany(f"insert into {ns}.t values (%s, %s) returning id", [(300, "r"), (301, "s")], returning=True)
            assert [mc.fetchone()] == [(300,)] and mc.nextset() and [mc.fetchone()] == [(301,)]
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (19,)
        cur = c.execute(f"update {ns}.t set v = v || '?' where id >= 200")
        assert (cur.statusmessage, cur.rowcount) == ("UPDATE 12", 12)
        assert c.execute(f"update {ns}.t set v = 'x' where id = -1").statusmessage == "UPDATE 0"
        cur = c.execute(f"delete from {ns}.t where id > 100 and id < 200")
        assert (cur.statusmessage, cur.rowcount) == ("DELETE 2", 2)
        assert c.execute(f"delete from {ns}.t where false").statusmessage == "DELETE 0"
        cur = c.cursor()
        with cur.copy(f"COPY {ns}.t FROM STDIN") as cp:
            cp.write_row((400, "copied"))
            cp.write_row((401, None))
        assert (cur.statusmessage, cur.rowcount) == ("COPY 2", 2)
        assert c.execute(f"select id, v from {ns}.t where id >= 200 and id < 203 or id >= 400 order by id").fetchall() == [
            (200, "m200?"), (201, "m201?"), (202, "m202?"), (400, "copied"), (401, None)]
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (19,)
        assert c.execute(f"truncate {ns}.t").statusmessage == "TRUNCATE TABLE"
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (0,)


def test_copy_command_tag(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text)")
        cur = c.cursor()
        with cur.copy(f"COPY {ns}.t (id, v) FROM STDIN") as cp:
            cp.write("1\ta\n2\tb\n3\tc\n")
        assert (cur.statusmessage, cur.rowcount) == ("COPY 3", 3)


# --- 3. copy-on-write touches only the files that hold the key ---------------------------------


def test_update_and_delete_rewrite_only_the_files_holding_the_key(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text)")
        for k in range(4):  # four INSERTs: four data files, ids {10k, 10k+1}
            c.execute(f"insert into {ns}.t values (%s, 'a'), (%s, 'b')", (10 * k, 10 * k + 1))
        before = data_files(lake.table(ns, "t"))
        assert len(before) == 4
        assert c.execute(f"update {ns}.t set v = 'changed' where id = 20").statusmessage == "UPDATE 1"
        table = lake.table(ns, "t")
        summary = table.current_snapshot().summary
        assert summary.operation.value == "overwrite"
        assert (summary["deleted-data-files"], summary["added-data-files"]) == ("1", "1")
        assert summary["deleted-records"] == "2" and summary["added-records"] == "2"
        after = data_files(table)
        assert len(after) == 4 and len(before - after) == 1 and len(after - before) == 1

        assert c.execute(f"delete from {ns}.t where id = 31").statusmessage == "DELETE 1"
        summary = lake.table(ns, "t").current_snapshot().summary
        assert (summary["deleted-data-files"], summary["added-data-files"]) == ("1", "1")
        assert (summary["deleted-records"], summary["added-records"]) == ("2", "1")
        # Deleting every row of a file drops it without writing a replacement.
        assert c.execute(f"delete from {ns}.t where id in (0, 1)").statusmessage == "DELETE 2"
        summary = lake.table(ns, "t").current_snapshot().summary
        assert summary["deleted-data-files"] == "1" and "added-data-files" not in summary.additional_properties
        # A key no file holds changes nothing: no snapshot at all.
        snaps = snapshot_ids(lake.table(ns, "t"))
        assert c.execute(f"update {ns}.t set v = 'x' where id = 999").statusmessage == "UPDATE 0"
        assert snapshot_ids(lake.table(ns, "t")) == snaps
        assert c.execute(f"select id, v from {ns}.t order by id").fetchall() == [
            (10, "a"), (11, "b"), (20, "changed"), (21, "b"), (30, "a")]


# --- 4. concurrent writers: first committer wins, appends never conflict -----------------------


def test_first_committer_wins_and_loser_gets_40001(any_lake: Lake) -> None:
    lake = any_lake
    with lake.connect() as a, lake.connect() as b:
        ns = lake.fresh_schema(a)
        a.execute(f"create table {ns}.t (id bigint not null, v text)")
        a.execute(f"insert into {ns}.t values (1, 'orig'), (2, 'orig')")
        a.execute("begin")
        b.execute("begin")
        assert a.execute(f"update {ns}.t set v = 'a' where id in (1, 2)").statusmessage == "UPDATE 2"
        b.execute("savepoint s")
        b.execute(f"insert into {ns}.t values (3, 'undone')")  # a staged file orphaned by ROLLBACK TO
        b.execute("rollback to savepoint s")
        assert b.execute(f"update {ns}.t set v = 'b' where id in (1, 2)").statusmessage == "UPDATE 2"
        assert b.execute(f"select v from {ns}.t order by id").fetchall() == [("b",), ("b",)]
        a.execute("commit")
        with pytest.raises(psycopg.errors.SerializationFailure) as failed:
            b.execute("commit")
        assert failed.value.sqlstate == "40001"
        assert b.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        for conn in (a, b):
            assert conn.execute(f"select id, v from {ns}.t order by id").fetchall() == [(1, "a"), (2, "a")]
        table = lake.table(ns, "t")
        assert sorted(table.scan().to_arrow().column("v").to_pylist()) == ["a", "a"]
        if lake.kind != "rest":  # local files: the loser's staged files (and its orphan) are gone
            referenced = {t.file.file_path.removeprefix("file://")
                          for sid in snapshot_ids(table) for t in table.scan(snapshot_id=sid).plan_files()}
            on_disk = {str(p) for p in Path(table.location().removeprefix("file://")).rglob("*.parquet")}
            assert on_disk == referenced


def test_concurrent_blind_appends_both_commit(any_lake: Lake) -> None:
    lake = any_lake
    with lake.connect() as a, lake.connect() as b:
        ns = lake.fresh_schema(a)
        a.execute(f"create table {ns}.t (id bigint not null, who text)")
        a.execute(f"insert into {ns}.t values (0, 'seed')")
        a.execute("begin")
        b.execute("begin")
        a.execute(f"insert into {ns}.t values (1, 'a'), (2, 'a')")
        b.execute(f"insert into {ns}.t values (3, 'b')")
        a.execute("commit")
        b.execute("commit")  # no 40001: an append rebases onto the winner
        want = [(0, "seed"), (1, "a"), (2, "a"), (3, "b")]
        assert a.execute(f"select id, who from {ns}.t order by id").fetchall() == want
        assert len(lake.table(ns, "t").metadata.snapshots) == 3


# Issue 25: six autocommit writers INSERTing unique rows into one table lost a third of their
# INSERTs to 40001 ("gave up after 5 attempts"). A blind append must never fail because another
# commit landed first; a foreign pyiceberg writer in another process appends to the same table
# throughout, so icegres's commits are overtaken and must rebase, not give up.
APPEND_WRITERS = 6
APPEND_SECONDS = 4.0  # a bound on the run, not a timing assertion
APPEND_SECONDS_MAX = 60.0
APPEND_AFTER_LANDING = 3  # INSERTs each writer makes once the foreign writer's commit landed

FOREIGN_APPENDER = """
import json, os, sys, time
import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitFailedException
props, ns, name, stop = json.loads(sys.argv[1])
catalog = load_catalog("icegres", **props)
done = 0
print("ready", flush=True)
while not os.path.exists(stop):
    table = catalog.load_table((ns, name))
    row = pa.table({"id": pa.array([-(done + 1)], pa.int64()), "who": pa.array(["foreign"], pa.string())})
    try:
        table.append(row)
    except CommitFailedException:
        continue  # icegres got there first: reload and try again
    done += 1
    if done == 1:
        open(stop + ".landed", "w").close()
print(done, flush=True)
"""


def _append_for(lake: Lake, ns: str, writer: int, seconds: float, acked: list[int],
                errors: list[BaseException], landed: Path | None = None) -> None:
    import time

    try:
        with lake.connect() as conn:
            start = time.monotonic()
            i = after = 0
            # At least `seconds` of racing. The foreign writer's load-write-commit cycle is far
            # slower than one of our INSERTs, so on a loaded machine six writers can win every
            # race (CI saw it lose for a full minute even with our writers pausing between
            # INSERTs): past `seconds` ours leave the table to it until it has landed a commit,
            # then write a few more, which must rebase onto it. At most APPEND_SECONDS_MAX.
            while time.monotonic() - start < APPEND_SECONDS_MAX:
                if time.monotonic() - start >= seconds:
                    if landed is not None and not landed.exists():
                        time.sleep(0.05)
                        continue
                    if after >= APPEND_AFTER_LANDING:
                        break
                    after += 1
                row_id = writer * 1_000_000 + i
                conn.execute(f"insert into {ns}.t values (%s, %s)", (row_id, f"w{writer}"))
                acked.append(row_id)  # only once the server acknowledged it
                i += 1
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def test_concurrent_autocommit_appends_never_fail_and_land_exactly_once(any_lake: Lake, tmp_path: Path) -> None:
    import threading

    lake = any_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint, who text)")
        stop = tmp_path / "stop"
        foreign = subprocess.Popen([sys.executable, "-c", FOREIGN_APPENDER, json.dumps([lake.props, ns, "t", str(stop)])],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        try:
            assert foreign.stdout is not None and foreign.stdout.readline().strip() == "ready"
            acked: list[list[int]] = [[] for _ in range(APPEND_WRITERS)]
            errors: list[BaseException] = []
            landed = Path(str(stop) + ".landed")
            threads = [threading.Thread(target=_append_for,
                                        args=(lake, ns, w, APPEND_SECONDS, acked[w], errors, landed))
                       for w in range(APPEND_WRITERS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            stop.touch()
            out, err = foreign.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        assert foreign.returncode == 0, err
        assert not errors, errors[:3]  # every INSERT succeeded
        ours = [i for writer in acked for i in writer]
        theirs = int(out.strip().splitlines()[-1])
        assert all(acked) and theirs > 0  # everyone wrote: the commits really were concurrent
        # Exactly the acknowledged rows, once each, beside the foreign writer's.
        count, distinct, total = c.execute(
            f"select count(*), count(distinct id), sum(id) from {ns}.t where id >= 0").fetchone()
        assert (count, distinct, total) == (len(ours), len(ours), sum(ours))
        assert c.execute(f"select count(*), count(distinct id) from {ns}.t where id < 0").fetchone() == (theirs, theirs)
        table = lake.table(ns, "t")
        rows = table.scan().to_arrow()
        assert rows.num_rows == len(ours) + theirs  # what other engines read agrees
        assert sorted(i for i in rows.column("id").to_pylist() if i >= 0) == sorted(ours)


def test_appends_that_read_their_table_keep_their_conflicts(any_lake: Lake) -> None:
    """A primary-key append checked its key against a snapshot another commit since added the key
    to: 40001 at COMMIT, and the retry is 23505. Other keys rebase and commit. An INSERT ... SELECT
    from its own table keeps snapshot isolation (it commits, with what its snapshot held)."""
    lake = any_lake
    with lake.connect() as a, lake.connect() as b:
        ns = lake.fresh_schema(a)
        a.execute(f"create table {ns}.k (id bigint primary key, v text)")
        a.execute("begin")
        a.execute(f"insert into {ns}.k values (1, 'a')")
        assert b.execute(f"insert into {ns}.k values (1, 'b')").statusmessage == "INSERT 0 1"
        with pytest.raises(psycopg.errors.SerializationFailure) as failed:
            a.execute("commit")
        assert failed.value.sqlstate == "40001"
        with pytest.raises(psycopg.errors.UniqueViolation):
            a.execute(f"insert into {ns}.k values (1, 'a')")
        a.execute("begin")
        a.execute(f"insert into {ns}.k values (3, 'a')")
        b.execute(f"insert into {ns}.k values (2, 'b')")
        a.execute("commit")  # another key: rebased onto b's commit
        assert a.execute(f"select id, v from {ns}.k order by id").fetchall() == [(1, "b"), (2, "b"), (3, "a")]

        a.execute(f"create table {ns}.s (id bigint not null, v text)")
        a.execute(f"insert into {ns}.s values (1, 'orig')")
        a.execute("begin")
        a.execute(f"insert into {ns}.s select id + 100, 'copy' from {ns}.s")
        b.execute(f"insert into {ns}.s values (2, 'b')")
        a.execute("commit")
        assert a.execute(f"select id, v from {ns}.s order by id").fetchall() == [
            (1, "orig"), (2, "b"), (101, "copy")]


# --- 5. ROLLBACK and savepoints ----------------------------------------------------------------


def test_rollback_leaves_no_snapshot_and_no_files(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text)")
        c.execute(f"insert into {ns}.t values (1, 'keep')")
        table = lake.table(ns, "t")
        snaps, location = snapshot_ids(table), Path(table.location().removeprefix("file://"))
        parquet_before = sorted(location.rglob("*.parquet"))
        c.execute("begin")
        c.execute(f"insert into {ns}.t values (2, 'gone'), (3, 'gone')")
        c.execute(f"update {ns}.t set v = 'gone' where id = 1")
        assert c.execute(f"select count(*) from {ns}.t where v = 'gone'").fetchone() == (3,)
        c.execute("rollback")
        assert snapshot_ids(lake.table(ns, "t")) == snaps
        assert sorted(location.rglob("*.parquet")) == parquet_before  # staged files were deleted
        assert c.execute(f"select id, v from {ns}.t").fetchall() == [(1, "keep")]
        with lake.connect() as other:
            assert other.execute(f"select id, v from {ns}.t").fetchall() == [(1, "keep")]


def test_savepoints_rollback_to_and_release(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text)")
        c.execute(f"insert into {ns}.t values (1, 'base')")
        snaps = snapshot_ids(lake.table(ns, "t"))
        c.execute("begin")
        c.execute(f"insert into {ns}.t values (2, 'before sp')")
        c.execute("savepoint s1")
        c.execute(f"insert into {ns}.t values (3, 'undone')")
        c.execute(f"update {ns}.t set v = 'undone' where id = 1")
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (3,)
        c.execute("rollback to savepoint s1")
        assert c.execute(f"select id, v from {ns}.t order by id").fetchall() == [(1, "base"), (2, "before sp")]
        c.execute("savepoint s2")
        c.execute(f"insert into {ns}.t values (4, 'released')")
        c.execute("release savepoint s2")
        # An error after a savepoint is undone by ROLLBACK TO, and the block goes on.
        c.execute("savepoint s3")
        with pytest.raises(psycopg.errors.UndefinedTable):
            c.execute(f"insert into {ns}.missing values (1)")
        c.execute("rollback to savepoint s3")
        c.execute(f"update {ns}.t set v = 'updated' where id = 2")
        c.execute("commit")
        assert c.execute(f"select id, v from {ns}.t order by id").fetchall() == [
            (1, "base"), (2, "updated"), (4, "released")]
        table = lake.table(ns, "t")
        after = snapshot_ids(table)
        assert after[: len(snaps)] == snaps and len(after) == len(snaps) + 1  # one commit, one snapshot
        # Files staged and then undone (or rewritten again) inside the block were deleted.
        referenced = {t.file.file_path.removeprefix("file://")
                      for sid in after for t in table.scan(snapshot_id=sid).plan_files()}
        on_disk = {str(p) for p in Path(table.location().removeprefix("file://")).rglob("*.parquet")}
        assert on_disk == referenced
        with pytest.raises(psycopg.errors.NoActiveSqlTransaction):
            c.execute("savepoint outside")


# --- 6. snapshot isolation ---------------------------------------------------------------------


def test_block_keeps_its_snapshot_and_sees_its_own_writes(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as a, lake.connect() as b:
        ns = lake.fresh_schema(a)
        a.execute(f"create table {ns}.t (id bigint not null)")
        a.execute(f"insert into {ns}.t values (1), (2)")
        a.execute("begin")
        assert a.execute(f"select count(*) from {ns}.t").fetchone() == (2,)
        assert b.execute(f"insert into {ns}.t values (10), (11), (12)").statusmessage == "INSERT 0 3"
        assert b.execute(f"select count(*) from {ns}.t").fetchone() == (5,)
        assert a.execute(f"select count(*) from {ns}.t").fetchone() == (2,)
        a.execute(f"insert into {ns}.t values (100)")
        assert a.execute(f"select id from {ns}.t order by id").fetchall() == [(1,), (2,), (100,)]
        assert b.execute(f"select count(*) from {ns}.t").fetchone() == (5,)  # not yet committed
        a.execute("commit")
        want = [(1,), (2,), (10,), (11,), (12,), (100,)]
        assert a.execute(f"select id from {ns}.t order by id").fetchall() == want
        assert b.execute(f"select id from {ns}.t order by id").fetchall() == want


# --- 7. multi-table transactions, and a foreign writer racing our COMMIT -----------------------

FOREIGN_WRITER = """
import json, sys
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import EqualTo
props, ns, name, key = json.loads(sys.argv[1])
table = load_catalog("icegres", **props).load_table((ns, name))
table.delete(EqualTo("id", key))
print(table.current_snapshot().snapshot_id)
"""


def test_multi_table_commit_is_one_token_and_atomic_under_a_race(any_lake: Lake) -> None:
    lake = any_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.a (id bigint not null, v text)")
        c.execute(f"create table {ns}.b (id bigint not null, v text)")
        c.execute("begin")
        c.execute(f"insert into {ns}.a values (1, 'a1'), (2, 'a2')")
        c.execute(f"insert into {ns}.b values (1, 'b1'), (2, 'b2')")
        c.execute("commit")
        ta, tb = lake.table(ns, "a"), lake.table(ns, "b")
        token_a, token_b = ta.current_snapshot().summary.get(TOKEN), tb.current_snapshot().summary.get(TOKEN)
        assert token_a and token_a == token_b
        assert c.execute(f"select (select count(*) from {ns}.a), (select count(*) from {ns}.b)").fetchone() == (2, 2)

        snap_a, snap_b = ta.current_snapshot().snapshot_id, tb.current_snapshot().snapshot_id
        c.execute("begin")
        assert c.execute(f"update {ns}.a set v = 'ours' where id = 1").statusmessage == "UPDATE 1"
        assert c.execute(f"update {ns}.b set v = 'ours' where id = 1").statusmessage == "UPDATE 1"
        # A foreign writer deletes b's row 1, rewriting the very file our UPDATE rewrote.
        foreign = subprocess.run([sys.executable, "-c", FOREIGN_WRITER, json.dumps([lake.props, ns, "b", 1])],
                                 capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, stdin=subprocess.DEVNULL)
        assert foreign.returncode == 0, foreign.stderr
        foreign_snap = int(foreign.stdout.strip().splitlines()[-1])
        with pytest.raises(psycopg.errors.SerializationFailure) as failed:
            c.execute("commit")
        assert failed.value.sqlstate == "40001"
        ta, tb = lake.table(ns, "a"), lake.table(ns, "b")
        assert ta.current_snapshot().snapshot_id == snap_a  # neither table took our commit
        assert tb.current_snapshot().snapshot_id == foreign_snap
        assert tb.metadata.snapshot_by_id(foreign_snap).parent_snapshot_id == snap_b
        assert c.execute(f"select id, v from {ns}.a order by id").fetchall() == [(1, "a1"), (2, "a2")]
        assert c.execute(f"select id, v from {ns}.b order by id").fetchall() == [(2, "b2")]
        # A later write goes through normally.
        assert c.execute(f"update {ns}.a set v = 'after' where id = 2").statusmessage == "UPDATE 1"
        assert c.execute(f"select v from {ns}.a where id = 2").fetchone() == ("after",)


# --- 8. interoperability with pyiceberg and DuckDB ---------------------------------------------


def _duckdb_scan(metadata_location: str, sql: str) -> list[tuple[Any, ...]]:
    import duckdb

    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions=false")
        con.execute("SET autoload_known_extensions=false")
        for ext in ("avro", "iceberg"):
            module = __import__(f"duckdb_extension_{ext}")
            base = Path(module.__file__).parent if module.__file__ else Path(next(iter(module.__path__)))
            con.execute(f"INSTALL '{base / 'extensions' / f'v{duckdb.__version__}' / f'{ext}.duckdb_extension'}'")
            con.execute(f"LOAD {ext}")
        location = metadata_location.removeprefix("file://")
        table = con.execute(sql.format(scan=f"iceberg_scan('{location}')")).to_arrow_table()
        return [tuple(r.values()) for r in table.to_pylist()]
    finally:
        con.close()


def test_icegres_writes_are_read_by_pyiceberg_and_duckdb(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, s text, n numeric(20,4), d date, ts timestamp, "
                  "tz timestamptz, bin bytea, f double precision)")
        rows = [
            (1, "a, b", D("1234567890123456.7890"), dt.date(1, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 0, 1),
             dt.datetime(2020, 1, 1, 5, 30, tzinfo=IST), b"\x00\x01", 1.25),
            (2, "😀", D("-0.0001"), dt.date(9999, 12, 31), dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
             dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC), b"", -1e300),
            (3, None, None, None, None, None, None, None),
        ]
        c.cursor().executemany(f"insert into {ns}.t values (%s, %s, %s, %s, %s, %s, %s, %s)", rows)
        c.execute(f"update {ns}.t set s = s || '!' where id = 2")
        c.execute(f"delete from {ns}.t where id = 3")
        want = [rows[0], (2, "😀!", *rows[1][2:])]

        table = lake.table(ns, "t")
        got = table.scan().to_arrow().sort_by("id").to_pylist()
        assert [tuple(r.values()) for r in got] == want
        ducks = _duckdb_scan(table.metadata_location, "select * from {scan} order by id")
        assert [r[:3] + r[4:] for r in ducks] == [w[:3] + w[4:] for w in want]
        assert [r[3] for r in ducks] == [dt.date(1, 1, 1), dt.date(9999, 12, 31)]


def test_pyiceberg_writes_are_seen_on_the_next_statement(any_lake: Lake) -> None:
    lake = any_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text)")
        c.execute(f"insert into {ns}.t values (1, 'icegres')")
        table = lake.table(ns, "t")
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.large_string())])
        table.append(pa.table({"id": [2, 3], "v": ["pyiceberg", None]}, schema=schema))
        assert c.execute(f"select id, v from {ns}.t order by id").fetchall() == [(1, "icegres"), (2, "pyiceberg"), (3, None)]
        # And icegres' next write builds on the foreign snapshot.
        assert c.execute(f"update {ns}.t set v = 'both' where id in (1, 2)").statusmessage == "UPDATE 2"
        got = lake.table(ns, "t").scan().to_arrow().sort_by("id")
        assert got.column("v").to_pylist() == ["both", "both", None]


# --- 9. COPY FROM STDIN ------------------------------------------------------------------------


def test_copy_text_and_csv(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text, n integer)")
        cur = c.cursor()
        with cur.copy(f"COPY {ns}.t FROM STDIN") as cp:
            cp.write("1\ttab\\there\t10\n2\tnew\\nline\t\\N\n3\tback\\\\slash\t-3\n4\t\\N\t\\N\n5\t\t0\n")
        assert cur.statusmessage == "COPY 5"
        with cur.copy(f"COPY {ns}.t FROM STDIN WITH (FORMAT csv, HEADER true)") as cp:
            cp.write('id,v,n\n6,"a, b",6\n7,"multi\nline ""quoted""",\n8,,8\n9,"",9\n')
        assert cur.statusmessage == "COPY 4"
        with cur.copy(f"COPY {ns}.t (n, id) FROM STDIN (FORMAT csv)") as cp:
            cp.write("11,10\n")
        assert cur.statusmessage == "COPY 1"
        with cur.copy(f"COPY {ns}.t FROM STDIN") as cp:  # octal and hex byte escapes, UTF-8 across them
            cp.write("12\t\\101\\x42\\303\\251 \\N\t12\n")
        assert cur.statusmessage == "COPY 1"
        assert c.execute(f"select id, v, n from {ns}.t order by id").fetchall() == [
            (1, "tab\there", 10), (2, "new\nline", None), (3, "back\\slash", -3), (4, None, None), (5, "", 0),
            (6, "a, b", 6), (7, 'multi\nline "quoted"', None), (8, None, 8), (9, "", 9), (10, None, 11),
            (12, "ABé N", 12)]


@pytest.mark.parametrize(("payload", "options", "sqlstate"), [
    ("20\tok\t1\n21\ttoo\tmany\tfields\n", "", "22P04"),
    ("20\tok\t1\n21\tmissing\n", "", "22P04"),
    ("20\tok\t1\nnotanumber\tx\t1\n", "", "22P02"),
    ('20,ok,1\n21,"x",1.5\n', " WITH (FORMAT csv)", "22P02"),
    ('20,ok,1\n21,"never closed,1\n', " WITH (FORMAT csv)", "22P04"),
    ("20\t\\303\t1\n", "", "22021"),
])
def test_malformed_copy_commits_nothing(embedded_lake: Lake, payload: str, options: str, sqlstate: str) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text, n integer)")
        c.execute(f"insert into {ns}.t values (1, 'x', 1)")
        snaps = snapshot_ids(lake.table(ns, "t"))
        with pytest.raises(psycopg.Error) as failed, c.cursor().copy(f"COPY {ns}.t FROM STDIN{options}") as cp:
            cp.write(payload)
        assert failed.value.sqlstate == sqlstate, failed.value
        assert snapshot_ids(lake.table(ns, "t")) == snaps
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (1,)


# --- 10. errors --------------------------------------------------------------------------------


def test_write_errors_carry_postgres_sqlstates(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text, n integer)")
        cases = [
            (f"insert into {ns}.t (v) values ('no id')", psycopg.errors.NotNullViolation, "23502"),
            (f"insert into {ns}.t values (null, 'x', 1)", psycopg.errors.NotNullViolation, "23502"),
            (f"update {ns}.t set id = null", None, None),  # matches no rows on an empty table: fine
            (f"insert into {ns}.nope values (1)", psycopg.errors.UndefinedTable, "42P01"),
            ("insert into w_no_such_schema.t values (1)", psycopg.errors.UndefinedTable, "42P01"),
            (f"delete from {ns}.nope", psycopg.errors.UndefinedTable, "42P01"),
            (f"insert into {ns}.t (id, nope) values (1, 2)", psycopg.errors.UndefinedColumn, "42703"),
            (f"update {ns}.t set nope = 1", psycopg.errors.UndefinedColumn, "42703"),
            (f"delete from {ns}.t where nope = 1", psycopg.errors.UndefinedColumn, "42703"),
            (f"insert into {ns}.t (id, n) values (1, 'abc')", psycopg.errors.InvalidTextRepresentation, "22P02"),
            (f"insert into {ns}.t values (1, 'x', 1, 'extra')", psycopg.errors.SyntaxError, "42601"),
            (f"insert into {ns}.t (id, n) values (1, true)", psycopg.errors.DatatypeMismatch, "42804"),
            (f"insert into {ns}.t (id, n) values (1, date '2020-01-01')", psycopg.errors.DatatypeMismatch, "42804"),
            (f"insert into {ns}.t (id, n) values (1, 99999999999)", psycopg.errors.NumericValueOutOfRange, "22003"),
        ]
        for sql, error, sqlstate in cases:
            if error is None:
                assert c.execute(sql).statusmessage == "UPDATE 0"
                continue
            with pytest.raises(error) as raised:
                c.execute(sql)
            assert raised.value.sqlstate == sqlstate, (sql, raised.value)
        for fmt in ("%s", "%b"):  # a typed parameter of the wrong type: never its day number
            with pytest.raises(psycopg.errors.DatatypeMismatch):
                c.execute(f"insert into {ns}.t (id, n) values (%s, {fmt})", (1, dt.date(2020, 1, 1)))
        c.execute(f"insert into {ns}.t values (1, 'ok', 1)")
        with pytest.raises(psycopg.errors.NotNullViolation):
            c.execute(f"update {ns}.t set id = null where id = 1")
        # Names are resolved even when no row matches.
        for sql in (f"update {ns}.t set n = nope where id = -1", f"delete from {ns}.t where nope = 1 and false"):
            with pytest.raises(psycopg.errors.UndefinedColumn):
                c.execute(sql)
        assert c.execute(f"select id, v, n from {ns}.t").fetchall() == [(1, "ok", 1)]
        assert len(lake.table(ns, "t").metadata.snapshots) == 1


def test_error_in_block_aborts_it_until_rollback(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null)")
        snaps = snapshot_ids(lake.table(ns, "t"))
        c.execute("begin")
        c.execute(f"insert into {ns}.t values (1)")
        with pytest.raises(psycopg.errors.NotNullViolation):
            c.execute(f"insert into {ns}.t values (null)")
        for sql in (f"insert into {ns}.t values (2)", f"select count(*) from {ns}.t"):
            with pytest.raises(psycopg.errors.InFailedSqlTransaction) as raised:
                c.execute(sql)
            assert raised.value.sqlstate == "25P02"
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
        assert c.execute("commit").statusmessage == "ROLLBACK"  # COMMIT of a failed block rolls back
        assert c.execute(f"select count(*) from {ns}.t").fetchone() == (0,)
        assert snapshot_ids(lake.table(ns, "t")) == snaps


# --- psql --------------------------------------------------------------------------------------


def test_psql_insert_then_select_in_one_command(embedded_lake: Lake) -> None:
    lake = embedded_lake
    with lake.connect() as c:
        ns = lake.fresh_schema(c)
        c.execute(f"create table {ns}.t (id bigint not null, v text)")
    srv = lake.srv
    env = {**os.environ, "PGCONNECT_TIMEOUT": str(CONNECT_TIMEOUT_S)}
    proc = subprocess.run(
        ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", srv.host, "-p", str(srv.port), "-U", srv.user,
         "-d", srv.database, "-c", f"insert into {ns}.t values (1, 'one'), (2, 'two'); select id, v from {ns}.t order by id"],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr
    # psql 15 prints every result of a multi-statement -c, the INSERT's tag included.
    assert proc.stdout.splitlines() == ["INSERT 0 2", "1|one", "2|two"]
    proc = subprocess.run(
        ["psql", "-X", "-h", srv.host, "-p", str(srv.port), "-U", srv.user, "-d", srv.database,
         "-c", f"insert into {ns}.t values (3, 'three')", "-c", f"update {ns}.t set v = 'x' where id < 3",
         "-c", f"delete from {ns}.t where id = 1"],
        capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, stdin=subprocess.DEVNULL, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["INSERT 0 1", "UPDATE 2", "DELETE 1"]


def test_create_table_as_first_statement_mounts_what_it_reads(tmp_path: Path) -> None:
    """CREATE TABLE AS as a server's first statement over a table it has not mounted yet (lazy
    mounting): it read no table and answered 42P01 before its source was refreshed for."""
    from icegres.engine.catalog import Lakehouse

    data_dir = tmp_path / "lake"
    lake = Lakehouse.embedded(data_dir)
    lake.create_namespace_if_missing("demo")
    lake.create_table("demo", "src", pa.schema([("id", pa.int64())])).append(
        pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    with running_icegres(data_dir) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert c.execute("create table demo.copy as select id from demo.src where id > 1").statusmessage == "SELECT 2"
        assert c.execute("select id from demo.copy order by id").fetchall() == [(2,), (3,)]
