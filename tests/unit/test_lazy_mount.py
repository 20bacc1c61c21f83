"""Tables are mounted when a statement first names them (engine/lake.py, lazy mounting): start-up
reads no table's files, a catalog query reads each table's metadata JSON and nothing else, and a
statement reads only the files of the tables it names. Counted at the seam every file read of
the lake goes through (pyiceberg's FileIO `new_input`: metadata JSON, manifest lists, manifests,
Parquet footers) and at the one place a table becomes a DataFusion scan (`to_dataframe`), never
by timing."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from icegres.engine import lake as engine_mod
from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine, SessionEnv
from icegres.engine.query import open_session
from icegres.engine.txn import TxnState
from icegres.sql.statement import query

pytestmark = pytest.mark.unit

TABLES = 24
NS = "many"


def _rows(start: int, n: int = 2) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


@pytest.fixture
def lake(tmp_path: Path) -> Lakehouse:
    lh = Lakehouse.embedded(tmp_path)
    lh.create_namespace_if_missing(NS)
    for i in range(TABLES):
        table = lh.create_table(NS, f"t{i}", _rows(0).schema)
        table.append(_rows(0))
        table.append(_rows(10))  # two data files, two manifests
    return lh


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Every lake file opened through pyiceberg's FileIO, and every table made a DataFusion scan."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    seen: dict[str, list] = {"files": [], "scans": []}
    real_input = PyArrowFileIO.new_input
    real_to_dataframe = engine_mod.to_dataframe

    def new_input(self, location):  # type: ignore[no-untyped-def]
        seen["files"].append(location)
        return real_input(self, location)

    def to_dataframe(ctx, plan, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen["scans"].append(plan.metadata_location)
        return real_to_dataframe(ctx, plan, *args, **kwargs)

    monkeypatch.setattr(PyArrowFileIO, "new_input", new_input)
    monkeypatch.setattr(engine_mod, "to_dataframe", to_dataframe)
    return seen


def _kinds(paths: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for path in paths:
        kind = ("metadata" if path.endswith(".metadata.json") else "manifest" if path.endswith(".avro")
                else "parquet" if path.endswith(".parquet") else path)
        out[kind] = out.get(kind, 0) + 1
    return out


def _session(engine: Engine):  # type: ignore[no-untyped-def]
    return open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": NS}))


def _run(q, sql: str) -> dict:  # type: ignore[no-untyped-def]
    stmt = query(sql)
    q.refresh_for(stmt)
    return q.plan(stmt).df.to_pydict()


def test_start_up_reads_no_file_of_any_table(lake: Lakehouse, reads: dict[str, list]) -> None:
    engine = Engine(lake)
    engine.refresh(set())  # what `icegres serve` does before it listens
    assert reads == {"files": [], "scans": []}
    assert all(engine.has_table(NS, f"t{i}") for i in range(TABLES))
    assert engine.plans() == {}


def test_a_catalog_query_reads_each_metadata_json_and_nothing_else(lake: Lakehouse, reads: dict[str, list]) -> None:
    engine = Engine(lake)
    engine.refresh(set())
    q = _session(engine)
    listed = _run(q, "select c.relname from pg_catalog.pg_class c join pg_catalog.pg_namespace n "
                     f"on n.oid = c.relnamespace where n.nspname = '{NS}' and c.relkind = 'r'")
    assert sorted(listed["relname"]) == sorted(f"t{i}" for i in range(TABLES))
    columns = _run(q, f"select table_name, column_name from information_schema.columns where table_schema = '{NS}'")
    assert len(columns["column_name"]) == TABLES and set(columns["column_name"]) == {"id"}
    assert _kinds(reads["files"]) == {"metadata": TABLES}
    assert reads["scans"] == []


def test_a_statement_reads_only_the_tables_it_names(lake: Lakehouse, reads: dict[str, list]) -> None:
    engine = Engine(lake)
    engine.refresh(set())
    q = _session(engine)
    assert _run(q, "select count(*) as n from t5") == {"n": [4]}
    assert _kinds(reads["files"]) == {"metadata": 1, "manifest": 3, "parquet": 2}  # list + 2 manifests, 2 footers
    assert all(f"/{NS}/t5/" in path for path in reads["files"])
    assert len(reads["scans"]) == 1
    assert set(engine.plans()) == {(NS, "t5")}
    # named again: nothing more is read
    before = len(reads["files"])
    assert _run(q, "select sum(id) as s from t5") == {"s": [22]}
    assert len(reads["files"]) == before


def test_a_transaction_block_reads_tables_as_of_its_first_statement(lake: Lakehouse) -> None:
    """The block pins one listing: a table it names only after another server committed to it
    is read at the listed snapshot (planned there, without mounting it)."""
    engine = Engine(lake)
    engine.refresh(set())
    q = _session(engine)
    q.txn = TxnState()
    assert _run(q, "select count(*) as n from t1") == {"n": [4]}
    lake.load_table(NS, "t2").append(_rows(100))  # another writer, after the block began
    assert _run(q, "select count(*) as n from t2") == {"n": [4]}
    q.end_transaction()
    assert _run(q, "select count(*) as n from t2") == {"n": [6]}
