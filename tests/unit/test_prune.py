"""File pruning from Iceberg bounds: the answers never change, and the files read do shrink."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from icegres.engine import lake as engine_mod
from icegres.engine import mounts, prune
from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine, SessionEnv
from icegres.engine.prune import Constraint
from icegres.engine.query import open_session
from icegres.sql.statement import query

pytestmark = pytest.mark.unit

_IS_LOCAL = mounts.is_local  # the `q` fixture pretends no file is local while it lives

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("city", pa.string()), pa.field("n", pa.int32()),
                    pa.field("fare", pa.float64()), pa.field("Mixed", pa.int64())])
# Five files: ids 0-99, 100-199, ... ; cities by file; n cycles; a NULL-only id file at the end.
FILES = [
    pa.table({"id": list(range(k * 100, k * 100 + 100)), "city": [f"c{k}"] * 100,
              "n": [i % 7 - 3 for i in range(100)], "fare": [float(i) for i in range(100)],
              "Mixed": list(range(k * 100, k * 100 + 100))}, schema=SCHEMA)
    for k in range(4)
] + [pa.table({"id": [None, None], "city": [None, "zz"], "n": [None, 1], "fare": [None, 1.0],
               "Mixed": [None, None]}, schema=SCHEMA)]


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    lh = Lakehouse.embedded(tmp_path_factory.mktemp("prune"))
    lh.create_namespace_if_missing("demo")
    t = lh.catalog.create_table(("demo", "t"), schema=SCHEMA)
    for f in FILES:
        t.append(f)
    return lh


@pytest.fixture(scope="module")
def q(lake):
    # Five files: below the production threshold, so the tests lower it. Pruning serves tables
    # mounted as a union of per-file scans (object stores): local files would be one ScanSet.
    mp = pytest.MonkeyPatch()
    mp.setattr(engine_mod, "PRUNE_MIN_FILES", 2)
    mp.setattr(mounts, "is_local", lambda path: False)
    engine = Engine(lake)
    engine.refresh()
    yield open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))
    mp.undo()


@pytest.fixture(scope="module")
def q_linked(lake):
    # The same five local files, mounted as one ScanSet scan: prunable from a lowered threshold
    # of linked files; a pruned statement reads per-file scans built on demand.
    mp = pytest.MonkeyPatch()
    mp.setattr(engine_mod, "PRUNE_MIN_LINKED_FILES", 2)
    mp.setattr(mounts, "is_local", _IS_LOCAL)
    engine = Engine(lake)
    engine.refresh()
    assert engine._sets[("demo", "t")], "the local files should be mounted as a ScanSet"
    yield open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))
    mp.undo()


def _pruned(q, stmt):
    """`stmt` planned pruned (None: planned as sent)."""
    return q._plan_pruned(stmt, None, q.made, q.table_refs(stmt))


def scans(planned) -> int:
    """Data files the physical plan reads (one scan may read several: scan_sets.py)."""
    return len(set(re.findall(r"[^\s\[,]+\.parquet", planned.df.execution_plan().display_indent())))


def rows(planned) -> list[tuple]:
    table = planned.df.to_arrow_table()
    return sorted(zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True),
                  key=repr)


def unpruned(q, sql: str, params=None) -> list[tuple]:
    """The same statement over every file (as it was planned before pruning existed)."""
    return rows(q.ctx.sql(sql, param_values=params))


CASES = [
    ("select * from demo.t where id = 150", 1),
    ("select * from t where id = 150", 1),
    ("select id from demo.t x where x.id = 150", 1),
    ("select id from demo.t X where x.id = 150", 1),
    ("select id from demo.t where 150 = id", 1),
    ("select count(*) from demo.t where id between 120 and 230", 2),
    ("select count(*) from demo.t where id >= 200 and id < 300", 1),
    ("select count(*) from demo.t where id > 199 and id <= 200", 1),
    ("select count(*) from demo.t where id > 399", 0),
    ("select count(*) from demo.t where id in (5, 305, 9999)", 2),
    ("select count(*) from demo.t where id = -5", 0),
    ("select count(*) from demo.t where id > -5 and id < 50", 1),
    ("select count(*) from demo.t where city = 'c2'", 1),
    ("select count(*) from demo.t where city in ('c1', 'c3')", 2),
    ("select count(*) from demo.t where city > 'c2'", 2),  # c3 and the file with 'zz'
    ("select count(*) from demo.t where id = 150 and city = 'c2'", 0),
    ("select count(*) from demo.t where id = 150 and city = 'c1'", 1),
    ("select count(*) from demo.t where (id = 5) and (fare > 1.5)", 1),
    ('select count(*) from demo.t where "Mixed" = 250', 1),
    ("select id from demo.t where id = 5 or id = 305", 5),  # OR: nothing pruned
    ("select count(*) from demo.t where n = 2", 4),  # the last file's n is only 1 (and NULL)
    ("select count(*) from demo.t where id is null", 5),
    ("select count(*) from demo.t where not id = 5", 5),
    ("select count(*) from demo.t where id = (select max(id) from demo.t)", None),
    ("select count(*) from demo.t where id + 0 = 5", 5),
    ("select count(*) from demo.t where id = 5.0", 5),
    ("select city, count(*) from demo.t where id < 250 group by city order by city", 3),
    ("select * from demo.t where id = 42 limit 1", 1),
]


@pytest.mark.parametrize("sql,expected_scans", CASES)
def test_answers_match_every_file_and_files_are_pruned(q, sql, expected_scans) -> None:
    df = q.plan(query(sql))
    assert rows(df) == unpruned(q, sql)
    if expected_scans is not None:
        # An empty subset is one empty in-memory table, not a Parquet scan.
        assert scans(df) == expected_scans


def test_parameters_prune_when_bound_and_not_when_described(q) -> None:
    sql = "select * from demo.t where id = $1"
    df = q.plan(query(sql), {"1": 250})
    assert scans(df) == 1 and rows(df) == unpruned(q, sql, {"1": 250})
    assert _pruned(q, query(sql)) is None  # Describe: no value yet, planned as sent
    df = q.plan(query("select * from demo.t where city = $1"), {"1": "c0"})
    assert scans(df) == 1 and len(rows(df)) == 100


def test_statements_it_does_not_touch(q) -> None:
    for sql in ("select count(*) from demo.t a join demo.t b on a.id = b.id where a.id = 5",
                "with x as (select * from demo.t) select count(*) from x where id = 5",
                "select count(*) from demo.t"):
        assert _pruned(q, query(sql)) is None
        assert rows(q.plan(query(sql))) == unpruned(q, sql)


def test_column_names_stay_postgres_names(q) -> None:
    df = q.plan(query("select count(*), max(id) from demo.t where id = 5")).df
    assert q.pg_schema(query("select count(*), max(id) from demo.t where id = 5"), df.schema()).names == ["count", "max"]


# --- the pure parts ------------------------------------------------------------------------------


def where(sql: str):
    return sqlglot.parse_one(sql, read="postgres").args["where"]


def test_constraints_narrow_per_column() -> None:
    kinds = {"id": "int", "city": "str"}
    got = prune.constraints(where("select 1 from t where id > 5 and id <= 9 and id in (1, 7, 8) and city = 'a'"),
                            {"t"}, kinds, None)
    assert got == {"id": Constraint(lo=5, lo_inclusive=False, hi=9, values=frozenset({1, 7, 8})),
                   "city": Constraint(values=frozenset({"a"}))}
    assert got["id"].admits(7, 7) and not got["id"].admits(2, 4) and not got["id"].admits(10, 20)
    assert not got["id"].admits(1, 5)  # 1 is in the list, but not > 5


def test_constraints_ignore_what_they_cannot_read() -> None:
    kinds = {"id": "int"}
    for sql in ("select 1 from t where id = 5 or id = 6", "select 1 from t where u.id = 5",
                "select 1 from t where id = '5'", "select 1 from t where id = 5.5",
                "select 1 from t where id in (select 1)", "select 1 from t where other = 5",
                "select 1 from t where id = $1"):
        assert prune.constraints(where(sql), {"t"}, kinds, None) is None, sql
    assert prune.prunable_shape(where("select 1 from t where id = $1"), {"t"}, kinds)
    assert not prune.prunable_shape(where("select 1 from t where id + 1 = 5"), {"t"}, kinds)


@pytest.mark.parametrize("sql,expected_scans", CASES)
def test_a_scanset_of_many_files_is_pruned_to_per_file_scans(q_linked, sql, expected_scans) -> None:
    df = q_linked.plan(query(sql))
    assert rows(df) == unpruned(q_linked, sql)
    if expected_scans is not None and expected_scans < len(FILES):
        assert scans(df) == expected_scans


def test_per_file_scans_of_a_scanset_are_built_once_and_kept(q_linked) -> None:
    engine = q_linked.engine
    kept = engine._scans[("demo", "t")]
    q_linked.plan(query("select * from demo.t where id = 250"))
    built = dict(kept)
    assert any("parquet" in str(k[0]) for k in built)
    q_linked.plan(query("select * from demo.t where id = 251"))  # the same file
    assert engine._scans[("demo", "t")] == built  # reused, not rebuilt


def test_a_scanset_of_few_files_is_planned_as_sent(lake, monkeypatch) -> None:
    monkeypatch.setattr(engine_mod, "PRUNE_MIN_LINKED_FILES", len(FILES) + 1)
    engine = Engine(lake)
    engine.refresh()
    q = open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))
    assert not engine.prunable
    assert _pruned(q, query("select * from demo.t where id = 150")) is None


def test_bounds_of_another_type_keep_the_file() -> None:
    assert Constraint(values=frozenset({5})).admits("a", "b")


def test_tables_of_few_files_are_planned_as_sent(q, monkeypatch) -> None:
    monkeypatch.setattr(engine_mod, "PRUNE_MIN_FILES", len(FILES) + 1)
    assert _pruned(q, query("select * from demo.t where id = 150")) is None


def test_a_pruned_aggregate_counts_only_the_rows_of_the_files_it_reads(q_linked, monkeypatch) -> None:
    # An aggregate over a big table pulls cancellably (engine/batches.py); pruned to a few files,
    # its input is those files' rows.
    from icegres.engine import batches
    from icegres.engine.batches import CancellableBatches

    monkeypatch.setattr(batches, "LONG_INPUT_ROWS", 150)  # the table has 402 rows, a file 100
    sql = "select count(*) from demo.t where id between 120 and 150"
    assert q_linked.plan(query(sql)).input_rows == 100
    _, stream = q_linked.start(query(sql))
    assert not isinstance(stream.inner, CancellableBatches)
    assert [b.to_pyarrow().column(0)[0].as_py() for b in stream] == [31]
    _, stream = q_linked.start(query("select count(*) from demo.t where id between 120 and 250"))
    assert isinstance(stream.inner, CancellableBatches)  # two files: 200 rows
    assert [b.to_pyarrow().column(0)[0].as_py() for b in stream] == [131]


# --- ColumnBounds: every file checked at once, exactly as Constraint.admits checks one ----------

_INT64_EDGE = st.sampled_from([-(1 << 63), (1 << 63) - 1])
_INTS = st.one_of(st.integers(-6, 6), _INT64_EDGE)  # small: equal bounds and literals are common
_BEYOND = st.sampled_from([1 << 63, -(1 << 63) - 1])


def _pair(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.tuples(values, values).map(lambda p: (min(p), max(p)))


def _pairs(values: st.SearchStrategy, size: int, *more: st.SearchStrategy) -> st.SearchStrategy:
    """Lists of file bounds: unknown, all-NULL, or (lower, upper) drawn from one of `values`, `more`."""
    pairs = [_pair(v) for v in (values, *more)]
    return st.lists(st.one_of(st.none(), st.just(prune.ALL_NULL), *pairs), max_size=size)


def _constraints(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(
        Constraint,
        lo=st.one_of(st.none(), values), lo_inclusive=st.booleans(),
        hi=st.one_of(st.none(), values), hi_inclusive=st.booleans(),
        values=st.one_of(st.none(), st.frozensets(values, max_size=4)),
    )


def _one_by_one(pairs: list, c: Constraint) -> list[bool]:
    return [p is not prune.ALL_NULL and (p is None or c.admits(*p)) for p in pairs]


@settings(max_examples=500, deadline=None)
@given(_pairs(_INTS, 12), _constraints(_INTS))
def test_column_bounds_admit_exactly_the_files_admits_keeps(pairs, c) -> None:
    bounds = prune.ColumnBounds.of(pairs)
    assert bounds.lo is not None  # the arrays are what is under test here
    assert bounds.admitting(c).tolist() == _one_by_one(pairs, c)


@settings(max_examples=200, deadline=None)
@given(_pairs(st.one_of(_INTS, _BEYOND), 8, st.text("abc", max_size=2)),
       _constraints(st.one_of(_INTS, _BEYOND)))
def test_column_bounds_of_other_values_are_checked_file_by_file(pairs, c) -> None:
    assert prune.ColumnBounds.of(pairs).admitting(c).tolist() == _one_by_one(pairs, c)


def test_column_bounds_are_arrays_for_int64_bounds_only() -> None:
    assert prune.ColumnBounds.of([(1, 5), None, prune.ALL_NULL]).lo is not None
    assert prune.ColumnBounds.of([(1, 1 << 63)]).lo is None  # beyond int64: compared one by one
    assert prune.ColumnBounds.of([("a", "b")]).lo is None
    assert prune.ColumnBounds.of([(True, True)]).lo is None  # a bool is no bound of an integer column
