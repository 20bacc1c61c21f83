"""SCRAM-SHA-256-PLUS over TLS: channel binding tls-server-end-point with real clients. libpq
(psql, psycopg, and psqlODBC, which hands libpq `pqopt={channel_binding=require}`) with
`channel_binding=require` and pgjdbc with `channelBinding=require` refuse to log in unless the
server offered -PLUS and proved the binding; a wrong password is still 28P01.
"""

from __future__ import annotations

import subprocess

import psycopg
import pyodbc
import pytest

from tests.e2e.test_psqlodbc import conn_str
from tests.e2e.test_scram import jdbc_login, login_class  # noqa: F401  (fixture)
from tests.support.icegres_server import running_icegres
from tests.support.tls import self_signed

pytestmark = pytest.mark.e2e

PASSWORD = "bound-pw"


@pytest.fixture(scope="module")
def tls_server(seeded_dir, tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("scram-tls-cert"))
    pwfile = tmp_path_factory.mktemp("scram-tls") / "users"
    pwfile.write_text(f"alice:{PASSWORD}\n")
    args = ("--password-file", str(pwfile), "--tls-cert", str(cert), "--tls-key", str(key))
    with running_icegres(seeded_dir, args=args) as srv:
        yield srv


def test_psycopg_channel_binding_require(tls_server):
    dsn = tls_server.dsn(user="alice", password=PASSWORD, sslmode="require", channel_binding="require")
    with psycopg.connect(dsn) as c:
        assert c.pgconn.ssl_in_use
        assert c.execute("select current_user").fetchone() == ("alice",)
    with pytest.raises(psycopg.OperationalError) as exc:
        psycopg.connect(tls_server.dsn(user="alice", password="nope", sslmode="require", channel_binding="require"))
    assert 'password authentication failed for user "alice"' in str(exc.value)


def test_plain_scram_over_tls_still_works(tls_server):
    # channel_binding=disable: libpq picks SCRAM-SHA-256 although -PLUS was offered (GS2 "n").
    dsn = tls_server.dsn(user="alice", password=PASSWORD, sslmode="require", channel_binding="disable")
    with psycopg.connect(dsn) as c:
        assert c.execute("select 1").fetchone() == (1,)


def test_psql_channel_binding_require(tls_server):
    proc = subprocess.run(
        ["psql", "-X", "-At", tls_server.dsn(user="alice", sslmode="require", channel_binding="require"),
         "-c", "select current_user"],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "PGPASSWORD": PASSWORD},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "alice", proc.stderr


def test_pgjdbc_channel_binding_require(tls_server, login_class):  # noqa: F811
    options = "?sslmode=require&channelBinding=require"
    ok = jdbc_login(tls_server, login_class, "alice", PASSWORD, options)
    assert ok.get("login") == "ok" and ok.get("current_user") == "alice", ok
    bad = jdbc_login(tls_server, login_class, "alice", "nope", options)
    assert bad.get("sqlstate") == "28P01", bad


def test_psqlodbc_channel_binding_require(tls_server):
    """psqlODBC passes libpq options through `pqopt` (its docs: "pqopt={...}", space-separated
    inside the braces). Over TLS the login succeeds only through SCRAM-SHA-256-PLUS with the
    binding proved (libpq refuses anything less under `require`); without TLS the same option makes
    libpq refuse before a password is sent, which shows the option reached it."""
    def odbc(password: str, sslmode: str) -> pyodbc.Connection:
        return pyodbc.connect(conn_str(tls_server, UID="alice", PWD=password, SSLmode=sslmode,
                                       pqopt="{channel_binding=require}"), autocommit=True, timeout=30)

    c = odbc(PASSWORD, "require")
    try:
        cur = c.cursor()
        assert cur.execute("select current_user").fetchone()[0] == "alice"
        assert cur.execute("show ssl").fetchone()[0] == "on"
    finally:
        c.close()
    with pytest.raises(pyodbc.Error, match='password authentication failed for user "alice"'):
        odbc("nope", "require")
    with pytest.raises(pyodbc.Error, match="channel binding required, but SSL not in use"):
        odbc(PASSWORD, "disable")
