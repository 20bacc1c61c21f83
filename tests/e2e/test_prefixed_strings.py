"""String constants with a prefix — `N'…'`, `U&'…'` (with `UESCAPE`), `B'…'`, `X'…'` — on icegres
and on a real PostgreSQL 15. N'' and U&'' must read as PostgreSQL reads them, in queries and in
writes, with its errors for bad escapes (DataFusion planned neither: 0A000 "Unsupported Value").
B'' and X'' are bit strings to PostgreSQL, a type icegres has not: refused with 0A000 (DataFusion
read X'1F' as the byte 0x1f, a bytea where PostgreSQL answers the bit string 00011111)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.support.differential import outcome
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

SAME = [
    "select N'abc', n'it''s'",
    "select U&'d\\0061t\\+000061', U&'\\00e9\\\\', U&'\\D83D\\DE00'",
    "select U&'d!0061t!!' UESCAPE '!'",
    "select length(U&'\\00e9x'), upper(N'abc') || 'd'",
    "select U&'\\0000'",  # 42601 invalid Unicode escape value
    "select U&'\\D83D'",  # 42601 invalid Unicode surrogate pair
    "select U&'\\12'",  # 42601 invalid Unicode escape (and its HINT)
    "select U&'\\+110000'",
    "select U&'a' UESCAPE '+'",
    "create table ps (id int, s text)",
    "insert into ps values (1, N'national'), (2, U&'\\0041\\0042')",
    "update ps set s = U&'x\\0043' where id = 2",
    "select id, s from ps where s = N'national' or s = U&'x\\0043' order by id",
    "delete from ps where s = U&'national'",
    "select id, s from ps order by id",
]


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("strings") / "lake") as srv:
        yield srv


def test_national_and_unicode_escaped_strings_read_as_postgresql_reads_them(icegres, real_postgres):
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg, \
            psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        for conn in (pg, ig):
            outcome(conn, "drop table if exists ps")
        for sql in SAME:
            theirs = outcome(pg, sql)
            assert outcome(ig, sql) == theirs, sql
            assert theirs[0] == "ok" or theirs[1] == "42601", sql  # (the script itself is right)


@pytest.mark.parametrize("sql", ["select B'101'", "select X'1F'", "select x'1f' || B'0'",
                                 "select 1 where B'1' is not null"])
def test_bit_string_constants_are_refused_not_misread(icegres, real_postgres, sql):
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        assert outcome(pg, sql)[0] == "ok"  # (PostgreSQL reads a bit string)
    with psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        with pytest.raises(psycopg.errors.FeatureNotSupported, match="bit string"):
            ig.execute(sql)
        assert ig.execute("select 'tax', 'box'").fetchone() == ("tax", "box")  # (a string ending in x)
