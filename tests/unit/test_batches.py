"""Cancellable pulls (icegres/engine/batches.py): which plans take them, and that a cancel ends
a pull that waits inside a long operator, frees the thread and stops the query's work."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from datafusion import SessionContext

from icegres.engine.batches import (
    LONG_INPUT_ROWS,
    CancellableBatches,
    PullCancelled,
    PullScope,
    may_run_long,
    plan_nodes,
)
from icegres.engine.jobs import run_in_scope

# Scan-driven and practically endless: each batch of the big range is joined with 1000 rows.
RUNAWAY = "select sum(a.value * b.value) from range(1, 1000) a cross join range(1, 1000000000000) b"


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    return SessionContext()


@pytest.mark.parametrize(("kinds", "rows", "long"), [
    ({"Projection", "Filter", "SubqueryAlias", "Union", "TableScan"}, None, False),  # a point lookup
    ({"Projection", "TableScan", "Limit"}, 10**9, False),
    ({"Projection", "Aggregate", "TableScan"}, 1_000_000, False),  # bounded by a small input
    ({"Projection", "Sort", "Limit", "TableScan"}, LONG_INPUT_ROWS, False),
    ({"Projection", "Aggregate", "TableScan"}, LONG_INPUT_ROWS + 1, True),
    ({"Projection", "Aggregate", "TableScan"}, None, True),  # input unknown
    ({"Projection", "Join", "TableScan"}, 20, True),  # a join's output is not bounded by its input
    ({"Projection", "Unnest", "EmptyRelation"}, 0, True),
    ({"Projection", "TableFunction"}, 0, False),  # streams
    ({"Projection", "Aggregate", "TableFunction"}, 0, True),  # an aggregate over range(10**12)
])
def test_which_plans_may_run_long(kinds, rows, long):
    assert may_run_long(kinds, rows) is long


def test_plan_nodes_names_a_table_function_scan(ctx):
    assert plan_nodes(ctx.sql("select sum(value) from range(10)").logical_plan()) == {
        "Projection", "Aggregate", "TableFunction"}
    assert "Join" in plan_nodes(ctx.sql(RUNAWAY).logical_plan())


def test_a_cancellable_stream_yields_what_the_plain_one_does(ctx):
    sql = "select value % 7 as k, count(*) as n from range(100000) group by 1 order by 1"
    plain = [b.to_pyarrow() for b in ctx.sql(sql).execute_stream()]
    pulled = [b.to_pyarrow() for b in CancellableBatches(ctx.sql(sql).execute_stream())]
    assert [b.to_pylist() for b in pulled] == [b.to_pylist() for b in plain]


def _cpu_seconds() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def test_a_cancel_ends_a_long_pull_at_once_and_stops_the_work(ctx):
    stream = CancellableBatches(ctx.sql(RUNAWAY).execute_stream())
    scope = PullScope()
    outcome: dict[str, object] = {}

    def pull() -> None:
        try:
            outcome["batch"] = run_in_scope(scope, next, stream)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion
            outcome["error"] = exc

    worker = threading.Thread(target=pull)
    worker.start()
    time.sleep(0.5)
    assert worker.is_alive()  # still computing: nowhere near a first batch
    cancelled_at = time.monotonic()
    scope.cancel()
    worker.join(10)
    assert not worker.is_alive()
    assert time.monotonic() - cancelled_at < 2
    assert isinstance(outcome.get("error"), PullCancelled)
    with pytest.raises(PullCancelled):
        next(stream)  # the stream is gone: nothing resumes a half-made batch
    # Dropping the stream stopped DataFusion's tasks: the process goes quiet.
    time.sleep(1.0)
    before = _cpu_seconds()
    time.sleep(1.0)
    assert _cpu_seconds() - before < 0.3


def test_a_scope_cancelled_before_the_pull_refuses_it(ctx):
    stream = CancellableBatches(ctx.sql(RUNAWAY).execute_stream())
    scope = PullScope()
    scope.cancel()
    started = time.monotonic()
    with pytest.raises(PullCancelled):
        run_in_scope(scope, next, stream)
    assert time.monotonic() - started < 2


def test_without_a_scope_a_pull_just_runs(ctx):
    stream = CancellableBatches(ctx.sql("select count(*) as n from range(1000)").execute_stream())
    assert next(stream).to_pyarrow().to_pylist() == [{"n": 1000}]
    with pytest.raises(StopIteration):
        next(stream)


def test_a_native_panic_in_a_worker_job_becomes_the_statements_internal_error():
    # PyO3 raises a Rust panic as pyo3_runtime.PanicException, a BaseException: past a front
    # end's `except Exception` it would end the server. The real class exists only once something
    # panicked, so a class of that name and module stands in for it.
    from icegres.engine.batches import PullScope
    from icegres.engine.jobs import is_native_panic, run_in_scope
    from icegres.pg.errors import PgError

    panic = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})

    def boom() -> None:
        raise panic("index out of bounds: the len is 0 but the index is 0\nmore")

    assert is_native_panic(panic("x")) and not is_native_panic(KeyboardInterrupt())
    with pytest.raises(PgError) as caught:
        run_in_scope(PullScope(), boom)
    assert caught.value.sqlstate == "XX000"
    assert caught.value.message.endswith("(a panic): index out of bounds: the len is 0 but the index is 0")

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # anything else passes through as it was
        run_in_scope(PullScope(), interrupted)
