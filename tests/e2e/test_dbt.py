"""dbt (dbt-core 1.11 + dbt-postgres 1.11, their own venv: infra/tool-venv.sh dbt) against icegres.

The project tests/e2e/dbt_project: two seeds of several types (integer, numeric, text, date,
boolean, a NULL, a quote in a value), an ephemeral model read by a table model and by a view
model, generic tests (unique, not_null, accepted_values, relationships) and a singular one. Each
test copies it to its own directory with a profiles.yml naming this server (password login) and a
schema of its own, runs the real `dbt` in a subprocess, and checks the rows over psycopg.

dbt wraps every model in a transaction block (psycopg2's implicit BEGIN). Its table
materialization is `create table x__dbt_tmp as (...)`, then `alter table x__dbt_tmp rename to x`
(with `x` renamed to `x__dbt_backup` first when it exists), COMMIT, `drop table x__dbt_backup`:
DDL in transaction blocks (engine/ddl_block.py) makes that one atomic change at COMMIT. The
table model is also built outside dbt (the same statements, one by one) as a control.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.dbt import DbtProject, DbtTarget, dbt_executable
from tests.support.icegres_server import IcegresServer, running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PROJECT = Path(__file__).with_name("dbt_project")
USER, PASSWORD = "dbt", "dbt-secret"

CUSTOMERS = [
    (1, "Ada", dt.date(2024, 1, 15), True, Decimal("1500.50")),
    (2, "Grace", dt.date(2024, 2, 29), False, Decimal("250.00")),
    (3, "Linus", dt.date(2024, 3, 1), True, Decimal("0.75")),
    (4, "Edsger", dt.date(2024, 12, 31), True, Decimal("10000.00")),
    (5, "Barbara O'Neil", dt.date(2025, 1, 1), False, None),
]
ORDERS = [
    (100, 1, Decimal("19.99"), "completed", dt.date(2024, 4, 1), False),
    (101, 1, Decimal("5.01"), "completed", dt.date(2024, 4, 3), True),
    (102, 2, Decimal("100.00"), "cancelled", dt.date(2024, 4, 5), False),
    (103, 3, Decimal("42.50"), "shipped", dt.date(2024, 5, 10), False),
    (104, 3, Decimal("7.50"), "completed", dt.date(2024, 6, 1), True),
    (105, 4, Decimal("0.00"), "placed", dt.date(2024, 6, 2), False),
]
OPEN_ORDERS = [  # the view: orders not cancelled, with the customer's name
    (100, "Ada", Decimal("19.99"), dt.date(2024, 4, 1), False),
    (101, "Ada", Decimal("5.01"), dt.date(2024, 4, 3), True),
    (103, "Linus", Decimal("42.50"), dt.date(2024, 5, 10), False),
    (104, "Linus", Decimal("7.50"), dt.date(2024, 6, 1), True),
    (105, "Edsger", Decimal("0.00"), dt.date(2024, 6, 2), False),
]
CUSTOMER_ORDERS = [  # the table: customer_id, name, is_active, credit_limit, order_count, total, first, gift
    (1, "Ada", True, Decimal("1500.50"), 2, Decimal("25.00"), dt.date(2024, 4, 1), True),
    (2, "Grace", False, Decimal("250.00"), 0, Decimal("0.00"), None, None),
    (3, "Linus", True, Decimal("0.75"), 2, Decimal("50.00"), dt.date(2024, 5, 10), True),
    (4, "Edsger", True, Decimal("10000.00"), 1, Decimal("0.00"), dt.date(2024, 6, 2), False),
    (5, "Barbara O'Neil", False, None, 0, Decimal("0.00"), None, None),
]
SEED_COLUMNS = {
    "customers": [("id", "integer"), ("name", "text"), ("signup_date", "date"), ("is_active", "boolean"),
                  ("credit_limit", "numeric(12,2)")],
    "orders": [("order_id", "integer"), ("customer_id", "integer"), ("amount", "numeric(10,2)"),
               ("status", "text"), ("ordered_at", "date"), ("gift", "boolean")],
}
OPEN_ORDERS_COLUMNS = [("order_id", "integer"), ("customer_name", "text"), ("amount", "numeric(10,2)"),
                       ("ordered_at", "date"), ("gift", "boolean")]


@pytest.fixture(scope="module")
def dbt_bin() -> Path:
    return dbt_executable()


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    data_dir = tmp_path_factory.mktemp("dbt") / "lake"
    with running_icegres(data_dir, env={"ICEGRES_USERS": f"{USER}:{PASSWORD}"}, user=USER,
                         password=PASSWORD) as srv:
        yield srv


def _project(dbt: Path, server: IcegresServer, tmp_path: Path, schema: str) -> DbtProject:
    target = DbtTarget(server.host, server.port, USER, PASSWORD, server.database)
    return DbtProject.copy(dbt, PROJECT, tmp_path / "project", target, schema)


def _names(results: list[dict[str, Any]]) -> set[str]:
    """The nodes a run ran, by name: `seed.icegres_shop.orders`, `test.icegres_shop.<name>.<hash>`."""
    return {r["unique_id"].split(".")[2] for r in results}


def _relations(project: DbtProject) -> list[tuple[str, str]]:
    return project.rows("select table_name, table_type from information_schema.tables"
                        " where table_schema = '{schema}' order by 1")


def test_seeds_a_view_over_an_ephemeral_model_tests_and_docs(dbt_bin: Path, icegres: IcegresServer,
                                                            tmp_path: Path) -> None:
    project = _project(dbt_bin, icegres, tmp_path, "analytics")
    without_table = ("--exclude", "customer_orders+")

    seeded = project.ok("seed")
    assert _names(seeded) == {"customers", "orders"}
    assert project.rows("select * from {schema}.customers order by id") == CUSTOMERS
    assert project.rows("select * from {schema}.orders order by order_id") == ORDERS

    assert _names(project.ok("run", *without_table)) == {"open_orders"}
    assert project.rows("select * from {schema}.open_orders order by order_id") == OPEN_ORDERS

    tested = project.ok("test", *without_table)
    assert _names(tested) == {
        "unique_customers_id", "not_null_customers_id", "unique_orders_order_id", "not_null_orders_order_id",
        "accepted_values_orders_status__placed__shipped__completed__cancelled",
        "relationships_orders_customer_id__id__ref_customers_", "unique_open_orders_order_id",
        "not_null_open_orders_customer_name", "relationships_open_orders_order_id__order_id__ref_orders_"}

    project.ok("docs", "generate")
    catalog = json.loads((project.root / "target" / "catalog.json").read_text())
    assert not catalog.get("errors"), catalog["errors"]
    described = {key.split(".")[-1]: (node["metadata"]["type"],
                                      [(c["name"], c["type"]) for c in sorted(node["columns"].values(),
                                                                               key=lambda c: c["index"])])
                 for key, node in catalog["nodes"].items()}
    assert described == {"customers": ("BASE TABLE", SEED_COLUMNS["customers"]),
                         "orders": ("BASE TABLE", SEED_COLUMNS["orders"]),
                         "open_orders": ("VIEW", OPEN_ORDERS_COLUMNS)}

    # Two builds more: the seeds are truncated and loaded again, the view replaced (created as
    # open_orders__dbt_tmp, the old one renamed to __dbt_backup, the new one renamed, the backup
    # dropped); the second with four threads.
    for threads in ("1", "4"):
        built = project.ok("build", *without_table, "--threads", threads)
        assert _names(built) >= {"customers", "orders", "open_orders"} and len(built) == 12
        assert project.rows("select * from {schema}.customers order by id") == CUSTOMERS
        assert project.rows("select * from {schema}.orders order by order_id") == ORDERS
        assert project.rows("select * from {schema}.open_orders order by order_id") == OPEN_ORDERS
        assert _relations(project) == [("customers", "BASE TABLE"), ("open_orders", "VIEW"),
                                       ("orders", "BASE TABLE")]


def test_the_table_models_statements_one_by_one(dbt_bin: Path, icegres: IcegresServer, tmp_path: Path) -> None:
    """What dbt's table materialization sends for customer_orders, in the order it sends it,
    each statement on its own (autocommit): a first build, then a rebuild over the old table."""
    project = _project(dbt_bin, icegres, tmp_path, "analytics_stmts")
    project.ok("seed")
    project.ok("compile", "--select", "customer_orders")
    compiled = (project.root / "target" / "compiled" / "icegres_shop" / "models" / "customer_orders.sql").read_text()
    name = f'"{icegres.database}"."{project.schema}"'
    first = [f"drop table if exists {name}.\"customer_orders__dbt_tmp\" cascade",
             f"create  table {name}.\"customer_orders__dbt_tmp\"\n  \n  \n    as\n  \n  (\n    {compiled}\n  );",
             f"alter table {name}.\"customer_orders__dbt_tmp\" rename to \"customer_orders\"",
             f"drop table if exists {name}.\"customer_orders__dbt_backup\" cascade"]
    rebuild = [*first[:2],
               f"alter table {name}.\"customer_orders\" rename to \"customer_orders__dbt_backup\"",
               *first[2:]]
    with psycopg.connect(icegres.dsn(), autocommit=True) as conn:
        for statements in (first, rebuild):
            for sql in statements:
                conn.execute(sql)
            assert project.rows("select * from {schema}.customer_orders order by customer_id") == CUSTOMER_ORDERS
    assert _relations(project) == [("customer_orders", "BASE TABLE"), ("customers", "BASE TABLE"),
                                   ("orders", "BASE TABLE")]
    # ...and dbt's tests of it, the singular one among them, pass over it.
    tested = project.ok("test", "--select", "customer_orders")
    assert "totals_match_orders" in _names(tested) and len(tested) == 5


def test_two_builds_of_everything(dbt_bin: Path, icegres: IcegresServer, tmp_path: Path) -> None:
    project = _project(dbt_bin, icegres, tmp_path, "analytics_build")
    for threads in ("1", "4"):
        done = project.run("build", "--threads", threads)
        built = project.succeeded(done, "build", "--threads", threads)
        assert len(built) == 2 + 2 + 14  # seeds, models, tests
        assert project.rows("select * from {schema}.customer_orders order by customer_id") == CUSTOMER_ORDERS
        assert project.rows("select * from {schema}.open_orders order by order_id") == OPEN_ORDERS
        assert project.rows("select * from {schema}.customers order by id") == CUSTOMERS
        assert _relations(project) == [("customer_orders", "BASE TABLE"), ("customers", "BASE TABLE"),
                                       ("open_orders", "VIEW"), ("orders", "BASE TABLE")]
    project.ok("docs", "generate")
    catalog = json.loads((project.root / "target" / "catalog.json").read_text())
    columns = catalog["nodes"]["model.icegres_shop.customer_orders"]["columns"]
    assert [(c["name"], c["type"]) for c in sorted(columns.values(), key=lambda c: c["index"])] == [
        ("customer_id", "integer"), ("name", "text"), ("is_active", "boolean"), ("credit_limit", "numeric(12,2)"),
        ("order_count", "bigint"), ("total_amount", "numeric(22,2)"), ("first_ordered_at", "date"),
        ("got_gift", "boolean")]
