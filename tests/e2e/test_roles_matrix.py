"""The issue's matrix: three roles — an owner, an analyst under row-level security and a mask, a
writer with INSERT only — each trying everything it must not be able to do, over psql, psycopg,
pgjdbc and ADBC (Flight SQL), against one `icegres serve` with password logins. Every client must
see the same outcome for every statement: the rows the role may see (masked), or the SQLSTATE."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PSQL = "/usr/lib/postgresql/15/bin/psql"
JAR_CANDIDATES = (
    Path.home() / ".m2/repository/org/postgresql/postgresql/42.7.13/postgresql-42.7.13.jar",
    Path("/usr/share/java/postgresql.jar"),
)
SOURCE = Path(__file__).parent / "java" / "IcegresRoleMatrix.java"
ADMIN = ("admin", "admin-pw-1")
PASSWORDS = {"owner_r": "owner-pw-2", "analyst": "analyst-pw-3", "writer": "writer-pw-4"}

DENIED = ("error", "42501")
MASKED = [("1", "eu", "***"), ("3", "eu", "***")]

# (statement, expected outcome, whether Flight SQL runs it: it has no SET)
MATRIX: dict[str, list[tuple[str, tuple, bool]]] = {
    "analyst": [
        ("SELECT id, region, email FROM m.items ORDER BY id", ("ok", MASKED), True),
        ("SELECT count(*) FROM m.items WHERE region = 'us'", ("ok", [("0",)]), True),
        ("SELECT email FROM m.items WHERE email LIKE 'a%'", ("ok", []), True),
        ("INSERT INTO m.items VALUES (9, 'eu', 'z')", DENIED, True),
        ("UPDATE m.items SET email = 'x'", DENIED, True),
        ("DELETE FROM m.items", DENIED, True),
        ("TRUNCATE m.items", DENIED, True),
        ("DROP TABLE m.items", DENIED, True),
        ('SELECT * FROM m."items$files"', DENIED, True),
        ('SELECT * FROM m."items$snapshots"', DENIED, True),
        ("ALTER TABLE m.items DISABLE ROW LEVEL SECURITY", DENIED, True),
        ("DROP MASK em ON m.items", DENIED, True),
        ("DROP POLICY eu ON m.items", DENIED, True),
        ("CREATE ROLE evil", DENIED, True),
        ("GRANT SELECT ON m.items TO writer", ("ok", None), True),  # a WARNING; nothing granted
        ("SET ROLE owner_r", DENIED, False),
        ("SELECT has_table_privilege('m.items', 'INSERT'), has_table_privilege('writer', 'm.items', 'SELECT')",
         ("ok", [("false", "false")]), True),
    ],
    "writer": [
        ("INSERT INTO m.items VALUES (10, 'us', 'w@x')", ("ok", None), True),
        ("INSERT INTO m.items VALUES (11, 'eu', 'w@x')", DENIED, True),  # its policy's WITH CHECK
        ("SELECT * FROM m.items", DENIED, True),
        ("INSERT INTO m.items VALUES (12, 'us', 'w@x') RETURNING id", DENIED, True),
        ("UPDATE m.items SET region = 'us'", DENIED, True),
        ("DELETE FROM m.items WHERE id = 1", DENIED, True),
        ("DROP TABLE m.items", DENIED, True),
        ("CREATE TABLE m.mine (a int)", DENIED, True),
        ("SELECT table_name FROM information_schema.tables WHERE table_schema = 'm'", ("ok", [("items",)]), True),
    ],
    "owner_r": [
        ("SELECT count(*) FROM m.items WHERE id < 10", ("ok", [("3",)]), True),
        ("SELECT email FROM m.items WHERE id = 1", ("ok", [("a@x",)]), True),
        ("UPDATE m.items SET email = 'a@x' WHERE id = 1", ("ok", None), True),
        ("ALTER TABLE m.items FORCE ROW LEVEL SECURITY", ("ok", None), True),
        ("SELECT count(*) FROM m.items WHERE id < 10", ("ok", [("0",)]), True),  # no policy names the owner
        ("ALTER TABLE m.items NO FORCE ROW LEVEL SECURITY", ("ok", None), True),
        ("CREATE ROLE evil", DENIED, True),
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("role-matrix")
    (base / "users").write_text(f"{ADMIN[0]}:{ADMIN[1]}\n")
    args = ("--password-file", str(base / "users"), "--flight-port", "0",
            "--auth-failure-delay-ms", "10", "--auth-failure-delay-max-ms", "20")
    with running_icegres(base / "data", args=args, user=ADMIN[0], password=ADMIN[1]) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as admin:
            for sql in ["CREATE SCHEMA m",
                        *(f"CREATE ROLE {r} LOGIN PASSWORD '{p}'" for r, p in PASSWORDS.items()),
                        "GRANT USAGE, CREATE ON SCHEMA m TO owner_r",
                        "GRANT USAGE ON SCHEMA m TO analyst, writer"]:
                admin.execute(sql)
        with psycopg.connect(srv.dsn(user="owner_r", password=PASSWORDS["owner_r"]), autocommit=True) as owner:
            for sql in ["CREATE TABLE m.items (id int, region text, email text)",
                        "INSERT INTO m.items VALUES (1, 'eu', 'a@x'), (2, 'us', 'b@y'), (3, 'eu', 'c@z')",
                        "ALTER TABLE m.items ENABLE ROW LEVEL SECURITY",
                        "CREATE POLICY eu ON m.items FOR SELECT TO analyst USING (region = 'eu')",
                        "CREATE POLICY w ON m.items FOR INSERT TO writer WITH CHECK (region = 'us')",
                        "CREATE MASK em ON m.items (email) TO analyst USING ('***')",
                        "GRANT SELECT ON m.items TO analyst", "GRANT INSERT ON m.items TO writer"]:
                owner.execute(sql)
        yield srv


def _text(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _psycopg(srv, role: str, statements: list[str]) -> list[tuple]:
    out = []
    with psycopg.connect(srv.dsn(user=role, password=PASSWORDS[role]), autocommit=True) as conn:
        for sql in statements:
            try:
                cur = conn.execute(sql)
                rows = [tuple(_text(v) for v in r) for r in cur.fetchall()] if cur.description else None
                out.append(("ok", rows))
            except psycopg.Error as exc:
                out.append(("error", exc.sqlstate))
    return out


def _psql(srv, role: str, statements: list[str]) -> list[tuple]:
    out = []
    env = {"PGPASSWORD": PASSWORDS[role], "PATH": "/usr/bin:/bin"}
    for sql in statements:
        proc = subprocess.run([PSQL, "-X", "-A", "-t", "-v", "VERBOSITY=sqlstate", "-h", srv.host, "-p", str(srv.port),
                               "-U", role, "-d", srv.database, "-c", sql], capture_output=True, text=True, timeout=60, env=env)
        error = re.search(r"ERROR:\s+([0-9A-Z]{5})", proc.stderr)
        if error:
            out.append(("error", error.group(1)))
            continue
        assert proc.returncode == 0, proc.stderr
        reads = sql.lstrip().upper().startswith("SELECT") or "RETURNING" in sql.upper()
        rows = [tuple({"t": "true", "f": "false"}.get(v, v) for v in line.split("|"))
                for line in proc.stdout.splitlines() if line] if reads else None
        out.append(("ok", rows))
    return out


def _pgjdbc(srv, role: str, statements: list[str], tmp_path: Path) -> list[tuple]:
    jar = next((j for j in JAR_CANDIDATES if j.exists()), None)
    assert jar is not None and shutil.which("javac"), "pgjdbc or the JDK missing; run infra/system-deps.sh"
    classes = tmp_path / "classes"
    if not (classes / "IcegresRoleMatrix.class").exists():
        subprocess.run(["javac", "-cp", str(jar), "-d", str(classes), str(SOURCE)], check=True, timeout=120)
    url = f"jdbc:postgresql://{srv.host}:{srv.port}/{srv.database}"
    proc = subprocess.run(["java", "-cp", f"{jar}:{classes}", "IcegresRoleMatrix", url, role, PASSWORDS[role], *statements],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and "done=true" in proc.stdout, proc.stderr[-2000:]
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith("done="):
            continue
        _, outcome = line.split("=", 1)
        if outcome.startswith("error:"):
            out.append(("error", outcome.split(":")[1]))
        else:
            body = outcome[3:]
            out.append(("ok", body))
    return out


def _adbc(srv, role: str, statements: list[str]) -> list[tuple]:
    out = []
    with adbc.connect(f"grpc://127.0.0.1:{srv.flight_port}",
                      db_kwargs={"username": role, "password": PASSWORDS[role]}, autocommit=True) as conn:
        for sql in statements:
            with conn.cursor() as cur:
                try:
                    cur.execute(sql)
                    rows = [tuple(_text(v) for v in r) for r in cur.fetchall()] if cur.description else None
                    out.append(("ok", rows))
                except adbc_driver_manager.Error as exc:
                    found = re.search(r"SQLSTATE[ :]+([0-9A-Z]{5})", str(exc))
                    out.append(("error", found.group(1) if found else getattr(exc, "sqlstate", None)))
    return out


def _matches(expected: tuple, got: tuple, client: str) -> bool:
    if expected[0] != got[0]:
        return False
    if expected[0] == "error":
        return got[1] == expected[1]
    if expected[1] is None:
        return True
    if client == "pgjdbc":  # one text per row, columns joined by commas; booleans as t / f
        return got[1] == ";".join(",".join({"true": "t", "false": "f"}.get(v, v) for v in r) for r in expected[1])
    return got[1] == expected[1]


@pytest.mark.parametrize("client", ["psycopg", "psql", "pgjdbc", "adbc"])
@pytest.mark.parametrize("role", list(MATRIX))
def test_each_role_does_what_it_may_and_nothing_else_over_every_client(server, role, client, tmp_path) -> None:
    cases = [(sql, want) for sql, want, flight in MATRIX[role] if flight or client != "adbc"]
    statements = [sql for sql, _ in cases]
    if client == "psycopg":
        got = _psycopg(server, role, statements)
    elif client == "psql":
        got = _psql(server, role, statements)
    elif client == "pgjdbc":
        got = _pgjdbc(server, role, statements, tmp_path)
    else:
        got = _adbc(server, role, statements)
    wrong = [(sql, want, have) for (sql, want), have in zip(cases, got, strict=True) if not _matches(want, have, client)]
    assert wrong == []
