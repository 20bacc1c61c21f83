"""Engine freshness and mounting, in process (no wire)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from icegres.engine import lake as engine_mod
from icegres.engine.catalog import Lakehouse
from icegres.engine.lake import Engine, SessionEnv
from icegres.engine.query import open_session
from icegres.pg.errors import PgError
from icegres.sql.statement import query

pytestmark = pytest.mark.unit


@pytest.fixture
def lake(tmp_path):
    lh = Lakehouse.embedded(tmp_path)
    lh.create_namespace_if_missing("demo")
    for name in ("good", "bad"):
        t = lh.catalog.create_table(("demo", name), schema=pa.schema([pa.field("id", pa.int64())]))
        t.append(pa.table({"id": [1, 2, 3]}))
    return lh


def session(engine: Engine):
    return open_session(engine, SessionEnv("icegres", "icegres", 1, {"search_path": "demo"}))


def test_unreadable_table_is_refused_without_breaking_the_others(lake, monkeypatch):
    real_plan_read = engine_mod.plan_read

    def plan_read(table, footers):
        if table.name()[-1] == "bad":
            raise PgError("0A000", "table demo.bad has merge-on-read delete files, which icegres cannot read yet")
        return real_plan_read(table, footers)

    monkeypatch.setattr(engine_mod, "plan_read", plan_read)
    engine = Engine(lake)
    engine.refresh()
    q = session(engine)
    assert q.plan(query("select count(*) as n from demo.good")).df.to_pydict() == {"n": [3]}
    with pytest.raises(PgError) as exc:
        q.plan(query("select * from demo.bad"))
    assert exc.value.sqlstate == "0A000" and "delete files" in exc.value.message
    with pytest.raises(PgError) as exc:
        q.plan(query("select * from bad"))  # through search_path too
    assert exc.value.sqlstate == "0A000"


def test_refresh_skips_listing_when_catalog_unchanged(lake, monkeypatch):
    engine = Engine(lake)
    engine.refresh()
    calls = []
    real_listing = lake.listing
    monkeypatch.setattr(lake, "listing", lambda: calls.append(1) or real_listing())
    engine.refresh()
    engine.refresh()
    assert calls == []  # PRAGMA data_version unchanged: no listing query
    lake.load_table("demo", "good").append(pa.table({"id": [4]}))
    engine.refresh()
    assert calls == [1]
    assert session(engine).plan(query("select count(*) as n from demo.good")).df.to_pydict() == {"n": [4]}


def test_unchanged_table_is_not_replanned(lake, monkeypatch):
    engine = Engine(lake)
    engine.refresh()
    planned = []
    real_plan_read = engine_mod.plan_read
    monkeypatch.setattr(engine_mod, "plan_read", lambda t, f: planned.append(t.name()[-1]) or real_plan_read(t, f))
    lake.load_table("demo", "good").append(pa.table({"id": [4]}))
    engine.refresh()
    assert planned == ["good"]  # "bad" kept its planned scan: its metadata location is unchanged


def test_pull_kind_is_decided_per_statement_shape_not_per_first_text(lake):
    # The plan's node kinds are kept per literal shape: the same shape with other literals, and
    # another shape, must each still get the pull their plan needs (engine/batches.py).
    from icegres.engine.batches import CancellableBatches

    q = session(Engine(lake))
    q.engine.refresh()
    for literal in (1, 2, 3):
        _, join = q.start(query(f"select count(*) from good a join bad b on a.id = b.id where a.id > {literal}"))
        assert isinstance(join.inner, CancellableBatches)
        assert [b.to_pyarrow().column(0)[0].as_py() for b in join] == [3 - literal]
        _, point = q.start(query(f"select id from good where id = {literal}"))
        assert not isinstance(point.inner, CancellableBatches)
        assert [r for b in point for r in b.to_pyarrow().column(0).to_pylist()] == [literal]
    _, endless = q.start(query("select sum(value) from range(1, 10)"))  # an aggregate over a table function
    assert isinstance(endless.inner, CancellableBatches)
    schema, small = q.start(query("select count(*), sum(id) from good where id > 1"))
    assert not isinstance(small.inner, CancellableBatches)  # a small aggregate: the blocking pull
    assert schema.names == ["count", "sum"]  # PostgreSQL's names, kept per shape too
    schema, _ = q.start(query("select count(*), sum(id) from good where id > 2"))
    assert schema.names == ["count", "sum"]


def test_a_quick_join_repeated_over_the_same_snapshots_takes_the_blocking_pull(lake, monkeypatch):
    from icegres.engine import batches
    from icegres.engine.batches import CancellableBatches

    q = session(Engine(lake))
    q.engine.refresh()
    join = "select count(*) from good a join bad b on a.id = b.id"

    def run() -> tuple[bool, int]:
        _, stream = q.start(query(join))
        counts = [b.to_pyarrow().column(0)[0].as_py() for b in stream]
        return isinstance(stream.inner, CancellableBatches), counts[0]

    assert run() == (True, 3)  # first run: cancellable, and timed
    assert run() == (False, 3)  # same text, same snapshots, quick last time: blocking
    assert q.start(query(join + " where a.id > 1"))[1].inner.__class__ is CancellableBatches  # other text
    lake.catalog.load_table(("demo", "bad")).append(pa.table({"id": [4]}))
    q.refresh_for(query(join))
    assert run() == (True, 3)  # a new snapshot of one table: timed again
    monkeypatch.setattr(batches, "QUICK_FIRST_PULL_S", 0.0)  # as if every first pull were slow
    lake.catalog.load_table(("demo", "good")).append(pa.table({"id": [4]}))
    q.refresh_for(query(join))
    assert run() == (True, 4)
    assert run() == (True, 4)  # a slow first pull keeps its repeats cancellable


def test_runs_are_only_called_the_same_work_when_the_snapshots_are_known(lake):
    q = session(Engine(lake))
    q.engine.refresh()

    def repeat_key(sql, params=None):
        stmt = query(sql)
        return q._repeat_key(stmt, q.table_refs(stmt), params)

    join = "select count(*) from good a join bad b on a.id = b.id"
    assert repeat_key(join) is not None
    assert repeat_key("select sum(value) from range(1, 10)") is None  # no mounted table named
    assert repeat_key("select count(*) from good a join nosuch b on a.id = b.id") is None
    prepared = "select count(*) from good a join bad b on a.id = b.id where a.id > $1"
    assert repeat_key(prepared, {"1": 1}) != repeat_key(prepared, {"1": 2})  # other work
    assert repeat_key(prepared, {"1": 1}) == repeat_key(prepared, {"1": 1})
    assert repeat_key(prepared, {"1": [1, 2]}) is None
    q.txn = object()  # a transaction reads its own pinned snapshots, not the mounted ones
    assert repeat_key(join) is None


def test_a_repeated_statement_reuses_its_plan_until_a_table_it_reads_moves(lake):
    q = session(Engine(lake))
    q.engine.refresh()
    sql = "select count(*), sum(a.id) from good a join bad b on a.id = b.id"

    def answer() -> tuple[int, int]:
        _, stream = q.start(query(sql))
        batch = next(b.to_pyarrow() for b in stream)
        return batch.column(0)[0].as_py(), batch.column(1)[0].as_py()

    first = answer()
    assert answer() == first
    assert len(q.cache.planned) == 1  # planned once, reused
    lake.catalog.load_table(("demo", "good")).append(pa.table({"id": [2]}))
    q.refresh_for(query(sql))
    assert answer() == (first[0] + 1, first[1] + 2)  # the new snapshot, not the cached plan's
    assert len(q.cache.planned) == 2
    prepared = "select count(*) from good where id > $1"  # good: 1, 2, 3, 2
    assert q.plan(query(prepared), {"1": 1}).df.to_arrow_table().column(0)[0].as_py() == 3
    assert q.plan(query(prepared), {"1": 2}).df.to_arrow_table().column(0)[0].as_py() == 1  # its own plan
    assert q.plan(query(prepared), {"1": 1}).df.to_arrow_table().column(0)[0].as_py() == 3


def test_a_reused_plan_still_evaluates_now_per_statement(lake):
    import time

    q = session(Engine(lake))
    q.engine.refresh()
    sql = "select now() as t, count(*) as n from good"
    first = q.plan(query(sql)).df.to_arrow_table().column(0)[0].as_py()
    time.sleep(0.01)
    second = q.plan(query(sql)).df.to_arrow_table().column(0)[0].as_py()
    assert len(q.cache.planned) == 1 and second > first


def test_a_prepare_describes_mounted_tables_without_asking_the_catalog(lake, monkeypatch):
    # A Flight prepare (`fresh=False`) is followed by GetFlightInfo's own fresh start: on a REST
    # catalog the describe's freshness check would be a second loadTable per statement.
    engine = Engine(lake)
    engine.refresh()
    q = session(engine)
    refreshed = []
    real_refresh = engine.refresh
    monkeypatch.setattr(engine, "refresh", lambda refs=None: refreshed.append(refs) or real_refresh(refs))
    schema, _ = q.describe(query("select id from demo.good"), fresh=False)
    assert schema.names == ["id"] and refreshed == []
    q.describe(query("select id from demo.good"))  # fresh, as pgwire's Describe and Flight's GetSchema
    assert refreshed == [{("demo", "good")}]
    lake.catalog.create_table(("demo", "later"), schema=pa.schema([pa.field("n", pa.int32())]))
    schema, _ = q.describe(query("select n from demo.later"), fresh=False)  # not mounted yet: refreshed
    assert schema.names == ["n"] and refreshed[-1] == {("demo", "later")}


def _batch_rows(stream) -> list[int]:
    return [b.to_pyarrow().num_rows for b in stream]


def test_a_plain_scan_of_many_rows_is_read_in_wide_batches_and_nothing_else_is(lake, monkeypatch):
    from icegres.engine import batches

    big = lake.catalog.create_table(("demo", "big"), schema=pa.schema([pa.field("id", pa.int64())]))
    big.append(pa.table({"id": pa.array(range(40_000), pa.int64())}))
    monkeypatch.setattr(batches, "WIDE_MIN_INPUT_ROWS", 10_000)
    q = session(Engine(lake))
    q.engine.refresh()

    def master_batch_rows() -> int:  # what a DataFrame made on the master now gets
        return max(b.num_rows for b in q.engine.master.sql("select * from demo.big").collect())

    for text in ("select * from big", "select id + 1 from big where id % 3 <> 0"):
        _, stream = q.start(query(text))
        sizes = _batch_rows(stream)
        assert max(sizes) > batches.BATCH_ROWS, text
        assert master_batch_rows() == batches.BATCH_ROWS  # set back at once
    _, stream = q.start(query("select * from big"))
    assert sum(_batch_rows(stream)) == 40_000
    # A LIMIT, an aggregate and a small table keep DataFusion's batches.
    _, stream = q.start(query("select * from big limit 30000"))
    assert max(_batch_rows(stream)) <= batches.BATCH_ROWS
    for text in ("select id % 7, count(*) from big group by 1", "select * from good"):
        planned = q.plan(query(text))
        assert q._wide_batch_rows(query(text), planned, q._plan_kinds(query(text), planned.df)) is None, text
    # Very wide rows get fewer rows a batch, and never fewer than the default.
    assert batches.wide_batch_rows({"TableScan"}, 10**6, 100.0) == batches.WIDE_BATCH_BYTES // 400
    assert batches.wide_batch_rows({"TableScan"}, 10**6, 4_000.0) is None
    assert batches.wide_batch_rows({"TableScan"}, 10**6, 1.0) == batches.WIDE_BATCH_ROWS
    assert batches.wide_batch_rows({"TableScan", "Limit"}, 10**6, 1.0) is None
    assert batches.wide_batch_rows({"TableScan"}, None, 1.0) is None
    assert batches.wide_batch_rows({"TableScan"}, batches.WIDE_MIN_INPUT_ROWS - 1, 1.0) is None
