"""Roles made by SQL log in by their password over both front ends and are held to their grants:
psycopg (SCRAM-SHA-256, as libpq negotiates it) and the ADBC Flight SQL driver (Basic, then the
bearer token of its Handshake), against `icegres serve --password-file` where the configured
user is the administrator."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

ADMIN = ("admin", "admin-secret-1")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("role-logins")
    pwfile = base / "users"
    pwfile.write_text(f"{ADMIN[0]}:{ADMIN[1]}\n")
    args = ("--password-file", str(pwfile), "--flight-port", "0",
            "--auth-failure-delay-ms", "10", "--auth-failure-delay-max-ms", "20")
    with running_icegres(base / "data", args=args, user=ADMIN[0], password=ADMIN[1]) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as admin:
            for sql in ("CREATE SCHEMA sales", "CREATE TABLE sales.orders (id int, amount int)",
                        "CREATE TABLE sales.secret (x int)",
                        "INSERT INTO sales.orders VALUES (1, 10), (2, 20)",
                        "CREATE ROLE analyst LOGIN PASSWORD 'analyst-pw'",
                        "CREATE USER clerk PASSWORD 'clerk-pw'",
                        "CREATE ROLE auditor NOLOGIN PASSWORD 'auditor-pw'",
                        "GRANT USAGE ON SCHEMA sales TO analyst, clerk",
                        "GRANT SELECT ON sales.orders TO analyst",
                        "GRANT INSERT ON sales.orders TO clerk"):
                admin.execute(sql)
        yield srv


def flight(srv, user: str, password: str):
    return adbc.connect(f"grpc://127.0.0.1:{srv.flight_port}",
                        db_kwargs={"username": user, "password": password}, autocommit=True)


def test_a_created_role_logs_in_over_pgwire_by_scram_and_reads_what_it_was_granted(server) -> None:
    with psycopg.connect(server.dsn(user="analyst", password="analyst-pw"), autocommit=True) as conn:
        assert conn.pgconn.used_password
        assert conn.execute("SELECT sum(amount) FROM sales.orders").fetchone() == (30,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied for table orders"):
            conn.execute("INSERT INTO sales.orders VALUES (3, 30)")
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "analyst"'):
        psycopg.connect(server.dsn(user="analyst", password="wrong"))
    with pytest.raises(psycopg.OperationalError, match='role "auditor" is not permitted to log in'):
        psycopg.connect(server.dsn(user="auditor", password="auditor-pw"))


def test_a_password_change_takes_effect_at_once_and_the_old_one_stops_working(server) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute("ALTER ROLE clerk PASSWORD 'clerk-pw-2'")
    try:
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.dsn(user="clerk", password="clerk-pw"))
        with psycopg.connect(server.dsn(user="clerk", password="clerk-pw-2"), autocommit=True) as conn:
            assert conn.execute("INSERT INTO sales.orders VALUES (9, 0)").rowcount == 1
        with pytest.raises(adbc_driver_manager.Error, match="password authentication failed"):
            with flight(server, "clerk", "clerk-pw") as conn, conn.cursor() as cur:
                cur.execute("SELECT 1")
    finally:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("ALTER ROLE clerk PASSWORD 'clerk-pw'")
            admin.execute("DELETE FROM sales.orders WHERE id = 9")


def test_a_created_role_logs_in_over_flight_sql_and_is_held_to_its_grants(server) -> None:
    with flight(server, "analyst", "analyst-pw") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM sales.orders")
        assert cur.fetchone() == (2,)
        with pytest.raises(adbc_driver_manager.Error, match="permission denied for table orders"):
            cur.execute("DELETE FROM sales.orders")
    with flight(server, "clerk", "clerk-pw") as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error, match="permission denied for table orders"):
            cur.execute("SELECT * FROM sales.orders")
    with pytest.raises(adbc_driver_manager.Error, match="not permitted to log in"):
        with flight(server, "auditor", "auditor-pw") as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        assert admin.execute("SELECT count(*) FROM sales.orders").fetchone() == (2,)


def _tables_listed(conn) -> set[tuple[str, str]]:
    objects = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
    return {(schema["db_schema_name"], table["table_name"])
            for catalog in objects for schema in catalog["catalog_db_schemas"] or ()
            for table in schema["db_schema_tables"] or ()}


def test_flight_sql_metadata_lists_a_role_only_what_information_schema_shows_it(server) -> None:
    with flight(server, *ADMIN) as conn:
        assert {("sales", "orders"), ("sales", "secret")} <= _tables_listed(conn)
    with flight(server, "analyst", "analyst-pw") as conn:
        listed = _tables_listed(conn)
        assert ("sales", "orders") in listed and ("sales", "secret") not in listed


def test_a_renamed_role_logs_in_by_its_password_under_its_new_name(server) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute("CREATE ROLE temp_clerk LOGIN PASSWORD 'temp-pw'")
        admin.execute("ALTER ROLE temp_clerk RENAME TO renamed_clerk")
    try:
        with psycopg.connect(server.dsn(user="renamed_clerk", password="temp-pw"), autocommit=True) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("renamed_clerk",)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.dsn(user="temp_clerk", password="temp-pw"))
    finally:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("DROP ROLE renamed_clerk")


def test_a_password_past_its_valid_until_fails_as_a_wrong_one(server) -> None:
    """VALID UNTIL is read as a timestamptz in the session's TimeZone and holds at login over
    both front ends: past it, the right password fails as a wrong one does (PostgreSQL's
    get_role_password); moved on, it works again. 'infinity' never expires."""
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute("SET TimeZone = 'Asia/Tokyo'")
        admin.execute("CREATE ROLE expiring LOGIN PASSWORD 'exp-pw' VALID UNTIL '2001-02-03 04:05:06'")
        [until] = admin.execute("SELECT rolvaliduntil FROM pg_roles WHERE rolname = 'expiring'").fetchone()
        assert until == datetime(2001, 2, 2, 19, 5, 6, tzinfo=UTC)
        with pytest.raises(psycopg.errors.InvalidDatetimeFormat):
            admin.execute("ALTER ROLE expiring VALID UNTIL 'someday'")
    try:
        with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "expiring"'):
            psycopg.connect(server.dsn(user="expiring", password="exp-pw"))
        with pytest.raises(adbc_driver_manager.Error):
            with flight(server, "expiring", "exp-pw") as conn:
                conn.adbc_get_info()
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("ALTER ROLE expiring VALID UNTIL 'infinity'")
            assert admin.execute("SELECT valuntil > timestamptz '2200-01-01 00:00+00' FROM pg_user "
                                 "WHERE usename = 'expiring'").fetchone() == (True,)  # (psycopg refuses infinity)
        with psycopg.connect(server.dsn(user="expiring", password="exp-pw"), autocommit=True) as conn:
            assert conn.execute("SELECT session_user").fetchone() == ("expiring",)
    finally:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("DROP ROLE expiring")


def test_a_role_at_its_connection_limit_is_refused_another_session(server) -> None:
    """CONNECTION LIMIT counts the role's sessions (on this server): one more is FATAL 53300
    with PostgreSQL's message; a session that ends frees its place."""
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute("CREATE ROLE limited LOGIN PASSWORD 'lim-pw' CONNECTION LIMIT 2")
    try:
        first = psycopg.connect(server.dsn(user="limited", password="lim-pw"))
        second = psycopg.connect(server.dsn(user="limited", password="lim-pw"))
        with pytest.raises(psycopg.OperationalError, match='too many connections for role "limited"'):
            psycopg.connect(server.dsn(user="limited", password="lim-pw"))
        first.close()
        for _ in range(50):  # (the server sees the socket close a moment later)
            try:
                third = psycopg.connect(server.dsn(user="limited", password="lim-pw"))
                break
            except psycopg.OperationalError:
                time.sleep(0.1)
        else:
            raise AssertionError("a closed session's place was never freed")
        third.close()
        second.close()
    finally:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("DROP ROLE limited")
