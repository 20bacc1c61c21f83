"""A big DML statement's literals as PostgreSQL reads them: a statement over 64 KiB has its string
literals over 4 KiB made parameters (protocol/pgwire/statements.py), which the engine keeps only
where the literal is text by context and writes back elsewhere (engine/big_values.py). Each
statement runs on icegres and on a real PostgreSQL 15; both must agree on the outcome (command
tag or SQLSTATE) and, after it, on what the table holds (values compared by md5 and length)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.support.differential import outcome
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

BIG = "abc'é\\" * 20_000  # 120,000 characters: a quote, a backslash, a two-byte character
HEX = bytes(range(256)).hex() * 160  # a bytea's hex input of 81,920 characters
PAD = " " * 70_000  # around a number: its input function skips them
ZEROS = "0" * 70_000  # before a number's digits

SCRIPT = [
    "insert into bw values (1, 'a', 'x', 'y', null, 1), (2, 'b', 'x', 'y', null, 2)",
    "update bw set s = '<big>' where id = 1",  # a text column's value: a parameter
    "update bw set s = s || '<big>' where id = 2",  # `||` with a text column: a parameter
    "update bw set b = '\\x<hex>' where id = 1",  # a bytea's hex: bound to its bytes
    "insert into bw (id, b) values (6, '\\x<hex>')",
    "insert into bw (id, b) select 7, '\\x<hex>'",
    "update bw set b = '\\x<hex>0' where id = 1",  # odd digits: written back, 22P02
    "update bw set b = '\\x<hex>zz' where id = 1",  # a bad digit: 22P02
    "update bw set b = '\\x<hex> 00' where id = 1",  # whitespace between bytes: written back
    "update bw set b = '<big>' where id = 2",  # the escape format (a bad escape here): 22P02
    "update bw set n = '<big>' where id = 1",  # not a number: 22P02
    "update bw set v = '<big>' where id = 1",  # varchar(5): 22001
    "update bw set c = '<big>' where id = 1",  # char(3): 22001
    "update bw set s = 'q' where id = '<big>'",  # compared with an integer: 22P02
    # compared with an integer column: read by its input function (a cast to it, bound as text)
    "update bw set s = 'q2' where id = '<zeros>2'",
    "update bw set v = 'w' where '<pad>1<pad>' <= bw.id and id < '<pad>3'",
    "update bw set s = 'r' where id >= '<pad>1x'",  # 22P02
    "update bw set s = 'q' where s like '<big>%'",
    "delete from bw where s <> '<big>' and id = 2",
    "insert into bw (id, s) values (3, '<big>')",  # an omitted column (its NULL)
    "insert into bw (id, s) select 4, '<big>'",
    "insert into bw (id, n) values (9, '<big>')",  # 22P02
    "merge into bw using (select 3 as id union all select 5) src on bw.id = src.id "
    "when matched then update set s = '<big>' when not matched then insert (id, s) values (src.id, '<big>')",
    # a string function's argument: a parameter (text, as PostgreSQL resolves it)
    "update bw set s = upper('<big>') where id = 1",
    "update bw set n = length('<big>') where id = 2",
    "update bw set s = md5('<big>') || lower('<big>') where id = 2",
    "insert into bw (id, s) values (10, concat('<big>', 'x'))",
    "update bw set v = left('<big>', 3) where s = replace('<big>', '<', 'x') || 'x'",
    "delete from bw where strpos(s, '<big>') > 0 and id = 1",
    "update bw set n = left('<big>', 3) where id = 2",  # a string into a number: 22P02
    # a value assigned to a number or char(n) column: read by the type's input function
    "update bw set n = '<pad>12.5<pad>' where id = 1",
    "update bw set n = '<zeros>7', id = '<pad>11<pad>' where id = 2",
    "update bw set c = '<pad>' where id = 1",  # char(3): trailing spaces are cut, not 22001
    "insert into bw (id, n, c) values ('<zeros>12', '<pad>-3.25', 'z<pad>')",
    "insert into bw (id, n) select '<pad>13', '<zeros>1.5'",
    "merge into bw using (select 14 as id) src on bw.id = src.id "
    "when not matched then insert (id, n, c) values (src.id, '<zeros>0.5<pad>', '<pad>')",
    "update bw set n = '<pad>1x' where id = 1",  # 22P02
    "update bw set s = 'q' || '<big>' || 7, c = 'z' where 'a' < '<big>' and id = 1",  # text beside text, numbers
    "update bw set s = 1.5 || ('<big>' || s) where id = 2",
    "insert into bw values ($1, '<big>')",  # a simple Query's own $1: 42P02
    "update bw set s = '<big>' where id = $1",  # 42P02
]
DUMP = "select id, md5(s), length(s), v, c, md5(b), n from bw order by id"  # (not length(b): XX000 for non-UTF-8 bytes, a bug of its own)


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("bigliterals") / "lake") as srv:
        yield srv


def test_big_literals_in_writes_are_read_as_postgresql_reads_them(icegres, real_postgres):
    create = "create table bw (id int, s text, v varchar(5), c char(3), b bytea, n numeric(10, 2))"
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        for conn in (pg, ig):
            outcome(conn, "drop table if exists bw")
            assert outcome(conn, create)[0] == "ok"
        for statement in SCRIPT:
            sql = statement.replace("<big>", BIG.replace("'", "''")).replace("<hex>", HEX)
            sql = sql.replace("<pad>", PAD).replace("<zeros>", ZEROS)
            assert len(sql) > 64 * 1024 or "<" not in statement  # (compacted: its literal a parameter)
            assert outcome(ig, sql) == outcome(pg, sql), statement
            assert outcome(ig, DUMP) == outcome(pg, DUMP), statement


# A column's big DEFAULT: a parameter when the engine evaluates it (engine/dml/defaults.py), as a
# declared default is checked and as an INSERT that leaves its column out fills it.
DDL_SCRIPT = [
    "create table bd (id int, s text default '<big>', n numeric(10, 2) default '<pad>4.5<pad>', "
    "c char(3) default 'q<pad>')",
    "insert into bd (id) values (1)",
    "insert into bd (id, s) values (2, 'x')",
    "insert into bd (id, n) select 3, 1",
    "alter table bd alter column s set default '<big>x'",
    "alter table bd alter column n set default '<zeros>8'",
    "insert into bd (id) values (4)",
    "create table bd2 (id int, n int default '<big>')",  # 22P02 when declared
    "create table bd3 (id int, v varchar(5) default '<big>')",
    "alter table bd alter column n set default '<pad>x'",  # 22P02
    "alter table bd add column t text default '<big>'",  # existing rows take it too
    "insert into bd (id) values (5)",
    "select id, md5(t) from bd order by id",
    # A CREATE TABLE's, ALTER TABLE's or COMMENT ON's big literal is a parameter too, read by the
    # DDL parser as a DEFAULT's, CHECK's or COMMENT's text (engine/ddl_literals.py), and the
    # text is kept in a file beside the table's metadata (engine/long_texts.py).
    "comment on table bd is '<big>'",
    "comment on column bd.s is '<big>c'",
    "select md5(obj_description('bd'::regclass)), md5(col_description('bd'::regclass, 2)), "
    "length(col_description('bd'::regclass, 2))",
    "alter table bd add constraint bd_big check (s <> '<big>y')",
    "insert into bd (id, s) values (6, '<big>y')",  # 23514
    "insert into bd (id, s) values (6, '<big>z')",
    "create table bd4 (id int, s text check (s < '<big>'), d text default lower('<big>'))",
    "insert into bd4 (id) values (1)",
    "insert into bd4 (id, s) values (2, '<big>')",  # 23514
    "select id, md5(s), md5(d) from bd4 order by id",
    "alter table bd4 alter column d set default '<big>' || 'q'",
    "insert into bd4 (id) values (3)",
    "select id, md5(d) from bd4 order by id",
    "comment on table bd is null",
    "select obj_description('bd'::regclass)",
    # a big literal of a table DDL anywhere else: the statement is parsed as written
    "create table bd5 as select '<big>'::text as s",
    "select md5(s) from bd5",
    "create table bd6 (id int default '<big>')",  # 22P02
]
DDL_DUMP = "select id, md5(s), length(s), n, c from bd order by id"


def test_big_defaults_are_read_as_postgresql_reads_them(icegres, real_postgres):
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        for conn in (pg, ig):
            for table in ("bd", "bd2", "bd3", "bd4", "bd5", "bd6"):
                outcome(conn, f"drop table if exists {table}")
        for statement in DDL_SCRIPT:
            sql = statement.replace("<big>", BIG.replace("'", "''")).replace("<pad>", PAD).replace("<zeros>", ZEROS)
            assert outcome(ig, sql) == outcome(pg, sql), statement
            if statement.startswith(("insert", "alter")):
                assert outcome(ig, DDL_DUMP) == outcome(pg, DDL_DUMP), statement


# A 5 MB value written into one row of a table of 1,000 (one data file): joined onto each row it
# would be 5 GB of strings, past a string array's 2 GB ("offset overflow", XX000, before).
MANY_ROWS_SCRIPT = [
    "update bm set s = '<5mb>' where id = 5",
    "update bm set s = s || '<5mb>' where id = 7",
    "delete from bm where s = '<5mb>'",
    "update bm set s = '<5mb>' where s <> '<5mb>' and id between 8 and 9",
    "merge into bm using (select 11 as id) src on bm.id = src.id when matched then update set s = '<5mb>'",
]
MANY_ROWS_DUMP = "select id, md5(s), length(s) from bm where length(s) > 1 order by id"


def test_a_big_value_written_into_one_row_of_many(icegres, real_postgres):
    big = "abcdefghi\u00e9" * 500_000
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        for conn in (pg, ig):
            outcome(conn, "drop table if exists bm")
            assert outcome(conn, "create table bm (id int, s text)")[0] == "ok"
            assert outcome(conn, "insert into bm select g, 'x' from generate_series(1, 1000) g")[0] == "ok"
        for statement in MANY_ROWS_SCRIPT:
            sql = statement.replace("<5mb>", big)
            assert outcome(ig, sql) == outcome(pg, sql), statement
            assert outcome(ig, MANY_ROWS_DUMP) == outcome(pg, MANY_ROWS_DUMP), statement
        assert outcome(ig, "select count(*) from bm") == outcome(pg, "select count(*) from bm")
