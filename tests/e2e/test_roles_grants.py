"""Roles, GRANT/REVOKE and their enforcement, beside a real PostgreSQL 15: the same script on
both, statement by statement, the same outcome (tag and rows, or SQLSTATE and message).

Each role switches with SET ROLE inside one superuser connection (as a psql session of an
administrator would), and then logs in as itself, so that both the session's current role and a
login role are checked."""

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
    with running_icegres(tmp_path_factory.mktemp("roles") / "data") as server:
        yield server


@pytest.fixture()
def names() -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    return {"s": f"s_{tag}", "analyst": f"analyst_{tag}", "writer": f"writer_{tag}", "nobody": f"nobody_{tag}"}


def _setup(n: dict[str, str]) -> list[str]:
    return [
        f"CREATE SCHEMA {n['s']}",
        f"CREATE TABLE {n['s']}.t (a int, b text)",
        f"CREATE TABLE {n['s']}.hidden (x int)",
        f"CREATE VIEW {n['s']}.v AS SELECT a FROM {n['s']}.t",
        f"INSERT INTO {n['s']}.t VALUES (1, 'x'), (2, 'y')",
        f"CREATE ROLE {n['analyst']}",
        f"CREATE ROLE {n['writer']} LOGIN",
        f"GRANT USAGE ON SCHEMA {n['s']} TO {n['analyst']}, {n['writer']}",
        f"GRANT SELECT ON {n['s']}.t TO {n['analyst']}",
        f"GRANT INSERT ON TABLE {n['s']}.t TO {n['writer']}",
    ]


def _script(n: dict[str, str]) -> list[str]:
    s, analyst, writer = n["s"], n["analyst"], n["writer"]
    return [
        f"CREATE ROLE {analyst}",  # 42710
        f"SET ROLE {analyst}",
        "SELECT current_user = session_user",
        f"SELECT a, b FROM {s}.t ORDER BY a",
        f"SELECT count(*) FROM {s}.t t1 JOIN {s}.t t2 ON t1.a = t2.a",
        f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{s}' ORDER BY 1",
        f"SELECT schema_name FROM information_schema.schemata WHERE schema_name IN ('{s}', 'public') ORDER BY 1",
        f"SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = '{s}' ORDER BY 1, 2",
        f"SELECT grantee, table_name, privilege_type, is_grantable FROM information_schema.table_privileges "
        f"WHERE table_schema = '{s}' ORDER BY 1, 2, 3",
        f"SELECT relname FROM pg_class WHERE relname = 'hidden' AND relnamespace = '{s}'::regnamespace",
        f"SELECT * FROM {s}.hidden",
        f"EXPLAIN SELECT * FROM {s}.hidden",
        f"SELECT * FROM {s}.v",
        f"INSERT INTO {s}.t VALUES (3, 'z')",
        f"UPDATE {s}.t SET b = 'q'",
        f"DELETE FROM {s}.t WHERE a = 1",
        f"TRUNCATE {s}.t",
        f"DROP TABLE {s}.t",
        f"ALTER TABLE {s}.t ADD COLUMN c int",
        f"CREATE TABLE {s}.u (a int)",
        f"CREATE ROLE x_{analyst}",
        "RESET ROLE",
        f"SET ROLE {writer}",
        f"INSERT INTO {s}.t VALUES (3, 'z')",
        f"INSERT INTO {s}.t VALUES (4, 'w') RETURNING a",
        f"SELECT a FROM {s}.t",
        f"UPDATE {s}.t SET b = 'q' WHERE a = 3",
        "RESET ROLE",
        f"SELECT a, b FROM {s}.t ORDER BY a",
        f"SELECT grantee, table_name, privilege_type, is_grantable FROM information_schema.table_privileges "
        f"WHERE table_schema = '{s}' AND grantee IN ('{analyst}', '{writer}') ORDER BY 1, 2, 3",
        f"REVOKE SELECT ON {s}.t FROM {analyst}",
        f"SET ROLE {analyst}",
        f"SELECT a FROM {s}.t",
        "RESET ROLE",
        f"GRANT SELECT (a), UPDATE (b) ON {s}.t TO {writer}",
        f"SELECT has_column_privilege('{writer}', '{s}.t', 'a', 'SELECT'), "
        f"has_column_privilege('{writer}', '{s}.t', 'b', 'SELECT'), "
        f"has_column_privilege('{writer}', '{s}.t', 'b', 'UPDATE'), "
        f"has_column_privilege('{writer}', '{s}.t', 'a', 'INSERT'), "
        f"has_any_column_privilege('{writer}', '{s}.t', 'SELECT'), "
        f"has_any_column_privilege('{analyst}', '{s}.t', 'UPDATE')",
        f"SELECT has_column_privilege('{writer}', '{s}.t', 'nope', 'SELECT')",
        f"SET ROLE {writer}",
        f"SELECT has_column_privilege('{s}.t', 'a', 'SELECT'), has_any_column_privilege('{s}.t', 'UPDATE')",
        f"SELECT a FROM {s}.t ORDER BY a",
        f"SELECT b FROM {s}.t",
        f"SELECT * FROM {s}.t",
        f"SELECT count(*) FROM {s}.t",
        f"SELECT x.a FROM {s}.t x WHERE x.a > 1 ORDER BY 1",
        f"SELECT a FROM {s}.t WHERE b = 'z'",
        f"UPDATE {s}.t SET b = 'w' WHERE a = 3",
        f"UPDATE {s}.t SET a = 9",
        f"UPDATE {s}.t SET b = 'v' WHERE b = 'w'",  # WHERE b needs SELECT on b
        "RESET ROLE",
        f"GRANT SELECT (nope) ON {s}.t TO {writer}",
        # the table's INSERT for every column, beside the column grants, one row each
        f"SELECT grantee, table_name, column_name, privilege_type, is_grantable FROM information_schema.column_privileges "
        f"WHERE table_schema = '{s}' AND grantee IN ('{analyst}', '{writer}') ORDER BY 1, 2, 3, 4",
        f"SET ROLE {writer}",
        f"SELECT grantee, table_name, column_name, privilege_type FROM information_schema.column_privileges "
        f"WHERE table_schema = '{s}' ORDER BY 1, 2, 3, 4",
        "RESET ROLE",
        f"GRANT SELECT (b) ON {s}.t TO {analyst} WITH GRANT OPTION",
        f"SET ROLE {analyst}",
        f"SELECT grantee, table_name, column_name, privilege_type, is_grantable FROM information_schema.column_privileges "
        f"WHERE table_schema = '{s}' ORDER BY 1, 2, 3, 4",
        "RESET ROLE",
        f"REVOKE SELECT (b) ON {s}.t FROM {analyst}",
        f"SELECT grantee, table_name, privilege_type FROM information_schema.table_privileges "
        f"WHERE table_schema = '{s}' AND grantee = '{writer}' ORDER BY 3",
        f"REVOKE SELECT (a), UPDATE (b) ON {s}.t FROM {writer}",
        f"GRANT ALL ON ALL TABLES IN SCHEMA {s} TO {writer}",
        f"SET ROLE {writer}",
        f"SELECT a FROM {s}.t ORDER BY a",
        f"DELETE FROM {s}.t WHERE a = 4",
        "RESET ROLE",
        f"GRANT {analyst} TO {writer}",
        f"GRANT {writer} TO {analyst}",  # 0LP01: a loop
        f"SELECT rolname, rolsuper, rolcanlogin, rolinherit, rolcreaterole FROM pg_roles "
        f"WHERE rolname IN ('{analyst}', '{writer}') ORDER BY 1",
        f"SELECT r.rolname, a.admin_option FROM pg_auth_members a JOIN pg_roles r ON r.oid = a.roleid "
        f"JOIN pg_roles m ON m.oid = a.member WHERE m.rolname = '{writer}'",
        f"SELECT has_table_privilege('{analyst}', '{s}.t', 'SELECT'), "
        f"has_table_privilege('{writer}', '{s}.t', 'INSERT, SELECT'), "
        f"has_table_privilege('{writer}', '{s}.t', 'SELECT WITH GRANT OPTION'), "
        f"has_schema_privilege('{analyst}', '{s}', 'USAGE'), has_schema_privilege('{analyst}', '{s}', 'CREATE')",
        f"SET ROLE {analyst}",
        f"SELECT has_table_privilege('{s}.t', 'DELETE'), has_table_privilege('{s}.t', 'select')",
        "RESET ROLE",
        f"SELECT has_table_privilege('{s}.t', 'SELEC')",
        f"SELECT has_table_privilege('{n['nobody']}', '{s}.t', 'SELECT')",
        f"SET ROLE {n['nobody']}",
        f"GRANT SELECT ON {s}.missing TO {analyst}",
        f"GRANT SELECT ON {s}.t TO {n['nobody']}",
        f"GRANT SELEC ON {s}.t TO {analyst}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT ON TABLES TO {analyst}",
        f"CREATE TABLE {s}.later (x int)",
        f"DROP ROLE {analyst}",  # 2BP01: its default privileges
        f"SET ROLE {analyst}",
        f"SELECT * FROM {s}.later",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT INSERT ON TABLES TO {analyst}",  # its own
        "RESET ROLE",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} REVOKE SELECT ON TABLES FROM {analyst}",
        f"CREATE TABLE {s}.later2 (x int)",
        f"SET ROLE {analyst}",
        f"SELECT * FROM {s}.later2",
        "RESET ROLE",
        f"DROP ROLE {n['nobody']}",
        f"DROP ROLE IF EXISTS {n['nobody']}",
    ]


def _teardown(n: dict[str, str]) -> list[str]:
    return [f"DROP TABLE IF EXISTS {n['s']}.later", f"DROP TABLE IF EXISTS {n['s']}.later2",
            f"DROP VIEW IF EXISTS {n['s']}.v", f"DROP TABLE IF EXISTS {n['s']}.t", f"DROP TABLE IF EXISTS {n['s']}.hidden", f"DROP SCHEMA IF EXISTS {n['s']}",
            f"REVOKE {n['analyst']} FROM {n['writer']}",
            f"DROP ROLE IF EXISTS {n['writer']}", f"DROP ROLE IF EXISTS {n['analyst']}"]


def _run(dsn: str, n: dict[str, str]) -> tuple[list[tuple], list[tuple], list[tuple]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        setup = [outcome(conn, sql) for sql in _setup(n)]
        script = [outcome(conn, sql) for sql in _script(n)]
        teardown = [outcome(conn, sql) for sql in _teardown(n)]
    return setup, script, teardown


def test_privileges_are_enforced_as_postgresql_enforces_them(icegres: IcegresServer, real_postgres, names) -> None:
    ours = _run(icegres.dsn(), names)
    theirs = _run(real_postgres.dsn(), names)
    assert all(o[0] == "ok" for o in theirs[0]), theirs[0]
    assert ours[0] == theirs[0]
    for sql, mine, pg in zip(_script(names), ours[1], theirs[1], strict=True):
        if pg[0] == "error" and pg[1] == "2BP01":
            # The DETAIL lists the dependent objects in the order PostgreSQL created them (by
            # OID), and names the bootstrap superuser: compare the lines as a set, the name aside.
            assert mine[:3] == pg[:3], sql
            lines = [sorted(d.replace(user, "OWNER").split("\n")) for d, user in ((mine[3], "icegres"), (pg[3], "postgres"))]
            assert lines[0] == lines[1], sql
            continue
        assert mine == pg, sql
    assert ours[2] == theirs[2]


def test_a_role_without_login_is_refused_and_a_login_role_is_held_to_its_grants(icegres: IcegresServer, names) -> None:
    s, analyst, writer = names["s"], names["analyst"], names["writer"]
    with psycopg.connect(icegres.dsn(), autocommit=True) as admin:
        for sql in _setup(names):
            admin.execute(sql)
    try:
        with pytest.raises(psycopg.OperationalError) as refused:
            psycopg.connect(icegres.dsn(user=analyst))
        assert f'role "{analyst}" is not permitted to log in' in str(refused.value)
        with psycopg.connect(icegres.dsn(user=writer), autocommit=True) as conn:
            assert conn.execute("SELECT current_user, session_user").fetchone() == (writer, writer)
            assert conn.execute(f"INSERT INTO {s}.t VALUES (5, 'v')").rowcount == 1
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for table t"):
                conn.execute(f"SELECT * FROM {s}.t")
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f'permission denied to set role "{analyst}"'):
                conn.execute(f"SET ROLE {analyst}")
        with psycopg.connect(icegres.dsn(), autocommit=True) as admin:
            assert admin.execute(f"SELECT count(*) FROM {s}.t").fetchone() == (3,)
    finally:
        with psycopg.connect(icegres.dsn(), autocommit=True) as admin:
            for sql in _teardown(names):
                outcome(admin, sql)


def _joined_writes(n: dict[str, str]) -> tuple[list[str], list[str]]:
    """A writer holding column grants only, on the table it writes and on the one it joins."""
    s, w = n["s"], n["writer"]
    setup = [
        f"CREATE SCHEMA {s}",
        f"CREATE TABLE {s}.t (a int, b text)",
        f"CREATE TABLE {s}.src (id int, v int, secret text)",
        f"INSERT INTO {s}.t VALUES (1, 'x'), (2, 'y'), (3, 'z')",
        f"INSERT INTO {s}.src VALUES (1, 10, 'p'), (2, 20, 'q')",
        f"CREATE ROLE {w}",
        f"GRANT USAGE ON SCHEMA {s} TO {w}",
        f"GRANT SELECT (a, b), UPDATE (b), INSERT (a), DELETE ON {s}.t TO {w}",
        f"GRANT SELECT (id, v) ON {s}.src TO {w}",
    ]
    script = [
        f"SET ROLE {w}",
        f"UPDATE {s}.t SET b = 'n' || src.v FROM {s}.src WHERE t.a = src.id",
        f"UPDATE {s}.t SET b = src.secret FROM {s}.src WHERE t.a = src.id",  # 42501: src.secret
        f"UPDATE {s}.t x SET b = 'm' FROM {s}.src s2 WHERE x.a = s2.id AND s2.secret > ''",  # 42501
        f"UPDATE {s}.t SET b = 'k' FROM {s}.src WHERE t.a = src.id RETURNING t.a, src.v",
        f"UPDATE {s}.t SET b = 'k' FROM {s}.src WHERE t.a = src.id RETURNING src.*",  # 42501
        f"UPDATE {s}.t SET b = 'j' FROM {s}.src",
        f"DELETE FROM {s}.t USING {s}.src WHERE t.a = src.id AND src.secret = 'p'",  # 42501
        f"DELETE FROM {s}.t USING {s}.src WHERE t.a = src.id AND src.v > 10",
        f"INSERT INTO {s}.t (a) SELECT length(secret) FROM {s}.src",  # 42501
        f"INSERT INTO {s}.t (a) SELECT v FROM {s}.src WHERE id = 1",
        f"WITH c AS (SELECT id FROM {s}.src) INSERT INTO {s}.t (a) SELECT id + 100 FROM c",
        f"MERGE INTO {s}.t USING {s}.src ON t.a = src.id WHEN MATCHED THEN UPDATE SET b = 'g' || src.v",
        f"MERGE INTO {s}.t USING {s}.src ON t.a = src.id WHEN MATCHED AND src.secret = 'p' THEN DELETE",  # 42501
        f"MERGE INTO {s}.t USING (SELECT id, v FROM {s}.src) s2 ON t.a = s2.id "
        f"WHEN NOT MATCHED THEN INSERT (a) VALUES (s2.v)",
        "RESET ROLE",
        f"SELECT a, b FROM {s}.t ORDER BY a",
    ]
    return setup, script


def test_column_grants_decide_joined_writes_as_postgresql_decides_them(icegres: IcegresServer, real_postgres,
                                                                        names) -> None:
    """UPDATE … FROM, DELETE … USING, INSERT … SELECT and MERGE by a role holding column grants
    only: each column read of the joined table is checked (icegres refused all such writes before)."""
    setup, script = _joined_writes(names)
    teardown = [f"DROP TABLE IF EXISTS {names['s']}.t", f"DROP TABLE IF EXISTS {names['s']}.src",
                f"DROP SCHEMA IF EXISTS {names['s']}", f"DROP ROLE IF EXISTS {names['writer']}"]
    results = []
    for dsn in (icegres.dsn(), real_postgres.dsn()):
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert all(outcome(conn, sql)[0] == "ok" for sql in setup)
            results.append([outcome(conn, sql) for sql in script])
            for sql in teardown:
                outcome(conn, sql)
    for sql, mine, pg in zip(script, *results, strict=True):
        assert mine == pg, sql
    assert sum(r[0] == "error" for r in results[1]) == 6  # (the script denies what it means to)


def _block_script(n: dict[str, str]) -> list[str]:
    s, r1, r2 = n["s"], n["analyst"], n["writer"]
    return [
        f"CREATE SCHEMA {s}", f"CREATE TABLE {s}.tg (a int)", f"INSERT INTO {s}.tg VALUES (1)",
        f"CREATE ROLE {r1}", f"GRANT USAGE ON SCHEMA {s} TO {r1}",
        "BEGIN", f"GRANT SELECT ON {s}.tg TO {r1}", f"SET ROLE {r1}", f"SELECT a FROM {s}.tg", "RESET ROLE", "ROLLBACK",
        f"SET ROLE {r1}", f"SELECT a FROM {s}.tg", "RESET ROLE",  # 42501: rolled back
        "BEGIN", f"GRANT SELECT ON {s}.tg TO {r1}", "SAVEPOINT sp", f"REVOKE SELECT ON {s}.tg FROM {r1}",
        "ROLLBACK TO SAVEPOINT sp", "COMMIT",
        f"SET ROLE {r1}", f"SELECT a FROM {s}.tg", "RESET ROLE",
        "BEGIN", f"CREATE ROLE {r2}", f"GRANT {r1} TO {r2}", f"SET ROLE {r2}", f"SELECT a FROM {s}.tg", "RESET ROLE",
        "COMMIT",
        f"SELECT rolname FROM pg_roles WHERE rolname IN ('{r1}', '{r2}') ORDER BY 1",
        "BEGIN", f"CREATE TABLE {s}.tg2 (b int)", f"GRANT SELECT ON {s}.tg2 TO {r1}", "COMMIT",
        f"SET ROLE {r1}", f"SELECT * FROM {s}.tg2", "RESET ROLE",
        "BEGIN", f"REVOKE SELECT ON {s}.tg FROM {r1}", f"GRANT bogus ON {s}.tg TO {r1}", "COMMIT",  # failed: rolled back
        f"SET ROLE {r1}", f"SELECT a FROM {s}.tg", "RESET ROLE",
        "BEGIN", f"DROP ROLE {r2}", "ROLLBACK",
        f"SELECT rolname FROM pg_roles WHERE rolname IN ('{r1}', '{r2}') ORDER BY 1",
        f"SELECT has_table_privilege('{r1}', '{s}.tg', 'SELECT'), has_table_privilege('{r1}', '{s}.tg2', 'SELECT')",
    ]


def test_role_and_privilege_changes_are_transactional_as_in_postgresql(icegres: IcegresServer, real_postgres,
                                                                       names) -> None:
    """Inside a block a GRANT, REVOKE or role change is seen by the block's own statements,
    applied at COMMIT and undone by ROLLBACK and ROLLBACK TO SAVEPOINT (they were in force when
    they returned); a GRANT on a table the block created finds it."""
    script = _block_script(names)
    teardown = [f"DROP TABLE IF EXISTS {names['s']}.tg", f"DROP TABLE IF EXISTS {names['s']}.tg2",
                f"DROP SCHEMA IF EXISTS {names['s']}", f"REVOKE {names['analyst']} FROM {names['writer']}",
                f"DROP ROLE IF EXISTS {names['writer']}", f"DROP ROLE IF EXISTS {names['analyst']}"]
    results = []
    for dsn in (icegres.dsn(), real_postgres.dsn()):
        with psycopg.connect(dsn, autocommit=True) as conn:
            results.append([outcome(conn, sql) for sql in script])
            for sql in teardown:
                outcome(conn, sql)
    for sql, mine, pg in zip(script, *results, strict=True):
        assert mine == pg, sql
