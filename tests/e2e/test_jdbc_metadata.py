"""pgjdbc's metadata as DBeaver, DataGrip and Metabase use it, against PostgreSQL 15: the SQL
keywords (pg_get_keywords()) and ResultSetMetaData — precision and scale of numeric(p,s), the
length and type name of varchar(n) / char(n), nullability, the source table and column — which pgjdbc reads from RowDescription's table OID,
column number and typmod and from pg_attribute."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.test_pgjdbc import _jar
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = pytest.mark.e2e

SOURCE = Path(__file__).parent / "java" / "IcegresJdbcMetadata.java"
SETUP = [
    "create schema if not exists jdbcmeta",
    "drop table if exists jdbcmeta.t",
    "create table jdbcmeta.t (n numeric(12,3) not null, i integer not null, b bigint, d double precision,"
    " t text, v varchar(5) not null, c char(3), u varchar)",
    "insert into jdbcmeta.t values (1.5, 1, 2, 0.5, 'x', 'abc', 'a', 'u')",
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    assert shutil.which("javac") and shutil.which("java"), "JDK missing; run infra/system-deps.sh"
    jar = _jar()
    out_dir = tmp_path_factory.mktemp("jdbc_meta_classes")
    subprocess.run(["javac", "-cp", str(jar), "-d", str(out_dir), str(SOURCE)], check=True, timeout=120,
                   capture_output=True)
    return jar, out_dir


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("jdbcmeta") / "data") as srv:
        yield srv


def _facts(compiled: tuple[Path, Path], host: str, port: int, database: str, user: str, dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SETUP:
            conn.execute(statement)
    jar, classes = compiled
    done = subprocess.run(["java", "-cp", f"{jar}:{classes}", "IcegresJdbcMetadata",
                           f"jdbc:postgresql://{host}:{port}/{database}", user],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_result_metadata_and_keywords_as_postgresql(compiled, icegres: IcegresServer, real_postgres) -> None:  # noqa: F811
    ours = _facts(compiled, icegres.host, icegres.port, "icegres", icegres.user, icegres.dsn())
    theirs = _facts(compiled, real_postgres.host, real_postgres.port, real_postgres.dbname, real_postgres.user,
                    real_postgres.dsn())
    assert ours.pop("keywords") == theirs.pop("keywords")
    assert ours == theirs
