"""PostgreSQL's to_char templates (DataFusion printed them back as text), checked against a real
PostgreSQL 15: fixed templates, generated ones, and the patterns refused by name."""

from __future__ import annotations

import os
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icegres.engine.to_char import chrono_format
from icegres.pg.errors import PgError
from tests.support.differential import engine_session, ours, theirs
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
    return engine_session(tmp_path_factory.mktemp("lake"))


_ours, _theirs = ours, theirs


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
