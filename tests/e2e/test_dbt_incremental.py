"""dbt's incremental models and snapshots against icegres, compared with a real PostgreSQL 15 (issue 29).

The project tests/e2e/dbt_incremental reads two source tables the test owns (raw.customers,
raw.order_lines) and builds incremental models with the append, delete+insert, merge and microbatch
strategies (single and composite unique keys, merge_exclude_columns, on_schema_change:
append_new_columns) and snapshots with the timestamp and check strategies (hard deletes invalidated
or recorded as rows). The same project is built three times against icegres and against PostgreSQL,
the sources changed the same way on both between runs (inserts, updates with and without a new
updated_at, deletes, a deleted key coming back, and before the third run a new column); after each
run every table the project built must hold the same rows on both, with the same columns.

What dbt sends for these (dbt-postgres 1.11): each model in a transaction block; an incremental run
builds `create temporary table "<model>__dbt_tmp<time>" as (...)`, reads its columns from
information_schema (on_schema_change), `alter table ... add column` for new ones, then the strategy:
`insert into ... select` (append), `delete from t as DBT_INTERNAL_DEST where (k1, k2) in (select
distinct k1, k2 from tmp)` + insert (delete+insert), `merge into t as DBT_INTERNAL_DEST using tmp as
DBT_INTERNAL_SOURCE on (...) when matched then update ... when not matched then insert` (merge,
microbatch: one temporary table and MERGE per batch). A snapshot builds a staging temporary table
from a union of CTEs, then `update t set dbt_valid_to = ... from staging` and `insert into t select
... from staging`.

Snapshot timestamps that are the time of the run (dbt_valid_from/dbt_valid_to/dbt_updated_at of the
check strategy and of hard deletes, and the dbt_scd_id hashed from them) differ between any two runs,
so those four columns are compared by whether they are NULL. (The timestamp strategy's dbt_scd_id,
md5 of the key and `cast(updated_at as varchar)`, would differ anyway: icegres spells a timestamp
made text as Arrow does, docs/limitations.md.) The models cast `{{ var('run') }}` to integer: an
integer literal makes a bigint column in icegres (docs/limitations.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.dbt import DbtProject, DbtTarget, dbt_executable
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PROJECT = Path(__file__).with_name("dbt_incremental")
USER, PASSWORD = "dbt", "dbt-secret"
SCHEMA = "analytics"
RUN_TIMES = ("dbt_valid_from", "dbt_valid_to", "dbt_updated_at", "dbt_scd_id")
# The microbatch model's batches: years 2024 and 2025 of updated_at, whatever today is.
EVENT_TIMES = ("--event-time-start", "2024-01-01", "--event-time-end", "2026-01-01")

MODELS = {"orders_append", "customers_merge", "customers_delete_insert", "lines_merge", "lines_delete_insert",
          "customer_totals", "lines_microbatch", "lines_source"}
SNAPSHOTS = {"customers_ts", "customers_check", "lines_check"}
TABLES = sorted(MODELS - {"lines_source"} | SNAPSHOTS)

SOURCES = """
create schema raw
create table raw.customers (id int, name text, tier text, updated_at timestamp)
create table raw.order_lines (order_id int, line_no int, customer_id int, qty int, price numeric(10,2), status text, updated_at timestamp)
insert into raw.customers values (1, 'Ada', 'gold', '2024-01-01 10:00'), (2, 'Grace', 'silver', '2024-01-02 10:00'), (3, 'Linus', null, '2024-01-03 10:00'), (4, 'Edsger', 'bronze', '2024-01-04 10:00'), (5, 'Barbara O''Neil', 'silver', '2024-01-05 10:00')
insert into raw.order_lines values (100, 1, 1, 2, 9.99, 'placed', '2024-02-01 09:00'), (100, 2, 1, 1, 5.00, 'placed', '2024-02-01 09:00'), (101, 1, 2, 3, 20.00, 'shipped', '2024-02-02 09:00'), (102, 1, 3, 1, 42.50, 'placed', '2024-03-01 09:00'), (103, 1, 4, 5, 1.25, 'placed', '2024-03-02 09:00')
"""
# Between the first and the second run: a new tier with a new updated_at, a new name without one (only
# the check snapshot sees it), a deleted customer, new customers and lines, a changed line, a status
# changed without a new updated_at, a deleted order.
BEFORE_RUN_2 = """
update raw.customers set tier = 'gold', updated_at = '2024-06-01 10:00' where id = 2
update raw.customers set name = 'Linus T.' where id = 3
delete from raw.customers where id = 4
insert into raw.customers values (6, 'Frances', 'bronze', '2024-06-02 10:00'), (7, 'Niklaus', null, '2024-06-03 10:00')
update raw.order_lines set qty = 3, status = 'shipped', updated_at = '2025-01-10 09:00' where order_id = 100 and line_no = 1
update raw.order_lines set status = 'cancelled' where order_id = 102
delete from raw.order_lines where order_id = 103
insert into raw.order_lines values (104, 1, 6, 1, 99.00, 'placed', '2025-02-01 09:00'), (104, 2, 6, 2, 0.50, 'placed', '2025-02-01 09:00'), (100, 3, 1, 1, 1.00, 'placed', '2025-02-02 09:00')
"""
# Before the third: customers grows a column, the deleted customer comes back, another goes.
BEFORE_RUN_3 = """
alter table raw.customers add column region text
update raw.customers set region = 'EU', updated_at = '2025-03-01 10:00' where id in (1, 2)
update raw.customers set tier = 'platinum', updated_at = '2025-03-02 10:00' where id = 6
insert into raw.customers values (4, 'Edsger', 'bronze', '2025-03-03 10:00', 'EU'), (8, 'Ken', 'silver', '2025-03-04 10:00', null)
delete from raw.customers where id = 5
update raw.order_lines set price = price * 2, updated_at = '2025-04-01 09:00' where order_id = 104
insert into raw.order_lines values (105, 1, 8, 7, 3.33, 'placed', '2025-04-02 09:00')
delete from raw.order_lines where order_id = 101
"""


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    data_dir = tmp_path_factory.mktemp("dbt_incremental") / "lake"
    with running_icegres(data_dir, env={"ICEGRES_USERS": f"{USER}:{PASSWORD}"}, user=USER,
                         password=PASSWORD) as srv:
        yield srv


def _execute(target: DbtTarget, script: str) -> None:
    with psycopg.connect(target.dsn(), autocommit=True) as conn:
        for sql in (s.strip() for s in script.strip().splitlines()):
            conn.execute(sql)


def _columns(project: DbtProject, table: str) -> list[tuple[str, str]]:
    return project.rows("select column_name, data_type from information_schema.columns where table_schema ="
                        f" '{{schema}}' and table_name = '{table}' order by ordinal_position")


def _contents(project: DbtProject, table: str) -> list[tuple[Any, ...]]:
    """The table's rows, sorted, with the run-time columns reduced to whether they are NULL."""
    names = [name for name, _ in _columns(project, table)]
    items = [f"{name} is null as {name}" if name in RUN_TIMES else name for name in names]
    rows = project.rows(f"select {', '.join(items)} from {{schema}}.{table}")
    return sorted(rows, key=lambda row: tuple((v is None, str(v)) for v in row))


def _build(project: DbtProject, run: int) -> set[str]:
    """`dbt build` of everything for run `run`; the models and snapshots it built."""
    results = project.ok("build", "--vars", f"{{run: {run}}}", *EVENT_TIMES)
    return {r["unique_id"].split(".")[2] for r in results if r["unique_id"].split(".")[0] in ("model", "snapshot")}


def test_three_runs_of_incremental_models_and_snapshots_match_postgresql(
        icegres: IcegresServer, real_postgres: Any, tmp_path: Path) -> None:
    dbt = dbt_executable()
    ours = DbtProject.copy(dbt, PROJECT, tmp_path / "icegres", DbtTarget(icegres.host, icegres.port, USER, PASSWORD,
                                                                         icegres.database), SCHEMA)
    theirs = DbtProject.copy(dbt, PROJECT, tmp_path / "postgres", DbtTarget(
        real_postgres.host, real_postgres.port, real_postgres.user, "", real_postgres.dbname), SCHEMA)
    with psycopg.connect(theirs.target.dsn(), autocommit=True) as conn:
        conn.execute(f"drop schema if exists raw cascade; drop schema if exists {SCHEMA} cascade")
    seconds: dict[str, float] = {"icegres": 0.0, "postgres": 0.0}
    for run, changes in enumerate((SOURCES, BEFORE_RUN_2, BEFORE_RUN_3), start=1):
        for name, project in (("postgres", theirs), ("icegres", ours)):
            _execute(project.target, changes)
            started = time.monotonic()
            assert _build(project, run) == MODELS | SNAPSHOTS, name
            seconds[name] += time.monotonic() - started
        for table in TABLES:
            assert _columns(ours, table) == _columns(theirs, table), f"columns of {table} after run {run}"
            assert _contents(ours, table) == _contents(theirs, table), f"rows of {table} after run {run}"
    print(f"three dbt builds: {seconds}")
