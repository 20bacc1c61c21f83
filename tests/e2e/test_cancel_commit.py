"""A cancel that lands after a commit reached the catalog must not undo or misreport it.

statement_timeout fires while the server is held (fault point `after-publish`) between the
catalog accepting the commit and the client's answer. PostgreSQL finishes a COMMIT it has made
durable; so must icegres: the statement succeeds, and the committed data files stay readable.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e


def test_statement_timeout_after_the_commit_landed_keeps_the_commit(tmp_path: Path) -> None:
    data_dir = tmp_path / "lake"
    with running_icegres(data_dir, env={"ICEGRES_FAULTS": "after-publish=sleep:1.5"}) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as conn:
            conn.execute("create table t (id int, v text)")
            conn.execute("set statement_timeout = 300")
            conn.execute("insert into t values (1, 'a'), (2, 'b')")  # held 1.5 s after publishing
            assert conn.execute("select count(*) from t").fetchone() == (2,)
            with conn.transaction():
                conn.execute("insert into t values (3, 'c')")
            conn.execute("set statement_timeout = 0")
            assert conn.execute("select id, v from t order by id").fetchall() == [(1, "a"), (2, "b"), (3, "c")]
