"""A statement's correlation id, end to end: in its ErrorResponse (field `i`, which psycopg reads
and psql and asyncpg ignore, showing the error as PostgreSQL's), in a failed Flight SQL call's
trailing metadata `icegres-correlation-id` (which ADBC gives as the error's details), in its log line
(`--log-statement`, `--log-min-error-statement`), as the /metrics exemplar of its duration bucket
(OpenMetrics only); and no password, token or verifier of a run with password and JWT logins in
any log line, whatever the statements carried (docs/security.md, "Logs")."""

from __future__ import annotations

import asyncio
import re
import subprocess
import urllib.request
from pathlib import Path

import asyncpg
import psycopg
import pytest

from icegres.pg.scram import make_verifier
from tests.support import idp
from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("corr") / "data"
    with running_icegres(data, args=("--log-statement", "all", "--ops-port", "0", "--flight-port", "0")) as srv:
        yield srv


def log_lines(srv, correlation_id: str) -> list[str]:
    return [line for line in Path(srv.log_path).read_text(errors="replace").splitlines()
            if f"id={correlation_id} " in line]


def metrics(srv, accept: str | None = None) -> tuple[str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{srv.ops_port}/metrics",
                                     headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.headers["content-type"], reply.read().decode()


def test_psycopg_reads_the_id_and_the_log_line_of_the_same_error_has_it(server):
    with psycopg.connect(server.dsn(application_name="corr-test"), autocommit=True) as conn:
        conn.execute("select 1 as fine; select 2 as also_fine")
        with pytest.raises(psycopg.errors.UndefinedTable) as caught:
            conn.execute("select * from no_such_table_here")
        err = caught.value
        assert err.diag.sqlstate == "42P01" and err.diag.message_primary == 'relation "no_such_table_here" does not exist'
        correlation_id = err.pgresult.error_field(ord("i")).decode()
        assert re.fullmatch(r"[0-9a-f]{16}", correlation_id)
        # The next statement, simple protocol, fails with an id of its own.
        with pytest.raises(psycopg.errors.DivisionByZero) as again:
            conn.execute("select 1 / 0", prepare=False)
        assert again.value.pgresult.error_field(ord("i")).decode() != correlation_id
    [logged] = log_lines(server, correlation_id)
    assert "severity=ERROR sqlstate=42P01" in logged and "user=icegres" in logged and "app=corr-test" in logged
    assert 'statement="select * from no_such_table_here"' in logged and "client=127.0.0.1" in logged
    text = Path(server.log_path).read_text()
    assert re.search(r'tag="SELECT 1" rows=1 duration_ms=[0-9.]+ statement="select 2 as also_fine"', text)


def test_psql_shows_the_error_as_postgresql_does(server):
    base = ["psql", "-X", "-h", server.host, "-p", str(server.port), "-U", server.user, "-d", server.database]
    done = subprocess.run([*base, "-c", "select * from nope_psql"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == ('ERROR:  relation "nope_psql" does not exist\n'
                           "LINE 1: select * from nope_psql\n                      ^\n")
    verbose = subprocess.run([*base, "-v", "VERBOSITY=verbose", "-c", "select * from nope_psql"],
                             capture_output=True, text=True, timeout=60)
    assert verbose.stderr.startswith('ERROR:  42P01: relation "nope_psql" does not exist\n')
    # psql goes on after an error, and the session with it.
    done = subprocess.run([*base, "-c", "select * from nope_psql", "-c", "select 41 + 1"], capture_output=True,
                          text=True, timeout=60)
    assert "42" in done.stdout


def test_asyncpg_raises_the_error_as_ever(server):
    async def run() -> None:
        conn = await asyncpg.connect(host=server.host, port=server.port, user=server.user, database=server.database)
        try:
            with pytest.raises(asyncpg.exceptions.UndefinedTableError) as caught:
                await conn.fetch("select * from nope_asyncpg")
            assert caught.value.sqlstate == "42P01"
            assert await conn.fetchval("select $1::int + 1", 41) == 42
        finally:
            await conn.close()

    asyncio.run(run())


def test_adbc_gets_the_id_in_the_failed_calls_trailers_and_the_log_line_has_it(server):
    """Flight SQL carries the id as trailing metadata of the failed call; the ADBC driver (Go)
    hands the trailers to Python as the error's details. Each failed call has an id of its own,
    whichever call failed: a prepare (DoAction) or an execution (GetFlightInfo)."""
    import adbc_driver_flightsql.dbapi as adbc
    import adbc_driver_manager

    ids = []
    with adbc.connect(f"grpc://127.0.0.1:{server.flight_port}", autocommit=True) as conn, conn.cursor() as cur:
        for sql, sqlstate, rpc in (("select * from nope_flight", "42P01", "DoAction"),
                                   ("select 1 / (select count(*) - count(*) from (values (1)) t(x))", "22012",
                                    "GetFlightInfo")):
            with pytest.raises(adbc_driver_manager.Error) as caught:
                cur.execute(sql)
                cur.fetchall()
            assert f"(SQLSTATE {sqlstate})" in str(caught.value)
            [correlation_id] = [value.decode() for key, value in caught.value.details
                                if key == b"icegres-correlation-id"]
            assert re.fullmatch(r"[0-9a-f]{16}", correlation_id)
            [logged] = log_lines(server, correlation_id)
            assert "protocol=flightsql" in logged and f"rpc={rpc}" in logged, logged
            assert f"severity=ERROR sqlstate={sqlstate}" in logged and "client=127.0.0.1" in logged, logged
            ids.append(correlation_id)
        cur.execute("select 41 + 1")  # the connection goes on
        assert cur.fetchall() == [(42,)]
    assert ids[0] != ids[1]
    _, om = metrics(server, OPENMETRICS)
    assert re.search(r'icegres_statement_duration_seconds_bucket\{protocol="flightsql",outcome="error",le="[^"]+"\} '
                     rf'\d+ # \{{correlation_id="({"|".join(ids)})"\}}', om), om


def test_metrics_name_the_last_statement_of_a_bucket_in_openmetrics_only(server):
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable) as caught:
            conn.execute("select * from nope_metrics")
    correlation_id = caught.value.pgresult.error_field(ord("i")).decode()
    kind, om = metrics(server, OPENMETRICS)
    assert kind.startswith("application/openmetrics-text; version=1.0.0")
    assert om.endswith("# EOF\n")
    assert re.search(r'icegres_statement_duration_seconds_bucket\{protocol="pgwire",outcome="error",le="[^"]+"\} \d+ '
                     rf'# \{{correlation_id="{correlation_id}"\}} [0-9.e-]+ \d+\.\d+\n', om), om
    kind, plain = metrics(server)
    assert kind.startswith("text/plain; version=0.0.4")
    assert 'icegres_statement_duration_seconds_count{protocol="pgwire",outcome="ok"}' in plain
    assert "# {" not in plain and "# EOF" not in plain


def test_no_password_token_or_verifier_reaches_the_log(tmp_path):
    """Password and JWT logins, right and wrong, then statements that carry the secrets as text:
    the whole server log holds none of them."""
    alice_password = "alice-corr-secret-7"
    verifier = make_verifier(alice_password)
    stored_key, server_key = verifier.format().rpartition("$")[2].split(":")
    pwfile = tmp_path / "users"
    pwfile.write_text(f"alice:{verifier.format()}\n")
    key = idp.SigningKey.rsa("rsa-corr")
    good = idp.mint(key, idp.claims("carol"))
    wrong_audience = idp.mint(key, idp.claims("carol", aud="someone-else"))
    secrets = [alice_password, "alice-wrong-secret-8", verifier.format(), stored_key, server_key, good,
               wrong_audience, "role-password-9"]
    with idp.serving_jwks(idp.jwks(key)) as provider:
        args = ("--password-file", str(pwfile), "--auth-method", "password", "--jwt-jwks", provider.url,
                "--jwt-issuer", idp.ISSUER, "--jwt-audience", idp.AUDIENCE, "--log-statement", "all",
                "--log-min-duration-statement", "0", "--log-min-error-statement", "error")
        with running_icegres(tmp_path / "data", args=args, user="alice", password=alice_password) as srv:
            with psycopg.connect(srv.dsn(application_name=good), autocommit=True) as conn:
                conn.execute(f"select '{good}' as token_literal")
                conn.execute("select %s::text as token_parameter", (good,))
                with pytest.raises(psycopg.Error):
                    conn.execute(f"select '{good}'::int")  # its error message quotes the literal
                with pytest.raises(psycopg.Error):
                    conn.execute("alter role alice password 'role-password-9'")
                with pytest.raises(psycopg.Error):
                    conn.execute(f"set application_name = '{good}'; select 1; select * from nope")
            with psycopg.connect(srv.dsn(user="carol", password=good), autocommit=True) as conn:
                assert conn.execute("select current_user").fetchone() == ("carol",)
            for user, password in (("alice", "alice-wrong-secret-8"), ("carol", wrong_audience)):
                with pytest.raises(psycopg.OperationalError):
                    psycopg.connect(srv.dsn(user=user, password=password))
            text = Path(srv.log_path).read_text(errors="replace")
    assert "token_literal" in text and "sqlstate=" in text and "duration: " in text and "***" in text
    leaked = [s[:12] + "…" for s in secrets if s in text]
    assert not leaked, f"secrets in the log: {leaked}"
    assert good[:40] not in text and good.rsplit(".", 1)[1] not in text
