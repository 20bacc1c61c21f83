"""A cast of a multi-megabyte string to a number is an error, not a crash: arrow-rs parses it
recursively, and on a thread with the system's 8 MB stack a 5 MB string's cast killed the whole
server with SIGSEGV (icegres/stacks.py). As a constant folded while planning, over a table's
value in the server, and in an execution process."""

from __future__ import annotations

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

LONG = 5_000_000


def test_long_strings_cast_to_numbers_fail_with_22p02_and_the_server_stays_up(tmp_path) -> None:
    with running_icegres(tmp_path / "data") as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        # (100 MB: past the 256 MB stacks of before, which it needs ~260 MB of)
        for sql in (f"SELECT repeat('1', {LONG})::numeric(38, 2)", f"SELECT repeat('7', {LONG})::bigint",
                    "SELECT repeat('1', 100000000)::numeric"):
            with pytest.raises(psycopg.Error) as failed:
                conn.execute(sql)
            assert failed.value.sqlstate in ("22P02", "22003"), sql
        conn.execute("CREATE TABLE public.long_text (id int, s text)")
        conn.execute("INSERT INTO public.long_text VALUES (1, %s), (2, '12')", ("9" * LONG,))
        for sql in ("SELECT id, s::numeric(10, 0) FROM public.long_text",
                    "SELECT id, s::bigint FROM public.long_text WHERE id > 0",
                    "SELECT max(s::numeric(20, 2)) FROM public.long_text"):
            with pytest.raises(psycopg.Error) as failed:
                conn.execute(sql)
            assert failed.value.sqlstate in ("22P02", "22003"), sql
        assert conn.execute("SELECT id, s::int FROM public.long_text WHERE id = 2").fetchall() == [(2, 12)]
        assert conn.execute("SELECT 1").fetchone() == (1,)
