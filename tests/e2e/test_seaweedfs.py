"""icegres against SeaweedFS's REST catalog: every auth mode live, wrong credentials, catalog outage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e

_AUTH_KEYS = ("ICEGRES_CATALOG_SIGV4", "ICEGRES_CATALOG_TOKEN", "ICEGRES_CATALOG_CREDENTIAL", "ICEGRES_OAUTH2_URI")


@pytest.fixture(scope="module")
def stack_lake(stack, tmp_path_factory):
    """A small demo lakehouse seeded into SeaweedFS through the REST catalog (SigV4)."""
    data_dir = tmp_path_factory.mktemp("swlake")
    subprocess.run([sys.executable, "-m", "icegres", "seed", "--data-dir", str(data_dir), "--rows", "20000"],
                   check=True, timeout=600, env={**os.environ, **stack.env()}, stdin=subprocess.DEVNULL,
                   capture_output=True)
    return data_dir


def env_with(stack, **auth: str) -> dict[str, str]:
    env = {k: v for k, v in stack.env().items() if k not in _AUTH_KEYS}
    env.update(auth)
    return env


def serve_fails(data_dir, env) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ICEGRES_")}
    proc = subprocess.run([sys.executable, "-m", "icegres", "serve", "--data-dir", str(data_dir), "--port", "0"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env={**clean, **env})
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def query_ok(srv) -> None:
    with psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert c.execute("select count(*) from demo.trips").fetchone() == (20000,)
        assert c.execute("select count(*) from demo.cities").fetchone() == (20,)


def test_oauth2_client_credentials(stack, stack_lake):
    creds = f"{stack.env()['ICEGRES_S3_ACCESS_KEY']}:{stack.env()['ICEGRES_S3_SECRET_KEY']}"
    with running_icegres(stack_lake, env=env_with(stack, ICEGRES_CATALOG_CREDENTIAL=creds)) as srv:
        srv.wait_log("(oauth2 client-credentials)")
        query_ok(srv)
    line = serve_fails(stack_lake, env_with(stack, ICEGRES_CATALOG_CREDENTIAL="icegresdev:wrong-secret"))
    assert "rest catalog at http://127.0.0.1" in line and "oauth2 client-credentials" in line
    assert "wrong-secret" not in line


def test_bearer_token(stack, stack_lake):
    token = stack.oauth2_token()
    with running_icegres(stack_lake, env=env_with(stack, ICEGRES_CATALOG_TOKEN=token)) as srv:
        srv.wait_log("(bearer token)")
        query_ok(srv)
    line = serve_fails(stack_lake, env_with(stack, ICEGRES_CATALOG_TOKEN=token[:-6] + "AAAAAA"))
    assert "bearer token" in line and token[:20] not in line


def test_sigv4_wrong_secret(stack, stack_lake):
    env = env_with(stack, ICEGRES_CATALOG_SIGV4="s3tables:us-east-1")
    env["ICEGRES_S3_SECRET_KEY"] = "not-the-secret"
    line = serve_fails(stack_lake, env)
    assert "sigv4 (s3tables)" in line and "not-the-secret" not in line


def test_catalog_outage_fails_statements_then_recovers(stack, stack_lake):
    with running_icegres(stack_lake, env=stack.env()) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert c.execute("select count(*) from demo.trips").fetchone() == (20000,)
        stack.stop_seaweed()
        try:
            with pytest.raises(psycopg.Error) as exc:
                c.execute("select count(*) from demo.trips")
            assert exc.value.sqlstate in ("58030", "08006")
            assert "catalog unavailable (rest catalog at http://127.0.0.1" in str(exc.value)
            # The session (and the server) survive: statements that need no catalog still answer.
            assert c.execute("select 1").fetchone() == (1,)
        finally:
            stack.start_seaweed()
        deadline = time.monotonic() + 60
        while True:
            try:
                assert c.execute("select count(*) from demo.trips").fetchone() == (20000,)
                break
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def _answers(c) -> list:
    return [c.execute("select count(*), sum(fare), min(id), max(id) from demo.trips").fetchone(),
            c.execute("select city, count(*) from demo.trips group by city order by city").fetchall(),
            c.execute("select * from demo.trips where id = 4242").fetchall(),
            c.execute("select count(*) from demo.trips t join demo.cities c on t.city = c.city").fetchone()]


def _since_start(srv) -> str:
    """This server's log (the file is per port, appended to)."""
    text = srv.log_tail(10_000_000)
    return text[text.rfind(" INFO icegres: serving "):]


def _wait_local(srv, table: str, times: int, timeout_s: float = 60) -> None:
    """Until the server has mounted `table` on local copies `times` times (its log says so); each
    check is a statement, which is what mounts a table again once its copies are all there."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(srv.dsn(), autocommit=True) as c:
        while _since_start(srv).count(f"{table}: reading its") < times:
            assert time.monotonic() < deadline, srv.log_tail()
            c.execute(f"select count(*) from {table}").fetchone()
            time.sleep(0.2)


def test_file_cache_serves_the_same_answers_and_new_snapshots_at_once(stack, stack_lake):
    """Tables are read from local copies of their S3 files once copied; the answers do not change,
    and a commit is visible to the next statement (its new file is read from S3 until copied)."""
    shutil.rmtree(stack_lake / "file-cache", ignore_errors=True)  # copies earlier servers made
    with running_icegres(stack_lake, env=stack.env()) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        remote = _answers(c)
        _wait_local(srv, "demo.trips", 1)
        _wait_local(srv, "demo.cities", 1)
        copies = list((stack_lake / "file-cache").glob("*.parquet"))
        assert copies and all(p.stat().st_mode & 0o777 == 0o600 for p in copies)
        assert _answers(c) == remote
        c.execute("insert into demo.trips (id, city, fare, distance, pickup_ts, passengers, vendor, paid) "
                  "values (99000001, 'Lagos', 1.5, 2.0, '2026-12-04 10:00:00+00', 1, 'Acme', true)")
        after = c.execute("select count(*), max(id) from demo.trips").fetchone()
        assert after == (remote[0][0] + 1, 99000001)  # the next statement, before any copy
        _wait_local(srv, "demo.trips", 2)
        assert c.execute("select count(*), max(id) from demo.trips").fetchone() == after
        c.execute("delete from demo.trips where id = 99000001")
        assert _answers(c) == remote
    with running_icegres(stack_lake, env={**stack.env(), "ICEGRES_FILE_CACHE_MB": "0"}) as srv, \
            psycopg.connect(srv.dsn(), autocommit=True) as c:
        assert _answers(c) == remote
        assert "reading its" not in _since_start(srv)
