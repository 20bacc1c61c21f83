"""pandas `DataFrame.to_sql` with its defaults (index=True: pandas then runs CREATE INDEX on the
index column), through SQLAlchemy's psycopg and psycopg2 dialects; and what CREATE INDEX means on
an Iceberg table (ddl_index.py): listed in pg_indexes and psql's \\d, the table's sort order for
the files written from then on, and Parquet bloom filters on its columns."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pandas as pd
import psycopg
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("pandas") / "data") as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as conn:
            conn.execute("create schema if not exists frames")
        yield srv


@pytest.mark.parametrize("driver", ["postgresql+psycopg", "postgresql+psycopg2"])
def test_to_sql_with_pandas_defaults(icegres: IcegresServer, driver: str) -> None:
    frame = pd.DataFrame({"city": ["Lima", "Oslo", "Pune"], "population": [10_092_000, 709_037, 3_124_458],
                          "area": [2672.3, 454.0, 331.26]})
    engine = sa.create_engine(icegres.url(driver))
    try:
        name = f"cities_{driver.split('+')[1]}"
        for _ in range(2):  # the second run replaces the table: DROP, CREATE, INSERT, CREATE INDEX again
            # (the row count it returns is the driver's: -1 with psycopg 3, on PostgreSQL too)
            frame.to_sql(name, engine, schema="frames", if_exists="replace")
        back = pd.read_sql_table(name, engine, schema="frames", index_col="index")
        pd.testing.assert_frame_equal(back, frame, check_names=False)
        indexes = sa.inspect(engine).get_indexes(name, schema="frames")
        assert [(i["name"], i["column_names"], i["unique"]) for i in indexes] == \
            [(f"ix_frames_{name}_index", ["index"], False)]
    finally:
        engine.dispose()


def test_an_index_is_listed_sorts_new_files_and_gets_bloom_filters(icegres: IcegresServer) -> None:
    with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
        conn.execute("create table frames.events (id bigint, kind text, score int)")
        conn.execute("create index events_score on frames.events (score)")
        conn.execute("insert into frames.events select g, 'k' || (g % 7), (1000 - g)::int "
                     "from generate_series(1, 1000) t(g)")
        assert conn.execute("select indexname, indexdef from pg_indexes where tablename = 'events'").fetchall() == \
            [("events_score", "CREATE INDEX events_score ON frames.events USING btree (score)")]
        described = subprocess.run(["psql", icegres.dsn(), "-XAc", r"\d frames.events"],
                                   capture_output=True, text=True, timeout=60)
        assert '"events_score" btree (score)' in described.stdout
        files = sorted((icegres.data_dir / "warehouse" / "frames" / "events" / "data").glob("*.parquet"))
        assert files
        for path in files:
            parquet = pq.ParquetFile(path)
            scores = parquet.read(columns=["score"]).column("score").to_pylist()
            assert scores == sorted(scores)
            column = parquet.metadata.row_group(0).column(parquet.schema_arrow.get_field_index("score"))
            assert column.bloom_filter_offset is not None
        # a filter on the index column reads as before
        assert conn.execute("select id from frames.events where score = 990").fetchall() == [(10,)]
        conn.execute("drop index frames.events_score")
        assert conn.execute("select count(*) from pg_indexes where tablename = 'events'").fetchone() == (0,)


@pytest.mark.parametrize("sql", [
    "create index on frames.nope (a)",
    "create index x_idx on frames.t (nope)",
    "create index t_a_idx on frames.t (a)",  # the name PostgreSQL chose for the first one
    "create index t on frames.t (a)",
    "drop index frames.nope",
    "create unique index u on frames.t (a)",
])
def test_index_errors_as_postgresql(icegres: IcegresServer, real_postgres, sql: str) -> None:  # noqa: F811
    def outcome(dsn: str) -> str | None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create schema if not exists frames")
            conn.execute("drop table if exists frames.t")
            conn.execute("create table frames.t (a int, b text)")
            conn.execute("create index on frames.t (a)")
            try:
                conn.execute(sql)
            except psycopg.Error as err:
                return err.diag.sqlstate
            return None

    ours, theirs = outcome(icegres.dsn()), outcome(real_postgres.dsn())
    if sql.startswith("create unique"):
        assert (ours, theirs) == ("0A000", None)  # nothing would enforce it on an Iceberg table
    else:
        assert ours == theirs
