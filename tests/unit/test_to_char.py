"""PostgreSQL's to_char templates, times given to the minute, and generate_series in a select list:
what DataFusion ran differently (the template printed back, a parse error when the plan ran, one
list instead of rows), checked statement by statement against a real PostgreSQL 15."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icegres.engine.catalog import Lakehouse
from icegres.engine.engine import Engine, SessionEnv
from icegres.engine.to_char import chrono_format
from icegres.protocol.pgwire.errors import PgError
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)

pytestmark = pytest.mark.unit

STAMPS = ("2024-05-06 07:08:09.123456", "1999-12-31 23:59:59", "2024-01-01 00:00:00.5", "2023-01-02 12:00:00")
TEMPLATES = (
    "YYYY-MM-DD", "yyyy-mm-dd hh24:mi:ss", "HH12:MI:SS.MS AM", "HH:MI:SS.US pm", "DD Mon YYYY",
    "FMDD/FMMM/YY", "FMDay, FMMonth DD", "Dy DDD IW IYYY ID", 'YYYY"-Q"MM', "FMHH24h FMMIm",
    'DD.MM.YYYY "100%"', "YYYYMMDD\\THH24MISS", "FMDDD", "MonDD", "FM-DD", "FMFMDD", "FM",
)


@pytest.fixture(scope="module")
def qctx(tmp_path_factory: pytest.TempPathFactory) -> Any:
    lake = Lakehouse.embedded(tmp_path_factory.mktemp("lake"))
    lake.create_namespace_if_missing("demo")
    t = lake.catalog.create_table(("demo", "t"), schema=pa.schema([pa.field("id", pa.int64())]))
    t.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    engine = Engine(lake)
    engine.refresh()
    return engine.open_session(SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))


def _ours(qctx: Any, sql: str) -> list[tuple[str | None, ...]]:
    _, stream = qctx.start(sql)
    rows: list[tuple[str | None, ...]] = []
    for batch in stream:
        table = batch.to_pyarrow()
        rows.extend(tuple(None if v is None else str(v) for v in row.values()) for row in table.to_pylist())
    return rows


def _theirs(pg: psycopg.Connection, sql: str) -> list[tuple[str | None, ...]]:
    return [tuple(None if v is None else str(v) for v in row) for row in pg.execute(sql).fetchall()]


@pytest.mark.parametrize("template", TEMPLATES)
def test_to_char_prints_what_postgresql_prints(qctx: Any, real_postgres: Any, template: str) -> None:  # noqa: F811
    quoted = template.replace("'", "''")
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        for stamp in STAMPS:
            sql = f"select to_char(timestamp '{stamp}', '{quoted}')"
            assert _ours(qctx, sql) == _theirs(pg, sql), sql


@pytest.mark.parametrize("template, pattern", [
    ("Q", "Q"), ("YYYY-D", "D"), ("Month", "Month"), ("MON", "MON"), ("mon", "mon"), ("TZ", "TZ"),
    ("DDth", "th"), ("RM", "RM"), ("Y,YYY", "Y,YYY"), ("SSSS", "SSSS"),
])
def test_patterns_chrono_cannot_print_exactly_are_refused_by_name(qctx: Any, template: str, pattern: str) -> None:
    with pytest.raises(PgError) as caught:
        chrono_format(template)
    assert caught.value.sqlstate == "0A000" and f'"{pattern}"' in caught.value.message
    with pytest.raises(PgError) as caught:
        _ours(qctx, f"select to_char(timestamp '2024-05-06 07:08:09', '{template}')")
    assert caught.value.sqlstate == "0A000"


def test_a_template_that_is_no_constant_is_refused_not_printed_back(qctx: Any) -> None:
    with pytest.raises(PgError) as caught:
        _ours(qctx, "select to_char(timestamp '2024-05-06 07:08:09', 'YYYY' || 'MM')")
    assert caught.value.sqlstate == "0A000"


@pytest.mark.parametrize("sql", [
    "select timestamp '2024-01-01 10:00' + interval '90 minutes'",
    "select '2024-01-01 10:00'::timestamptz",
    "select time '10:30'",
    "select timestamp '2024-01-01T09:05'",
    "select count(*) from t where timestamp '2024-01-01 10:00' < timestamp '2024-01-01 10:00:01'",
    "select generate_series(1, 3)",
    "select generate_series(1, 7, 3) as n, 'x' as tag",
    "select * from generate_series(1, 10, 3)",
    "select sum(n) from generate_series(1, 4) g(n)",
])
def test_statements_datafusion_ran_otherwise_give_postgresqls_rows(qctx: Any, real_postgres: Any, sql: str) -> None:  # noqa: F811
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        pg.execute("create temp table t (id bigint)")
        pg.execute("insert into t values (1), (2)")
        theirs = _theirs(pg, sql)
    ours = _ours(qctx, sql)
    if theirs and "+00:00" in (theirs[0][0] or ""):
        ours = [tuple(v.replace("+00:00", "") if v else v for v in row) for row in ours]
        theirs = [tuple(v.replace("+00:00", "") if v else v for v in row) for row in theirs]
    assert ours == theirs


_PIECES = ["YYYY", "yyyy", "YY", "MM", "mm", "DD", "DDD", "HH24", "HH12", "HH", "MI", "SS", "MS", "US", "AM", "pm",
           "Mon", "Dy", "FMDay", "FMMonth", "IW", "IYYY", "ID", "FM", "Q", "D", "W", "MON", "TZ", "th",
           "TM", "tm", "FX", "SP", "Fm", "I", "Mm", '"', "-", "/", ":", " ", ".", ",", "T", "x", "%", '"at"',
           '"a\\"b"', "\\", "é", "5"]


@settings(max_examples=int(os.environ.get('TO_CHAR_EXAMPLES', '150')), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6), stamp=st.sampled_from(STAMPS))
def test_any_template_prints_what_postgresql_prints_or_is_refused(qctx: Any, real_postgres: Any,  # noqa: F811
                                                                   pieces: list[str], stamp: str) -> None:
    template = "".join(pieces)
    sql = f"select to_char(timestamp '{stamp}', '{template.replace(chr(39), chr(39) * 2)}')"
    try:
        ours = _ours(qctx, sql)
    except PgError as exc:
        assert exc.sqlstate == "0A000", (sql, exc.message)
        return
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        assert ours == _theirs(pg, sql), sql
