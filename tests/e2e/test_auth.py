"""Password authentication from --password-file / ICEGRES_USERS (SCRAM-SHA-256, the default
method: tests/e2e/test_scram.py has every client family and the explicit `password` method), and
the startup checks."""

from __future__ import annotations

import subprocess

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def password_server(seeded_dir, tmp_path_factory):
    pwfile = tmp_path_factory.mktemp("auth") / "users"
    pwfile.write_text("# icegres users\nalice:wonder land\n")
    with running_icegres(seeded_dir, args=("--password-file", str(pwfile)), env={"ICEGRES_USERS": "bob:builder"}) as srv:
        yield srv


def test_password_from_file_and_env(password_server):
    for user, password in (("alice", "wonder land"), ("bob", "builder")):
        # require_auth: libpq insists on SCRAM, the default; a cleartext request would fail here.
        with psycopg.connect(password_server.dsn(user=user, password=password, require_auth="scram-sha-256")) as c:
            assert c.execute("select current_user, count(*) from demo.cities").fetchone() == (user, 20)


def test_wrong_password_and_unknown_user(password_server):
    for user, password in (("alice", "nope"), ("mallory", "x")):
        with pytest.raises(psycopg.OperationalError) as exc:
            psycopg.connect(password_server.dsn(user=user, password=password))
        assert f'password authentication failed for user "{user}"' in str(exc.value)


def test_psql_password_prompt_free(password_server):
    proc = subprocess.run(
        ["psql", "-X", "-At", password_server.dsn(user="bob"), "-c", "select 1"],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "PGPASSWORD": "builder"},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "1", proc.stderr


def test_wrong_database_is_3d000(server):
    with pytest.raises(psycopg.OperationalError) as exc:
        psycopg.connect(server.dsn(dbname="nope"))
    assert 'database "nope" does not exist' in str(exc.value)


def test_refuses_trust_on_non_loopback(seeded_dir):
    proc = subprocess.run(
        [*running_icegres_cmd(seeded_dir), "--host", "0.0.0.0", "--port", "1"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode != 0
    assert "trust auth is for loopback only" in proc.stderr


def running_icegres_cmd(data_dir):
    import sys

    return [sys.executable, "-m", "icegres", "serve", "--data-dir", str(data_dir)]
