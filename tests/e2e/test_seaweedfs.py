"""icegres against SeaweedFS's REST catalog: every auth mode live, wrong credentials, catalog outage."""

from __future__ import annotations

import os
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
        assert "(oauth2 client-credentials)" in srv.log_tail()
        query_ok(srv)
    line = serve_fails(stack_lake, env_with(stack, ICEGRES_CATALOG_CREDENTIAL="icegresdev:wrong-secret"))
    assert "rest catalog at http://127.0.0.1" in line and "oauth2 client-credentials" in line
    assert "wrong-secret" not in line


def test_bearer_token(stack, stack_lake):
    token = stack.oauth2_token()
    with running_icegres(stack_lake, env=env_with(stack, ICEGRES_CATALOG_TOKEN=token)) as srv:
        assert "(bearer token)" in srv.log_tail()
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
