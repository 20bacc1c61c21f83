"""SCRAM-SHA-256, the default password method, with every client family: psql, psycopg, asyncpg,
pg8000, pgjdbc and psqlODBC log in and are refused a wrong password with PostgreSQL's 28P01. The
users come from a --password-file holding a plain password (hashed at load) and a verifier made
by a real PostgreSQL 15 (`CREATE ROLE ... PASSWORD` with password_encryption scram-sha-256).

Also: an unknown user gets the same exchange (a stable mock salt) and the same error; a client
that has not logged in cannot learn which databases exist; `--auth-method password` asks for the
cleartext password and checks it against the verifier; channel binding over TLS is in
test_scram_tls.py. The server's log never shows a password or a verifier.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import asyncpg
import pg8000.dbapi
import psycopg
import pyodbc
import pytest
from scramp import ScramClient

from tests.e2e.test_pgjdbc import _jar
from tests.e2e.test_psqlodbc import conn_str
from tests.support.icegres_server import running_icegres
from tests.support.pgwire_raw import RawConnection, mechanisms

pytestmark = pytest.mark.e2e

ALICE_PASSWORD = "wonder land ü"  # a space and a non-ASCII letter: SASLprep'd on both sides
PG_PASSWORD = "x-from-postgres"
LOGIN_SOURCE = Path(__file__).parent / "java" / "IcegresJdbcLogin.java"


@pytest.fixture(scope="module")
def pg_verifier(real_postgres) -> str:
    """A verifier made by PostgreSQL 15 itself, as pg_authid keeps it."""
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as c:
        c.execute("SET password_encryption = 'scram-sha-256'")
        c.execute("DROP ROLE IF EXISTS scram_u")
        c.execute(f"CREATE ROLE scram_u LOGIN PASSWORD '{PG_PASSWORD}'")
        (verifier,) = c.execute("SELECT rolpassword FROM pg_authid WHERE rolname = 'scram_u'").fetchone()
    assert verifier.startswith("SCRAM-SHA-256$4096:")
    return verifier


@pytest.fixture(scope="module")
def scram_server(seeded_dir, tmp_path_factory, pg_verifier):
    pwfile = tmp_path_factory.mktemp("scram") / "users"
    pwfile.write_text(f"# icegres users\nalice:{ALICE_PASSWORD}\npguser:{pg_verifier}\n")
    with running_icegres(seeded_dir, args=("--password-file", str(pwfile))) as srv:
        yield srv


def refused(exc: BaseException, user: str) -> bool:
    return f'password authentication failed for user "{user}"' in str(exc)


def test_psycopg_logs_in_with_scram_and_checks_the_server(scram_server):
    # require_auth (libpq >= 16) makes the client insist on SCRAM: no silent fallback to cleartext.
    for user, password in (("alice", ALICE_PASSWORD), ("pguser", PG_PASSWORD)):
        dsn = scram_server.dsn(user=user, password=password, require_auth="scram-sha-256")
        with psycopg.connect(dsn) as c:
            assert c.execute("select current_user, count(*) from demo.cities").fetchone() == (user, 20)


def test_postgres_made_verifier_in_the_password_file(scram_server, pg_verifier):
    with psycopg.connect(scram_server.dsn(user="pguser", password=PG_PASSWORD)) as c:
        assert c.execute("select 1").fetchone() == (1,)
    with pytest.raises(psycopg.OperationalError) as exc:
        psycopg.connect(scram_server.dsn(user="pguser", password=PG_PASSWORD + "!"))
    assert refused(exc.value, "pguser")


def test_psycopg_wrong_password_and_unknown_user_are_28p01(scram_server):
    for user, password in (("alice", "nope"), ("mallory", ALICE_PASSWORD)):
        with pytest.raises(psycopg.OperationalError) as exc:
            psycopg.connect(scram_server.dsn(user=user, password=password))
        assert refused(exc.value, user)  # (psycopg gives no SQLSTATE for a failed connect)


def test_psql_scram(scram_server):
    env = {"PATH": "/usr/bin:/bin"}
    ok = subprocess.run(["psql", "-X", "-At", scram_server.dsn(user="alice"), "-c", "select current_user"],
                        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                        env={**env, "PGPASSWORD": ALICE_PASSWORD})
    assert ok.returncode == 0 and ok.stdout.strip() == "alice", ok.stderr
    bad = subprocess.run(["psql", "-X", "-At", scram_server.dsn(user="alice"), "-c", "select 1"],
                         capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                         env={**env, "PGPASSWORD": "nope"})
    assert bad.returncode != 0 and refused(bad.stderr, "alice"), bad.stderr


def test_asyncpg_scram(scram_server):
    async def body():
        c = await asyncpg.connect(host=scram_server.host, port=scram_server.port, user="alice",
                                  password=ALICE_PASSWORD, database=scram_server.database)
        try:
            assert await c.fetchval("select current_user") == "alice"
        finally:
            await c.close()
        with pytest.raises(asyncpg.InvalidPasswordError) as exc:
            await asyncpg.connect(host=scram_server.host, port=scram_server.port, user="alice",
                                  password="nope", database=scram_server.database)
        assert refused(exc.value, "alice") and exc.value.sqlstate == "28P01"

    asyncio.run(asyncio.wait_for(body(), 60))


def test_pg8000_scram(scram_server):
    c = pg8000.dbapi.connect(user="alice", password=ALICE_PASSWORD, host=scram_server.host,
                             port=scram_server.port, database=scram_server.database)
    try:
        cur = c.cursor()
        cur.execute("select current_user")
        assert cur.fetchone() == ["alice"]
    finally:
        c.close()
    with pytest.raises(pg8000.dbapi.DatabaseError) as exc:
        pg8000.dbapi.connect(user="alice", password="nope", host=scram_server.host, port=scram_server.port,
                             database=scram_server.database)
    assert exc.value.args[0]["C"] == "28P01" and refused(exc.value.args[0]["M"], "alice")


@pytest.fixture(scope="module")
def login_class(tmp_path_factory) -> tuple[Path, Path]:
    assert shutil.which("javac") and shutil.which("java"), "JDK missing; run infra/system-deps.sh"
    jar = _jar()
    out_dir = tmp_path_factory.mktemp("jdbc_login")
    subprocess.run(["javac", "-cp", str(jar), "-d", str(out_dir), str(LOGIN_SOURCE)], check=True,
                   timeout=120, capture_output=True)
    return jar, out_dir


def jdbc_login(server, login_class, user: str, password: str, options: str = "") -> dict[str, str]:
    jar, classes = login_class
    url = f"jdbc:postgresql://{server.host}:{server.port}/{server.database}{options}"
    proc = subprocess.run(["java", "-cp", f"{jar}:{classes}", "IcegresJdbcLogin", url, user, password],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_pgjdbc_scram(scram_server, login_class):
    # pgjdbc sends "*" as the SCRAM user name: the startup user is the one that counts.
    ok = jdbc_login(scram_server, login_class, "alice", ALICE_PASSWORD)
    assert ok.get("login") == "ok" and ok.get("current_user") == "alice", ok
    bad = jdbc_login(scram_server, login_class, "alice", "nope")
    assert bad.get("sqlstate") == "28P01" and refused(bad.get("message", ""), "alice"), bad


def test_psqlodbc_scram(scram_server):
    c = pyodbc.connect(conn_str(scram_server, UID="alice", PWD=ALICE_PASSWORD), autocommit=True, timeout=30)
    try:
        assert c.cursor().execute("select current_user").fetchone()[0] == "alice"
    finally:
        c.close()
    with pytest.raises(pyodbc.Error) as exc:
        pyodbc.connect(conn_str(scram_server, UID="alice", PWD="nope"), autocommit=True, timeout=30)
    assert refused(exc.value, "alice")


def test_unknown_user_gets_a_stable_mock_salt_and_the_same_error(scram_server):
    """PostgreSQL's defence against user enumeration, checked on the wire: an unknown user is
    offered SCRAM, given a salt that does not change between attempts (as a real user's), and
    refused only at the end, with the message a wrong password gets."""
    salts = []
    for _ in range(2):
        with RawConnection(scram_server.host, scram_server.port) as raw:
            assert mechanisms(raw.startup("mallory", scram_server.database)) == ["SCRAM-SHA-256"]
            client = ScramClient(["SCRAM-SHA-256"], "*", "guess")
            raw.sasl_initial("SCRAM-SHA-256", client.get_client_first().encode())
            server_first = raw.read()
            assert server_first.auth_code == 11
            salts.append(server_first.auth_data.split(b",")[1])
            client.set_server_first(server_first.auth_data.decode())
            raw.sasl_response(client.get_client_final().encode())
            error = raw.read().error_fields()
            assert (error["C"], error["M"]) == ("28P01", 'password authentication failed for user "mallory"')
    assert salts[0] == salts[1]


def test_database_names_are_not_revealed_before_login(scram_server):
    with pytest.raises(psycopg.OperationalError) as exc:
        psycopg.connect(scram_server.dsn(user="alice", password="nope", dbname="secret_db"))
    assert refused(exc.value, "alice") and "secret_db" not in str(exc.value)
    with pytest.raises(psycopg.OperationalError) as exc:
        psycopg.connect(scram_server.dsn(user="alice", password=ALICE_PASSWORD, dbname="secret_db"))
    assert 'database "secret_db" does not exist' in str(exc.value)


@pytest.fixture(scope="module")
def password_method_server(seeded_dir, tmp_path_factory, pg_verifier):
    pwfile = tmp_path_factory.mktemp("cleartext") / "users"
    pwfile.write_text(f"alice:{ALICE_PASSWORD}\npguser:{pg_verifier}\n")
    with running_icegres(seeded_dir, args=("--password-file", str(pwfile), "--auth-method", "password")) as srv:
        yield srv


def test_explicit_password_method_checks_cleartext_against_the_verifier(password_method_server):
    srv = password_method_server
    # require_auth=password: libpq refuses unless the server really asked for the cleartext password.
    for user, password in (("alice", ALICE_PASSWORD), ("pguser", PG_PASSWORD)):
        with psycopg.connect(srv.dsn(user=user, password=password, require_auth="password")) as c:
            assert c.execute("select current_user").fetchone() == (user,)
    with pytest.raises(psycopg.OperationalError) as exc:
        psycopg.connect(srv.dsn(user="pguser", password="nope"))
    assert refused(exc.value, "pguser")
    with pytest.raises(psycopg.OperationalError) as exc:
        psycopg.connect(srv.dsn(user="alice", password=ALICE_PASSWORD, require_auth="scram-sha-256"))
    assert "server requested a cleartext password" in str(exc.value)


def test_logs_hold_no_password_or_verifier(scram_server, password_method_server, pg_verifier):
    """Runs after the logins above (pytest keeps file order): their server logs name users and
    reasons, never a secret."""
    secrets = [ALICE_PASSWORD, PG_PASSWORD, "nope", "guess", pg_verifier, *pg_verifier.rpartition("$")[2].split(":")]
    for srv in (scram_server, password_method_server):
        log = srv.log_path.read_text(errors="replace")
        assert 'password authentication failed for user' in log  # the failures were logged
        for secret in secrets:
            assert secret not in log, f"a secret is in {srv.log_path}"
