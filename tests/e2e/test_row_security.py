"""Row-level security beside a real PostgreSQL 15: the same policies, the same statements by the
same roles (SET ROLE in a superuser's session), the same rows, tags, SQLSTATEs and messages; then
what icegres adds to PostgreSQL's surface and must not leak through: metadata tables, EXPLAIN,
time travel, prepared statements described by one role and run by another."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.support.differential import outcome
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("rls") / "data") as server:
        yield server


@pytest.fixture()
def n() -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    return {"s": f"rls_{tag}", "alice": f"alice_{tag}", "bob": f"bob_{tag}"}


def _setup(n: dict[str, str]) -> list[str]:
    s, alice, bob = n["s"], n["alice"], n["bob"]
    return [
        f"CREATE SCHEMA {s}",
        f"CREATE TABLE {s}.docs (id int, owner text, body text, level int)",
        f"INSERT INTO {s}.docs VALUES (1, '{alice}', 'a1', 1), (2, '{bob}', 'b1', 1), "
        f"(3, '{alice}', 'a2', 5), (4, 'carol', 'c1', 2)",
        f"CREATE ROLE {alice}",
        f"CREATE ROLE {bob}",
        f"GRANT USAGE ON SCHEMA {s} TO {alice}, {bob}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.docs TO {alice}, {bob}",
        f"ALTER TABLE {s}.docs ENABLE ROW LEVEL SECURITY",
        f"CREATE POLICY own ON {s}.docs USING (owner = current_user)",
        f"CREATE POLICY low ON {s}.docs AS RESTRICTIVE FOR SELECT USING (level < 5)",
        f"GRANT CREATE ON SCHEMA {s} TO {alice}",
        f"CREATE TABLE {s}.private (x int)",
        f"INSERT INTO {s}.private VALUES (42)",
    ]


def _script(n: dict[str, str]) -> list[str]:
    s, alice, bob = n["s"], n["alice"], n["bob"]
    return [
        f"CREATE POLICY own ON {s}.docs USING (true)",  # 42710
        # Views read their tables as their owner: under the owner's policies and privileges.
        f"CREATE VIEW {s}.everything AS SELECT id FROM {s}.docs",
        f"GRANT SELECT ON {s}.everything TO {alice}",
        f"SET ROLE {alice}",
        f"CREATE VIEW {s}.mine AS SELECT id, body FROM {s}.docs",
        f"SELECT id, body FROM {s}.mine ORDER BY id",
        f"SELECT count(*) FROM {s}.everything",
        f"CREATE VIEW {s}.peek AS SELECT * FROM {s}.private",
        f"SELECT * FROM {s}.peek",
        f"SELECT * FROM (SELECT id FROM {s}.mine) m JOIN {s}.everything e USING (id) ORDER BY 1",
        "RESET ROLE",
        f"DROP VIEW {s}.mine",
        f"DROP VIEW {s}.peek",
        f"DROP VIEW {s}.everything",
        # ... unless made WITH (security_invoker): then as the reader.
        f"CREATE VIEW {s}.as_reader WITH (security_invoker = true) AS SELECT id FROM {s}.docs",
        f"CREATE VIEW {s}.private_reader WITH (security_invoker) AS SELECT * FROM {s}.private",
        f"GRANT SELECT ON {s}.as_reader, {s}.private_reader TO {alice}",
        f"SET ROLE {alice}",
        f"SELECT id FROM {s}.as_reader ORDER BY id",
        f"SELECT * FROM {s}.private_reader",
        "RESET ROLE",
        f"CREATE OR REPLACE VIEW {s}.private_reader AS SELECT * FROM {s}.private",
        f"SET ROLE {alice}",
        f"SELECT * FROM {s}.private_reader",
        "RESET ROLE",
        f"CREATE VIEW {s}.bad WITH (security_invoker = maybe) AS SELECT 1",
        f"DROP VIEW {s}.as_reader",
        f"DROP VIEW {s}.private_reader",
        f"CREATE POLICY bad ON {s}.docs USING (no_such_column = 1)",  # 42703
        f"SET ROLE {alice}",
        f"SELECT id, body FROM {s}.docs ORDER BY id",
        f"SELECT count(*) FROM {s}.docs d1 JOIN {s}.docs d2 ON d1.id = d2.id",
        f"SELECT id FROM {s}.docs WHERE id = 2",
        f"WITH c AS (SELECT * FROM {s}.docs) SELECT count(*) FROM c",
        f"SELECT (SELECT count(*) FROM {s}.docs), (SELECT max(level) FROM {s}.docs)",
        f"SELECT id FROM {s}.docs WHERE id IN (SELECT id FROM {s}.docs WHERE level > 0) ORDER BY 1",
        f"UPDATE {s}.docs SET body = 'x'",
        f"UPDATE {s}.docs SET body = 'y' WHERE id = 2",
        f"DELETE FROM {s}.docs WHERE id = 4",
        f"INSERT INTO {s}.docs VALUES (5, '{bob}', 'forged', 1)",
        f"INSERT INTO {s}.docs VALUES (6, '{alice}', 'mine', 1)",
        f"UPDATE {s}.docs SET owner = '{bob}' WHERE id = 6",
        f"UPDATE {s}.docs SET level = level + 1 WHERE id = 6 RETURNING id, level",
        f"DELETE FROM {s}.docs WHERE id = 6",
        f"ALTER TABLE {s}.docs DISABLE ROW LEVEL SECURITY",  # 42501: not the owner
        f"DROP POLICY own ON {s}.docs",  # 42501
        "RESET ROLE",
        f"SELECT id, owner, body FROM {s}.docs ORDER BY id",
        f"SET ROLE {bob}",
        f"SELECT id, body FROM {s}.docs ORDER BY id",
        f"INSERT INTO {s}.docs SELECT id + 100, owner, body, level FROM {s}.docs",
        "RESET ROLE",
        f"SELECT count(*) FROM {s}.docs",
        f"ALTER POLICY own ON {s}.docs TO {bob}",
        f"SET ROLE {alice}",
        f"SELECT count(*) FROM {s}.docs",  # default deny: no permissive policy applies
        "RESET ROLE",
        f"ALTER TABLE {s}.docs DISABLE ROW LEVEL SECURITY",
        f"SET ROLE {alice}",
        f"SELECT count(*) FROM {s}.docs",
        "RESET ROLE",
        f"DROP POLICY own ON {s}.docs",
        f"DROP POLICY missing ON {s}.docs",
        f"DROP POLICY IF EXISTS missing ON {s}.docs",
    ]


def _teardown(n: dict[str, str]) -> list[str]:
    return [f"DROP TABLE IF EXISTS {n['s']}.docs", f"DROP TABLE IF EXISTS {n['s']}.private", f"DROP SCHEMA IF EXISTS {n['s']}",
            f"DROP ROLE IF EXISTS {n['alice']}", f"DROP ROLE IF EXISTS {n['bob']}"]


def _run(dsn: str, n: dict[str, str]) -> tuple[list, list, list]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return ([outcome(conn, sql) for sql in _setup(n)], [outcome(conn, sql) for sql in _script(n)],
                [outcome(conn, sql) for sql in _teardown(n)])


def test_policies_filter_and_check_rows_as_postgresql_does(icegres: IcegresServer, real_postgres, n) -> None:
    ours, theirs = _run(icegres.dsn(), n), _run(real_postgres.dsn(), n)
    assert all(o[0] == "ok" for o in theirs[0]), theirs[0]
    assert ours[0] == theirs[0]
    for sql, mine, pg in zip(_script(n), ours[1], theirs[1], strict=True):
        if pg[0] == "error" and pg[1] == "42703":
            assert mine[:2] == pg[:2], sql  # (DataFusion words an unknown column its own way)
            continue
        assert mine == pg, sql
    assert ours[2] == theirs[2]


def test_nothing_of_a_hidden_row_leaks_through_icegres_own_surfaces(icegres: IcegresServer, n) -> None:
    s, alice = n["s"], n["alice"]
    with psycopg.connect(icegres.dsn(), autocommit=True) as admin:
        for sql in _setup(n):
            admin.execute(sql)
        admin.execute(f"INSERT INTO {s}.docs VALUES (7, 'carol', 'secret-7', 1)")
    try:
        with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
            conn.execute(f"SET ROLE {alice}")
            # The metadata tables carry column bounds of every row: refused, not filtered.
            for meta in ("files", "partitions", "entries"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security|permission denied"):
                    conn.execute(f'SELECT * FROM {s}."docs${meta}"')
            # EXPLAIN plans the filtered statement; no plan text names a hidden value.
            plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN SELECT * FROM {s}.docs").fetchall())
            assert "secret-7" not in plan
            # A cast error that would echo a hidden row's value is never reached: the hidden rows
            # are gone before any expression of the statement sees them.
            with pytest.raises(psycopg.errors.InvalidTextRepresentation) as cast:
                conn.execute(f"SELECT body::int FROM {s}.docs")
            assert "secret-7" not in str(cast.value) and "a1" in str(cast.value)
            # Nor a predicate of the statement that fails on a hidden row (a side channel): it
            # must never be evaluated on one (the role's condition is a security barrier).
            assert conn.execute(f"SELECT id FROM {s}.docs WHERE 1 / (CASE WHEN body = 'secret-7' "
                                "THEN 0 ELSE 1 END) = 1").fetchall() == [(1,)]
            assert conn.execute(f"SELECT id FROM {s}.docs WHERE CASE WHEN body = 'secret-7' "
                                "THEN body::int ELSE 1 END = 1").fetchall() == [(1,)]
            joined = conn.execute(f"SELECT count(*) FROM {s}.docs d JOIN (VALUES ('secret-7')) v(x) "
                                  "ON 1 / (CASE WHEN d.body = v.x THEN 0 ELSE 1 END) = 1").fetchone()
            assert joined == (1,)
            # EXPLAIN shows the plan the role's query runs: with its condition.
            plan = "\n".join(r[1] for r in conn.execute(f"EXPLAIN SELECT id FROM {s}.docs").fetchall())
            assert "current_user" in plan.lower() or alice in plan
            # One shape, many values: the secured text is reused by shape (row_security._Template)
            # and must carry each statement's own values, never let one through unfiltered.
            for _ in range(2):
                for ident, expected in ((1, [(1,)]), (7, []), (2, []), (1, [(1,)])):
                    got = conn.execute(f"SELECT id FROM {s}.docs WHERE id = {ident}").fetchall()
                    assert got == expected, ident
                for body, expected in (("a1", [(1,)]), ("secret-7", []), ("it's", [])):
                    quoted = body.replace("'", "''")
                    assert conn.execute(f"SELECT id FROM {s}.docs WHERE body = '{quoted}'").fetchall() == expected
            rows = conn.execute(f"SELECT id FROM {s}.docs WHERE body = 'secret-7'").fetchall()
            assert rows == []
            # A statement prepared (described) by the superuser and executed as alice is filtered.
            conn.execute("RESET ROLE")
            with conn.cursor() as cur:
                cur.execute(f"SELECT id FROM {s}.docs WHERE id > %s ORDER BY id", (0,), prepare=True)
                assert [r[0] for r in cur.fetchall()] == [1, 2, 3, 4, 7]
                conn.execute(f"SET ROLE {alice}")
                cur.execute(f"SELECT id FROM {s}.docs WHERE id > %s ORDER BY id", (0,), prepare=True)
                assert [r[0] for r in cur.fetchall()] == [1]
            # COPY TO and a cursor read through the same policies.
            with conn.cursor() as cur:
                with cur.copy(f"COPY {s}.docs (id, body) TO STDOUT") as copy:
                    copied = b"".join(bytes(block) for block in copy)
                assert b"secret-7" not in copied and copied.startswith(b"1\ta1")
            with conn.transaction():
                conn.execute(f"DECLARE c CURSOR FOR SELECT id FROM {s}.docs ORDER BY id")
                assert conn.execute("FETCH ALL FROM c").fetchall() == [(1,)]
            # Time travel reads the same policies.
            conn.execute("RESET ROLE")
            snapshot = conn.execute(f'SELECT snapshot_id FROM {s}."docs$snapshots" ORDER BY committed_at DESC LIMIT 1').fetchone()[0]
            conn.execute(f"SET ROLE {alice}")
            travelled = conn.execute(f"SELECT id FROM {s}.docs FOR SYSTEM_VERSION AS OF {snapshot} ORDER BY id").fetchall()
            assert travelled == [(1,)]
    finally:
        with psycopg.connect(icegres.dsn(), autocommit=True) as admin:
            for sql in _teardown(n):
                outcome(admin, sql)


def test_a_masked_column_shows_its_mask_to_the_roles_named_and_nothing_else_tells_the_value(icegres: IcegresServer, n) -> None:
    s, alice, bob = n["s"], n["alice"], n["bob"]
    with psycopg.connect(icegres.dsn(), autocommit=True) as admin:
        for sql in (f"CREATE SCHEMA {s}", f"CREATE TABLE {s}.people (id int, email text, phone text)",
                    f"INSERT INTO {s}.people VALUES (1, 'ann@x.org', '555-0101'), (2, 'ben@y.org', '555-0202')",
                    f"CREATE ROLE {alice}", f"CREATE ROLE {bob}",
                    f"GRANT USAGE ON SCHEMA {s} TO {alice}, {bob}",
                    f"GRANT SELECT, UPDATE, DELETE ON {s}.people TO {alice}, {bob}",
                    f"CREATE MASK hide_email ON {s}.people (email) TO {alice} USING ('***')",
                    f"CREATE MASK part_phone ON {s}.people (phone) USING (left(phone, 3) || '-****')"):
            admin.execute(sql)
        with pytest.raises(psycopg.errors.UndefinedColumn):
            admin.execute(f"CREATE MASK m ON {s}.people (nope) USING (NULL)")
        with pytest.raises(psycopg.errors.DuplicateObject):
            admin.execute(f"CREATE MASK hide_email ON {s}.people (email) USING (NULL)")
    try:
        with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
            assert conn.execute(f"SELECT email, phone FROM {s}.people ORDER BY id").fetchall() == [
                ("ann@x.org", "555-0101"), ("ben@y.org", "555-0202")]  # the owner (a superuser) sees values
            conn.execute(f"SET ROLE {alice}")
            assert conn.execute(f"SELECT * FROM {s}.people ORDER BY id").fetchall() == [
                (1, "***", "555-****"), (2, "***", "555-****")]
            # Filtering, grouping, joining and writing by a masked column see only the mask.
            assert conn.execute(f"SELECT count(*) FROM {s}.people WHERE email = 'ann@x.org'").fetchone() == (0,)
            assert conn.execute(f"SELECT count(*) FROM {s}.people p JOIN {s}.people q ON p.email = q.email").fetchone() == (4,)
            assert conn.execute(f"UPDATE {s}.people SET id = id WHERE email LIKE 'ann%'").rowcount == 0
            assert conn.execute(f"DELETE FROM {s}.people WHERE phone = '555-0101'").rowcount == 0
            returned = conn.execute(f"UPDATE {s}.people SET id = id WHERE id = 1 RETURNING email, phone").fetchall()
            assert returned == [("***", "555-****")]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f'SELECT * FROM {s}."people$files"')
            conn.execute(f"SET ROLE {bob}")  # only the phone mask names PUBLIC
            assert conn.execute(f"SELECT email, phone FROM {s}.people WHERE id = 2").fetchone() == ("ben@y.org", "555-****")
            conn.execute("RESET ROLE")
            conn.execute(f"DROP MASK hide_email ON {s}.people")
            conn.execute(f"DROP MASK IF EXISTS hide_email ON {s}.people")
            conn.execute(f"SET ROLE {alice}")
            assert conn.execute(f"SELECT email FROM {s}.people WHERE id = 1").fetchone() == ("ann@x.org",)
    finally:
        with psycopg.connect(icegres.dsn(), autocommit=True) as admin:
            for sql in (f"DROP TABLE IF EXISTS {s}.people", f"DROP SCHEMA IF EXISTS {s}",
                        f"DROP ROLE IF EXISTS {alice}", f"DROP ROLE IF EXISTS {bob}"):
                outcome(admin, sql)


def test_the_write_buffers_fast_path_still_checks_new_rows(tmp_path) -> None:
    """A prepared INSERT through the write buffer builds its rows from a recipe on the event loop
    after its first execution; under row-level security it must still meet WITH CHECK."""
    with running_icegres(tmp_path / "data", args=("--write-buffer-ms", "20")) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as admin:
            for sql in ("CREATE SCHEMA w", "CREATE TABLE w.t (id int, region text)", "CREATE ROLE clerk",
                        "GRANT USAGE ON SCHEMA w TO clerk", "GRANT INSERT ON w.t TO clerk",
                        "ALTER TABLE w.t ENABLE ROW LEVEL SECURITY",
                        "CREATE POLICY us_only ON w.t FOR INSERT TO clerk WITH CHECK (region = 'us')"):
                admin.execute(sql)
        with psycopg.connect(srv.dsn(), autocommit=True) as conn:
            conn.execute("SET ROLE clerk")
            with conn.cursor() as cur:
                for i in range(6):  # past psycopg's prepare threshold, and the recipe's first use
                    cur.execute("INSERT INTO w.t VALUES (%s, %s)", (i, "us"), prepare=True)
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                    cur.execute("INSERT INTO w.t VALUES (%s, %s)", (99, "eu"), prepare=True)
        with psycopg.connect(srv.dsn(), autocommit=True) as admin:
            assert admin.execute("SELECT count(*), count(*) FILTER (WHERE region = 'eu') FROM w.t").fetchone() == (6, 0)


def _merge_setup(n: dict[str, str]) -> list[str]:
    s, alice, bob = n["s"], n["alice"], n["bob"]
    return [
        f"CREATE SCHEMA {s}",
        f"CREATE TABLE {s}.acct (id int, owner text, amount int)",
        f"INSERT INTO {s}.acct VALUES (1, '{alice}', 10), (2, '{bob}', 20), (3, '{alice}', 30), (4, '{alice}', 99)",
        f"CREATE TABLE {s}.src (id int, amount int)",
        f"INSERT INTO {s}.src VALUES (1, 5), (2, 7), (5, 3)",
        f"CREATE ROLE {alice}",
        f"CREATE ROLE {bob}",
        f"GRANT USAGE ON SCHEMA {s} TO {alice}, {bob}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.acct TO {alice}, {bob}",
        f"GRANT SELECT ON {s}.src TO {alice}, {bob}",
        f"ALTER TABLE {s}.acct ENABLE ROW LEVEL SECURITY",
        f"CREATE POLICY sel ON {s}.acct FOR SELECT USING (owner = current_user)",
        f"CREATE POLICY ins ON {s}.acct FOR INSERT WITH CHECK (owner = current_user AND amount < 1000)",
        f"CREATE POLICY upd ON {s}.acct FOR UPDATE USING (amount < 50) WITH CHECK (amount < 100)",
        f"CREATE POLICY del ON {s}.acct FOR DELETE USING (amount < 20)",
    ]


def _merge_script(n: dict[str, str]) -> list[str]:
    s, alice, bob = n["s"], n["alice"], n["bob"]
    into = f"MERGE INTO {s}.acct t USING"
    return [
        f"SET ROLE {alice}",
        # within every policy: updated, and bob's hidden row 2 matches nothing, so its source row inserts
        f"{into} {s}.src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET amount = t.amount + s.amount "
        "WHEN NOT MATCHED THEN INSERT VALUES (s.id, current_user, s.amount)",
        f"SELECT id, owner, amount FROM {s}.acct ORDER BY id, amount",
        f"{into} (SELECT 4 AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET amount = 1",  # UPDATE USING fails
        f"{into} (SELECT 3 AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET amount = 500",  # WITH CHECK fails
        f"{into} (SELECT 3 AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET owner = '{bob}'",  # then hidden
        f"{into} (SELECT 3 AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE",  # DELETE USING fails
        f"{into} (SELECT 4 AS id) s ON t.id = s.id WHEN MATCHED AND t.amount > 50 THEN DO NOTHING "
        "WHEN MATCHED THEN UPDATE SET amount = 1",  # no action takes the row: nothing checked
        f"{into} (SELECT 9 AS id) s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id, '{bob}', 1)",
        f"{into} (SELECT 9 AS id) s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id, current_user, 5000)",
        f"{into} (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED AND t.amount < 20 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET amount = 0",
        f"SELECT id, owner, amount FROM {s}.acct ORDER BY id, amount",
        "RESET ROLE",
        f"SELECT id, owner, amount FROM {s}.acct ORDER BY id, owner, amount",
    ]


def _merge_teardown(n: dict[str, str]) -> list[str]:
    return [f"DROP TABLE IF EXISTS {n['s']}.acct", f"DROP TABLE IF EXISTS {n['s']}.src", f"DROP SCHEMA IF EXISTS {n['s']}",
            f"DROP ROLE IF EXISTS {n['alice']}", f"DROP ROLE IF EXISTS {n['bob']}"]


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_merge_reads_its_target_under_select_policies_and_checks_each_action_as_postgresql_does(
        icegres: IcegresServer, real_postgres, n, mode) -> None:
    """MERGE into a table under row security: a row the SELECT policies hide matches no source
    row; a row an UPDATE or DELETE action takes must pass that command's USING (else 42501, never
    a skipped row); new rows meet the INSERT/UPDATE WITH CHECK and stay visible. Both of icegres's
    ways of writing a MERGE."""
    def run(dsn: str, extra: list[str]) -> tuple[list, list]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            setup = [outcome(conn, sql) for sql in _merge_setup(n) + extra]
            try:
                return setup, [outcome(conn, sql) for sql in _merge_script(n)]
            finally:
                for sql in _merge_teardown(n):
                    outcome(conn, sql)

    mor = [f"ALTER TABLE {n['s']}.acct SET (\"write.merge.mode\" = 'merge-on-read')"] if mode == "merge-on-read" else []
    ours, theirs = run(icegres.dsn(), mor), run(real_postgres.dsn(), [])
    assert all(o[0] == "ok" for o in theirs[0]) and all(o[0] == "ok" for o in ours[0]), (ours[0], theirs[0])
    for sql, mine, pg in zip(_merge_script(n), ours[1], theirs[1], strict=True):
        assert mine == pg, sql
