"""psql's own role and privilege commands (\\du, \\dp, \\dn+, \\ddp, \\d) over icegres's catalogs, beside
PostgreSQL 15: the same output for the same roles and grants (the bootstrap superuser's name
aside: `postgres` there, `icegres` here)."""

from __future__ import annotations

import subprocess
import uuid

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = pytest.mark.e2e

PSQL = "/usr/lib/postgresql/15/bin/psql"


def _psql(host: str, port: int, user: str, database: str, command: str) -> str:
    out = subprocess.run([PSQL, "-X", "-h", host, "-p", str(port), "-U", user, "-d", database, "-c", command],
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout


def _cells(text: str) -> list[str]:
    """psql's table as its cells: the column widths follow the names in it (`postgres` is one
    letter longer than `icegres`), the cells must not differ."""
    return ["|".join(" ".join(cell.split()) for cell in line.split("|")).replace(" +", "+") for line in text.splitlines()
            if line.strip() and not set(line.strip()) <= set("-+")]


def test_du_dp_and_d_show_roles_grants_and_policies_as_postgresql_does(tmp_path, real_postgres) -> None:
    tag = uuid.uuid4().hex[:6]
    s, analyst, grp = f"s_{tag}", f"analyst_{tag}", f"grp_{tag}"
    setup = [f"CREATE SCHEMA {s}", f"CREATE TABLE {s}.t (a int)", f"CREATE ROLE {analyst} LOGIN",
             f"CREATE ROLE {grp}", f"GRANT {grp} TO {analyst}", f"GRANT USAGE ON SCHEMA {s} TO {grp}",
             f"GRANT SELECT ON {s}.t TO {analyst}", f"GRANT SELECT (a), UPDATE (a) ON {s}.t TO {grp}", f"GRANT INSERT ON {s}.t TO {grp} WITH GRANT OPTION",
             f"ALTER TABLE {s}.t ENABLE ROW LEVEL SECURITY",
             f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT, INSERT ON TABLES TO {analyst}"]
    teardown = [f"REVOKE ALL (a) ON {s}.t FROM {grp}", f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} REVOKE ALL ON TABLES FROM {analyst}", f"DROP TABLE {s}.t", f"DROP SCHEMA {s}", f"DROP ROLE {analyst}", f"DROP ROLE {grp}"]
    commands = [rf"\du {analyst}|{grp}", rf"\dp {s}.t", rf"\dn+ {s}", rf"\ddp {s}"]
    with running_icegres(tmp_path / "data") as icegres:
        outputs = []
        for host, port, user, db in ((icegres.host, icegres.port, icegres.user, icegres.database),
                                     (real_postgres.host, real_postgres.port, real_postgres.user, real_postgres.dbname)):
            with psycopg.connect(f"host={host} port={port} user={user} dbname={db}", autocommit=True) as conn:
                for sql in setup:
                    conn.execute(sql)
                try:
                    outputs.append([_cells(_psql(host, port, user, db, c).replace(user, "OWNER")) for c in commands])
                finally:
                    for sql in teardown:
                        conn.execute(sql)
        ours, theirs = outputs
        for command, mine, pg in zip(commands, ours, theirs, strict=True):
            assert mine == pg, command
        # The policy, as psql's \d shows it (its expression as written, where PostgreSQL deparses
        # it with its own parentheses).
        with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
            for sql in setup:
                conn.execute(sql)
            conn.execute(f"CREATE POLICY own ON {s}.t AS RESTRICTIVE FOR SELECT TO {analyst} USING (a > 0)")
        described = _psql(icegres.host, icegres.port, icegres.user, icegres.database, rf"\d {s}.t")
        assert f'POLICY "own" AS RESTRICTIVE FOR SELECT\n      TO {analyst}\n      USING (a > 0)' in described
