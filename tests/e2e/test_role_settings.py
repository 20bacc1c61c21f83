"""ALTER ROLE / ALTER DATABASE ... SET against a real PostgreSQL 15: the same statements on both,
the same outcomes (tags, SQLSTATEs), the same pg_db_role_setting and pg_roles.rolconfig, and a
session of the role starting with what PostgreSQL's would: the role's settings over the
database's over every role's, the client's own (its startup parameters, its `options`) over all
of them, and RESET returning to them. On icegres the settings live in the catalog's shared
state: a second server sees them too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ADMIN = ("admin", "admin-pw-1")
SCRIPT = [
    "CREATE ROLE rs_user LOGIN PASSWORD 'rs-pw'",
    "CREATE ROLE rs_other LOGIN PASSWORD 'rs-pw'",
    "ALTER ROLE rs_user SET search_path = rs_schema, public",
    "ALTER ROLE rs_user SET statement_timeout = '5s'",
    "ALTER ROLE rs_user SET statement_timeout TO 7000",  # (replaces the entry)
    "ALTER USER rs_user SET DateStyle = 'ISO, DMY'",
    "ALTER ROLE rs_user IN DATABASE {db} SET DateStyle = 'ISO, YMD'",  # (the role in the database wins)
    "ALTER DATABASE {db} SET extra_float_digits = 1",
    "ALTER ROLE ALL SET lock_timeout = '3s'",
    "ALTER ROLE rs_other SET lock_timeout = '4s'",
    "ALTER ROLE rs_user SET TIME ZONE 'Asia/Tokyo'",
    "ALTER ROLE rs_other SET work_mem = '8MB'",
    "ALTER ROLE rs_other RESET work_mem",
    "ALTER ROLE rs_user SET no_such_setting = 1",  # 42704
    "ALTER ROLE rs_user SET TimeZone = 'Nowhere/City'",  # 22023
    "ALTER ROLE rs_nobody SET search_path = x",  # 42704
    "ALTER ROLE rs_user IN DATABASE rs_no_such_db SET search_path = x",  # 3D000
    "ALTER DATABASE rs_no_such_db SET search_path = x",  # 3D000
    "ALTER ROLE rs_user SET server_version = '1'",  # 55P02
]
SHOWN = ("search_path", "statement_timeout", "DateStyle", "extra_float_digits", "lock_timeout", "TimeZone")
DUMP = ("SELECT setdatabase = 0, coalesce(r.rolname, ''), setconfig FROM pg_db_role_setting s "
        "LEFT JOIN pg_roles r ON r.oid = s.setrole WHERE r.rolname LIKE 'rs_%' OR s.setrole = 0 ORDER BY 1, 2")


def _run(conn: psycopg.Connection, sql: str) -> tuple[Any, ...]:
    try:
        cur = conn.execute(sql)
        return ("ok", cur.statusmessage, cur.fetchall() if cur.description else None)
    except psycopg.Error as exc:
        return ("error", exc.sqlstate)


def _shown(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SHOWN}


@pytest.fixture(scope="module")
def pair(real_postgres, tmp_path_factory) -> Iterator[tuple[Any, Any]]:  # noqa: F811
    base = tmp_path_factory.mktemp("role-settings")
    pwfile = base / "users"
    pwfile.write_text(f"{ADMIN[0]}:{ADMIN[1]}\n")
    with running_icegres(base / "data", args=("--password-file", str(pwfile)), user=ADMIN[0], password=ADMIN[1]) as ig:
        yield real_postgres, ig
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as pg:
        pg.execute(f"ALTER DATABASE {real_postgres.dbname} RESET ALL")
        pg.execute("ALTER ROLE ALL RESET ALL")
        pg.execute("DROP ROLE IF EXISTS rs_user")
        pg.execute("DROP ROLE IF EXISTS rs_other")


def test_role_and_database_settings_as_postgresql_keeps_and_applies_them(pair) -> None:
    pg, ig = pair
    with psycopg.connect(pg.dsn(), autocommit=True) as theirs, psycopg.connect(ig.dsn(), autocommit=True) as ours:
        for sql in SCRIPT:
            assert _run(ours, sql.format(db=ig.database)) == _run(theirs, sql.format(db=pg.dbname)), sql
        assert _run(ours, DUMP) == _run(theirs, DUMP)
        rolconfig = "SELECT rolname, rolconfig FROM pg_roles WHERE rolname LIKE 'rs_%' ORDER BY 1"
        assert _run(ours, rolconfig) == _run(theirs, rolconfig)
    for user in ("rs_user", "rs_other"):
        assert _shown(ig.dsn(user=user, password="rs-pw")) == _shown(pg.dsn().replace(f"user={pg.user}", f"user={user}"))
    # The client's own settings win over the stored ones; RESET returns to the stored one.
    for dsn in (ig.dsn(user="rs_user", password="rs-pw"), pg.dsn().replace(f"user={pg.user}", "user=rs_user")):
        with psycopg.connect(dsn + " options='-c lock_timeout=9s'", autocommit=True) as conn:
            conn.execute("SET search_path = elsewhere")
            conn.execute("RESET search_path")
            assert conn.execute("SHOW search_path").fetchone() == ("rs_schema, public",)
            assert conn.execute("SHOW lock_timeout").fetchone() == ("9s",)


def test_a_role_may_change_its_own_settings_and_not_another_roles(pair) -> None:
    pg, ig = pair
    outcomes = []
    for dsn in (ig.dsn(user="rs_other", password="rs-pw"), pg.dsn().replace(f"user={pg.user}", "user=rs_other")):
        with psycopg.connect(dsn, autocommit=True) as conn:
            outcomes.append([_run(conn, sql) for sql in (
                "ALTER ROLE rs_other SET work_mem = '16MB'", "ALTER ROLE current_user RESET work_mem",
                "ALTER ROLE rs_user SET work_mem = '16MB'", "ALTER ROLE ALL SET work_mem = '16MB'",
                f"ALTER DATABASE {ig.database if len(outcomes) == 0 else pg.dbname} SET work_mem = '16MB'",
                "ALTER ROLE admin SET work_mem = '16MB'" if len(outcomes) == 0 else
                f"ALTER ROLE {pg.user} SET work_mem = '16MB'")])
    assert outcomes[0] == outcomes[1]
    assert [o[0] for o in outcomes[0]] == ["ok", "ok", "error", "error", "error", "error"]


def test_a_dropped_or_renamed_role_takes_its_settings_along(pair) -> None:
    _, ig = pair
    with psycopg.connect(ig.dsn(), autocommit=True) as conn:
        conn.execute("CREATE ROLE rs_temp LOGIN PASSWORD 'rs-pw'")
        conn.execute("ALTER ROLE rs_temp SET search_path = temp_schema")
        conn.execute("ALTER ROLE rs_temp RENAME TO rs_renamed")
        assert conn.execute("SELECT rolconfig FROM pg_roles WHERE rolname = 'rs_renamed'").fetchone() == (
            ["search_path=temp_schema"],)
        assert _shown(ig.dsn(user="rs_renamed", password="rs-pw"))["search_path"] == "temp_schema"
        conn.execute("DROP ROLE rs_renamed")
        conn.execute("CREATE ROLE rs_renamed LOGIN PASSWORD 'rs-pw'")
        assert conn.execute("SELECT rolconfig FROM pg_roles WHERE rolname = 'rs_renamed'").fetchone() == (None,)
        conn.execute("DROP ROLE rs_renamed")


AS_SUPERUSER = [
    "CREATE ROLE sa_plain LOGIN PASSWORD 'rs-pw'",
    "SET SESSION AUTHORIZATION sa_plain",
    "SELECT session_user, current_user, current_setting('role')",
    "SET SESSION AUTHORIZATION DEFAULT",
    "SELECT session_user = current_user, session_user = '<admin>'",
    "BEGIN", "SET LOCAL SESSION AUTHORIZATION sa_plain", "SELECT session_user", "ROLLBACK",
    "SELECT session_user = '<admin>'",
    "SET SESSION AUTHORIZATION sa_nosuch",  # 42704
    "SET ROLE sa_plain", "SET SESSION AUTHORIZATION sa_plain", "SELECT current_setting('role')",
    "RESET SESSION AUTHORIZATION", "SELECT session_user = '<admin>', current_user = '<admin>'",
    "SELECT set_config('session_authorization', 'sa_plain', false)", "SELECT session_user",
    "RESET SESSION AUTHORIZATION",
    "SET ROLE sa_plain", "RESET ALL", "SELECT current_user",  # (RESET ALL leaves the role alone)
    "RESET ROLE",
]
AS_PLAIN = [
    "SET SESSION AUTHORIZATION <admin>",  # 42501
    "SET SESSION AUTHORIZATION sa_plain",  # (itself: allowed)
    "SELECT set_config('session_authorization', '<admin>', false)",  # 42501
    "SELECT set_config('role', '<admin>', false)",  # 42501
    "SELECT set_config('server_version', '1', false)",  # 55P02
    "SELECT set_config('no_such_setting', '1', false)",  # 42704
    "SELECT set_config('myapp.flag', 'on', false), current_setting('myapp.flag')",
    "SELECT session_user, current_user",
]


def test_set_session_authorization_as_postgresql_allows_and_refuses_it(pair) -> None:
    """SET [LOCAL] SESSION AUTHORIZATION / DEFAULT / RESET, and set_config() of it or of role:
    a superuser's session becomes another role's for privileges, session_user and
    current_user, SET ROLE lapsing, a block's ROLLBACK undoing it; anyone else is refused, as is
    every escalation through set_config()."""
    pg, ig = pair
    runs = []
    for admin, dsn, plain in ((ADMIN[0], ig.dsn(), ig.dsn(user="sa_plain", password="rs-pw")),
                              (pg.user, pg.dsn(), pg.dsn().replace(f"user={pg.user}", "user=sa_plain"))):
        with psycopg.connect(dsn, autocommit=True) as conn:
            out = [_run(conn, sql.replace("<admin>", admin)) for sql in AS_SUPERUSER]
        with psycopg.connect(plain, autocommit=True) as conn:
            out += [_run(conn, sql.replace("<admin>", admin)) for sql in AS_PLAIN]
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP ROLE sa_plain")
        runs.append(out)
    for sql, ours, theirs in zip([*AS_SUPERUSER, *AS_PLAIN], *runs, strict=True):
        assert ours == theirs, sql


HAS_ROLE = [
    "CREATE ROLE hr_a", "CREATE ROLE hr_b", "CREATE ROLE hr_c", "CREATE ROLE hr_n NOINHERIT",
    "GRANT hr_b TO hr_a", "GRANT hr_c TO hr_b WITH ADMIN OPTION", "GRANT hr_c TO hr_n",
    "SELECT pg_has_role('hr_a', 'hr_c', 'MEMBER'), pg_has_role('hr_a', 'hr_c', 'USAGE'), "
    "pg_has_role('hr_n', 'hr_c', 'usage'), pg_has_role('hr_n', 'hr_c', 'member'), "
    "pg_has_role('hr_a', 'hr_c', 'member with admin option'), pg_has_role('hr_b', 'hr_c', 'USAGE WITH ADMIN OPTION'), "
    "pg_has_role('hr_c', 'hr_a', 'MEMBER, USAGE'), pg_has_role('hr_a', 'hr_a', 'USAGE')",
    "SELECT pg_has_role((SELECT oid FROM pg_roles WHERE rolname = 'hr_a'), 'hr_b', 'member')",
    "SELECT rolname FROM pg_roles WHERE pg_has_role('hr_a', oid, 'USAGE') AND rolname LIKE 'hr_%' ORDER BY 1",
    "SET ROLE hr_a", "SELECT pg_has_role('hr_c', 'USAGE'), pg_has_role('hr_n', 'MEMBER')", "RESET ROLE",
    "SELECT pg_has_role('hr_a', 'hr_nosuch', 'member')",  # 42704
    "SELECT pg_has_role('hr_a', 'hr_b', 'select')",  # 22023
    "SELECT pg_has_role('hr_a', 'hr_b', 'SET')",  # 22023 (PostgreSQL 16's privilege)
    "DROP ROLE hr_a", "DROP ROLE hr_n", "DROP ROLE hr_b", "DROP ROLE hr_c",
]


def test_pg_has_role_as_postgresql_answers_it(pair) -> None:
    pg, ig = pair
    with psycopg.connect(pg.dsn(), autocommit=True) as theirs, psycopg.connect(ig.dsn(), autocommit=True) as ours:
        for sql in HAS_ROLE:
            assert _run(ours, sql) == _run(theirs, sql), sql


OWNED = [
    "CREATE ROLE ro_a", "CREATE ROLE ro_b", "CREATE ROLE ro_c",
    "CREATE SCHEMA ro_s", "GRANT USAGE, CREATE ON SCHEMA ro_s TO ro_a",
    "SET ROLE ro_a", "CREATE TABLE ro_s.t1 (i int)", "GRANT SELECT ON ro_s.t1 TO ro_c", "RESET ROLE",
    "CREATE TABLE ro_s.t2 (i int)", "GRANT SELECT, INSERT ON ro_s.t2 TO ro_a WITH GRANT OPTION",
    "SET ROLE ro_a", "GRANT SELECT ON ro_s.t2 TO ro_c", "RESET ROLE",
    "ALTER DEFAULT PRIVILEGES FOR ROLE ro_a GRANT SELECT ON TABLES TO ro_c",
    "SELECT tablename, tableowner FROM pg_tables WHERE tableowner LIKE 'ro_%' ORDER BY 1",
    "SET ROLE ro_c", "REASSIGN OWNED BY ro_a TO ro_c", "DROP OWNED BY ro_a", "RESET ROLE",  # 42501
    "REASSIGN OWNED BY ro_nosuch TO ro_b",  # 42704
    "REASSIGN OWNED BY ro_a TO ro_b",
    "SELECT tablename, tableowner FROM pg_tables WHERE tableowner LIKE 'ro_%' ORDER BY 1",
    "SELECT has_table_privilege('ro_c', 'ro_s.t1', 'SELECT') AS c, has_table_privilege('ro_b', 'ro_s.t1', 'INSERT') AS b, "
    "has_table_privilege('ro_a', 'ro_s.t1', 'SELECT') AS a",
    "DROP ROLE ro_a",  # 2BP01: privileges and its default privileges still name it
    "DROP OWNED BY ro_a",
    "SELECT has_table_privilege('ro_c', 'ro_s.t2', 'SELECT') AS c, has_table_privilege('ro_a', 'ro_s.t2', 'SELECT') AS a, "
    "has_schema_privilege('ro_a', 'ro_s', 'USAGE') AS s",
    "SELECT count(*) FROM pg_default_acl",
    "DROP ROLE ro_a",
    "REASSIGN OWNED BY ro_b TO CURRENT_USER",
    "DROP TABLE ro_s.t1", "DROP TABLE ro_s.t2", "DROP SCHEMA ro_s", "DROP ROLE ro_b", "DROP ROLE ro_c",
]


def _outcome(conn: psycopg.Connection, sql: str) -> tuple[Any, ...]:
    try:
        cur = conn.execute(sql)
        return ("ok", cur.statusmessage, cur.fetchall() if cur.description else None)
    except psycopg.Error as exc:
        return ("error", exc.sqlstate, exc.diag.message_primary, exc.diag.message_detail)


def test_reassign_owned_then_drop_owned_then_drop_role_as_postgresql(pair) -> None:
    """The way a role is retired in PostgreSQL: REASSIGN OWNED BY it TO another, DROP OWNED BY
    it (its privileges, default privileges, policies), DROP ROLE; with PostgreSQL's refusals and
    DETAILs on the way."""
    pg, ig = pair
    with psycopg.connect(pg.dsn(), autocommit=True) as theirs, psycopg.connect(ig.dsn(), autocommit=True) as ours:
        for sql in OWNED:
            assert _outcome(ours, sql) == _outcome(theirs, sql), sql


DROP_OWNED = [
    "CREATE ROLE dw_a", "CREATE ROLE dw_b",
    "CREATE SCHEMA dw_s", "GRANT USAGE, CREATE ON SCHEMA dw_s TO dw_a, dw_b",
    "SET ROLE dw_a", "CREATE TABLE dw_s.t1 (i int)", "CREATE TABLE dw_s.t2 (i int)",
    "CREATE VIEW dw_s.v1 AS SELECT i FROM dw_s.t1", "CREATE SEQUENCE dw_s.q1",
    "GRANT SELECT ON dw_s.t1 TO dw_b", "RESET ROLE",
    "SET ROLE dw_b", "CREATE VIEW dw_s.vb AS SELECT i FROM dw_s.t1", "CREATE TABLE dw_s.tb (i int)", "RESET ROLE",
    "SET ROLE dw_b", "DROP OWNED BY dw_a", "RESET ROLE",  # 42501: dw_b has not dw_a's privileges
    "DROP OWNED BY dw_a",  # 2BP01: dw_b's view reads dw_a's table; nothing dropped
    "DROP OWNED BY dw_a RESTRICT",
    "SELECT c.relname, c.relkind, r.rolname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_roles r ON r.oid = c.relowner WHERE n.nspname = 'dw_s' ORDER BY 1",
    "DROP OWNED BY dw_a CASCADE",  # its tables, view and sequence, and dw_b's view of them
    "SELECT c.relname, c.relkind, r.rolname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_roles r ON r.oid = c.relowner WHERE n.nspname = 'dw_s' ORDER BY 1",
    "SELECT has_schema_privilege('dw_a', 'dw_s', 'CREATE'), has_schema_privilege('dw_b', 'dw_s', 'CREATE')",
    "DROP ROLE dw_a",  # nothing of it left
    # a schema of the role holding another role's table: the schema alone is the set
    "CREATE SCHEMA dw_o", "ALTER SCHEMA dw_o OWNER TO dw_b", "CREATE TABLE dw_o.t (i int)",
    "DROP OWNED BY dw_b",  # 2BP01: the superuser's table is in dw_b's schema
    "DROP TABLE dw_o.t",
    "DROP OWNED BY dw_b",  # dw_s.tb and dw_o go
    "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'dw_%' ORDER BY 1",
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'dw_s'",
    "DROP ROLE dw_b", "DROP SCHEMA dw_s",
]


def test_drop_owned_drops_what_the_role_owns_as_postgresql(pair) -> None:
    """DROP OWNED BY drops the role's tables, views, sequences and schemas in the lake, refuses
    (2BP01, nothing dropped) where another role's object depends on them unless CASCADE, and then
    revokes its privileges: statement by statement as PostgreSQL 15."""
    pg, ig = pair
    with psycopg.connect(pg.dsn(), autocommit=True) as theirs, psycopg.connect(ig.dsn(), autocommit=True) as ours:
        for sql in DROP_OWNED:
            assert _outcome(ours, sql) == _outcome(theirs, sql), sql


IN_BLOCK = [
    "CREATE TABLE blk_t (i int)",
    "BEGIN",
    "CREATE ROLE blk_r",
    "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = 'blk_r'",
    "ALTER ROLE blk_r LOGIN",
    "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname = 'blk_r'",
    "GRANT SELECT ON blk_t TO blk_r",
    "SELECT grantee, privilege_type FROM information_schema.table_privileges WHERE table_name = 'blk_t' "
    "AND grantee = 'blk_r'",
    "SELECT has_table_privilege('blk_r', 'blk_t', 'SELECT')",
    "ALTER ROLE blk_r SET search_path = blk",
    "SELECT rolconfig FROM pg_roles WHERE rolname = 'blk_r'",
    "ROLLBACK",
    "SELECT count(*) FROM pg_roles WHERE rolname = 'blk_r'",
    "BEGIN", "CREATE ROLE blk_r", "COMMIT",
    "BEGIN", "DROP ROLE blk_r", "SELECT count(*) FROM pg_roles WHERE rolname = 'blk_r'", "COMMIT",
    "SELECT count(*) FROM pg_roles WHERE rolname = 'blk_r'",
    "DROP TABLE blk_t",
]


def test_a_blocks_own_role_and_privilege_changes_show_in_its_catalog(pair) -> None:
    """pg_roles, information_schema and pg_db_role_setting show a transaction block its own
    uncommitted CREATE ROLE, ALTER ROLE, GRANT and DROP ROLE, as PostgreSQL's catalogs do; a
    ROLLBACK forgets them."""
    pg, ig = pair
    with psycopg.connect(pg.dsn(), autocommit=True) as theirs, psycopg.connect(ig.dsn(), autocommit=True) as ours:
        for sql in IN_BLOCK:
            assert _outcome(ours, sql) == _outcome(theirs, sql), sql


VIEW_OPTIONS = [
    "CREATE TABLE vo_t (i int)", "CREATE VIEW vo_v AS SELECT i FROM vo_t",
    "ALTER VIEW vo_v SET (security_invoker = true)",
    "SELECT reloptions FROM pg_class WHERE relname = 'vo_v'",
    "ALTER VIEW vo_v SET (security_invoker = maybe)",  # 22023
    "ALTER VIEW vo_v RESET (security_invoker)",
    "SELECT reloptions FROM pg_class WHERE relname = 'vo_v'",
    "ALTER VIEW vo_v SET (security_invoker)",
    "SELECT reloptions FROM pg_class WHERE relname = 'vo_v'",
    "ALTER VIEW vo_t SET (security_invoker)",  # 42809
    "ALTER VIEW vo_nope SET (security_invoker)",  # 42P01
    "ALTER VIEW IF EXISTS vo_nope SET (security_invoker)",
    "CREATE ROLE vo_r", "CREATE ROLE vo_other",
    "ALTER VIEW vo_v OWNER TO vo_nosuch",  # 42704
    "ALTER VIEW vo_v OWNER TO vo_r",
    "SELECT viewowner FROM pg_views WHERE viewname = 'vo_v'",
    "SET ROLE vo_other", "ALTER VIEW vo_v RESET (security_invoker)", "RESET ROLE",  # 42501
    "SET ROLE vo_r", "ALTER VIEW vo_v RESET (security_invoker)", "RESET ROLE",
    "SELECT reloptions FROM pg_class WHERE relname = 'vo_v'",
    "DROP VIEW vo_v", "DROP TABLE vo_t", "DROP ROLE vo_r", "DROP ROLE vo_other",
]


def test_alter_view_set_reset_and_owner_as_postgresql(pair) -> None:
    """ALTER VIEW ... SET / RESET (security_invoker) and OWNER TO, shown in pg_class.reloptions
    and pg_views, with PostgreSQL's refusals (its other view options are 0A000 here:
    docs/limitations.md)."""
    pg, ig = pair
    with psycopg.connect(pg.dsn(), autocommit=True) as theirs, psycopg.connect(ig.dsn(), autocommit=True) as ours:
        for sql in VIEW_OPTIONS:
            assert _outcome(ours, sql) == _outcome(theirs, sql), sql


def test_no_role_reaches_another_roles_privileges_through_its_settings(pair) -> None:
    """`role` is SET ROLE's setting: a client's `-c role=…` and a role's own `ALTER ROLE … SET
    role` take effect only where SET ROLE would (membership), as in PostgreSQL: a connection
    asking for a role it is not a member of is refused, and a stored one it may not take is
    skipped at login (both were privilege escalations: the session started as that role)."""
    pg, ig = pair
    cases = ((ig, ig.dsn(), ADMIN[0], lambda u: ig.dsn(user=u, password="rs-pw")),
             (pg, pg.dsn(), pg.user, lambda u: pg.dsn().replace(f"user={pg.user}", f"user={u}")))
    for _, admin_dsn, superuser, as_user in cases:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute("CREATE ROLE esc_user LOGIN PASSWORD 'rs-pw'")
            admin.execute("CREATE ROLE esc_group")
            admin.execute("GRANT esc_group TO esc_user")
        try:
            with pytest.raises(psycopg.OperationalError, match=f'permission denied to set role "{superuser}"'):
                psycopg.connect(as_user("esc_user") + f" options='-c role={superuser}'")
            with psycopg.connect(as_user("esc_user") + " options='-c role=esc_group'", autocommit=True) as conn:
                assert conn.execute("SELECT current_user").fetchone() == ("esc_group",)
            with psycopg.connect(as_user("esc_user"), autocommit=True) as conn:
                conn.execute(f"ALTER ROLE current_user SET role = '{superuser}'")
            with psycopg.connect(as_user("esc_user"), autocommit=True) as conn:
                assert conn.execute("SELECT current_user, session_user").fetchone() == ("esc_user", "esc_user")
        finally:
            with psycopg.connect(admin_dsn, autocommit=True) as admin:
                admin.execute("ALTER ROLE esc_user RESET ALL")
                admin.execute("DROP ROLE esc_user")
                admin.execute("DROP ROLE esc_group")
