"""Pulling a query's batches so that a cancelled statement frees its worker thread at once.

A worker thread pulls DataFusion batches with the stream's blocking `next()`, which drives the
query until the next batch is ready. A streaming plan (scans, filters, projections, limits) gets
there quickly, so a cancelled statement stops at the next batch. A plan with a pipeline breaker
(an aggregate, a join's build side, a sort, a window) can spend minutes before its first batch,
and nothing interrupts that call: datafusion-python checks for interrupts only on Python's main
thread. The statement's client gets its 57014 at once, but the thread stays busy and holds one of
`--query-threads` until the batch is done.

In a serving process such plans run in an execution process that the cancel kills (executor.py,
which also says which plans stay here). Those that run here are pulled through the stream's
async interface instead (`CancellableBatches`): the
worker thread waits for the first batch on an asyncio loop of its own, which another thread can
wake with a cancellation (`PullScope.cancel`). The pull then ends at once and the stream is
dropped, which stops DataFusion's tasks at their next yield (for a plan fed by a scan, within
the scan's next batch; an operator that computes long from memory alone, such as a nested-loop
join, runs to its next output first — docs/limitations.md).

The async pull costs ~0.5-0.9 ms more on this machine: the stream's future runs on a second tokio
runtime (pyo3-async-runtimes' own), so every pull crosses two more threads. A 4 ms selective
aggregate or a 20 ms join would feel that. So it is taken only where a pull may really run long
(`may_run_long`): a plan with a join or another operator whose output is not bounded by its
input, or an aggregate, sort or window over more than LONG_INPUT_ROWS rows. The first batch is
the long wait (a build side, an aggregation, a sort); later ones use the blocking pull. And a
statement that already ran — the same text over the same snapshots of the same tables, so the
same work — whose first pull then took under QUICK_FIRST_PULL_S takes the blocking pull too
(`engine.QueryContext`): a cancel of it frees the thread about as soon as a streaming plan's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# Logical plan nodes that pass batches through as they come: a pull over only these returns as
# soon as the scan yields.
# ("TableFunction" is a scan of `range()`, `generate_series()`, ...: rows without a known count.)
STREAMING_NODES = frozenset({
    "Projection", "Filter", "SubqueryAlias", "Union", "TableScan", "TableFunction", "Limit",
    "EmptyRelation", "Values",
})
# Nodes that hold batches back but whose work is bounded by their input (n log n at worst): over
# a small input a pull returns soon. Any other node (a join, an unnest, a recursive query, a kind
# added later) may compute without bound before its first batch.
INPUT_BOUNDED_NODES = frozenset({"Aggregate", "Sort", "Distinct", "Window", "Repartition"})
# Over this many input rows an input-bounded operator may run for seconds (a count(distinct) or a
# sort of 4M rows here takes ~1-2 s), long enough that a cancel must not wait for it.
LONG_INPUT_ROWS = 4_000_000
# A repeat of a statement whose first pull took less than this is pulled blocking (module doc).
QUICK_FIRST_PULL_S = 0.1


# DataFusion's batch size for every plan (its default), and the one a plain scan of many rows gets.
# Each batch crosses into Python on its own (a blocking `next()`, a pyarrow import, the GIL taken
# back), and a front end's worker thread holds the query back while it does: a 10M-row DoGet
# pulled ~1,240 batches, and with 64k-row ones for plain scans it went 741 -> 607 ms p50, server
# CPU 0.89 -> 0.69 s (/tmp scratch A/B, two servers, one ADBC client alternating, 10 rounds). Plans that hash,
# sort or join keep the default: there 64k-row batches made TPC-H Q1 1.10x, Q5 1.18x and Q10
# 1.29x slower in-process (their hash tables and sorts work in cache-sized batches).
BATCH_ROWS = 8_192
WIDE_BATCH_ROWS = 65_536
# A scan over fewer input rows than this gains little from wider batches (under ~60 of them).
WIDE_MIN_INPUT_ROWS = 500_000
# A wide batch stays under about this many bytes of decoded Arrow, estimated from the data files'
# stored bytes per row times DECODED_PER_STORED (Parquet's typical compression): wide rows (long
# strings, blobs) get proportionally fewer rows a batch, never fewer than BATCH_ROWS.
WIDE_BATCH_BYTES = 16 << 20
DECODED_PER_STORED = 4
# A plan of only these node kinds passes the scan's batches through: wider ones cost it nothing.
# Not "Limit" (a small LIMIT would decode rows it then drops) nor a table function (rows unknown).
WIDE_NODES = frozenset({"Projection", "Filter", "SubqueryAlias", "Union", "TableScan"})


def wide_batch_rows(kinds: set[str] | frozenset[str], input_rows: int | None,
                    stored_bytes_per_row: float | None) -> int | None:
    """The batch size for a plan of these node kinds over `input_rows` rows whose data files
    hold `stored_bytes_per_row` bytes a row; None: keep BATCH_ROWS."""
    if not kinds or not kinds <= WIDE_NODES or input_rows is None or input_rows < WIDE_MIN_INPUT_ROWS:
        return None
    if not stored_bytes_per_row or stored_bytes_per_row <= 0:
        return None
    fitting = int(WIDE_BATCH_BYTES / (stored_bytes_per_row * DECODED_PER_STORED))
    rows = min(WIDE_BATCH_ROWS, fitting)
    return rows if rows > BATCH_ROWS else None


class PullCancelled(Exception):
    """A pull interrupted by its statement's cancellation (nobody waits for this outcome)."""


def plan_nodes(plan: Any) -> set[str]:
    """The kinds of node in a DataFusion LogicalPlan (`Aggregate`, `Join`, ...); a scan of a table
    function (DataFusion names it `range()`) is a `TableFunction`."""
    kinds: set[str] = set()
    pending = [plan]
    while pending:
        node = pending.pop()
        variant = node.to_variant()
        kind = type(variant).__name__
        if kind == "TableScan" and variant.table_name().endswith("()"):
            kind = "TableFunction"
        kinds.add(kind)
        pending.extend(node.inputs())
    return kinds


def may_run_long(kinds: set[str], input_rows: int | None) -> bool:
    """Whether the first pull of a plan with these node kinds, over tables of `input_rows` rows in
    all (None: unknown), may compute for long before it returns."""
    if kinds <= STREAMING_NODES:
        return False
    if not kinds <= STREAMING_NODES | INPUT_BOUNDED_NODES or "TableFunction" in kinds:
        return True
    return input_rows is None or input_rows > LONG_INPUT_ROWS


class PullScope:
    """The cancellable pulls of one worker-thread job: cancelled when its caller stops waiting.
    `slot`: an execution slot handed to the job after it queued for one (executor.py)."""

    def __init__(self, slot: Any = None) -> None:
        self._lock = threading.Lock()
        self._on_cancel: Callable[[], None] | None = None
        self.cancelled = False
        self.slot = slot

    def cancel(self) -> None:
        """From any thread: end the pull in progress, if any, and refuse later ones."""
        with self._lock:
            self.cancelled = True
            stop, self._on_cancel = self._on_cancel, None
        if stop is not None:
            stop()

    def on_cancel(self, stop: Callable[[], None]) -> bool:
        """While a pull waits: `stop()` ends it, from the thread that cancels. False if the scope
        is cancelled already (the pull is not to start)."""
        with self._lock:
            if self.cancelled:
                return False
            self._on_cancel = stop
            return True

    def waiting(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> bool:
        return self.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))

    def finished(self) -> None:
        with self._lock:
            self._on_cancel = None


_local = threading.local()


@contextmanager
def scoped(scope: PullScope) -> Iterator[None]:
    """In a worker thread, for the block: the cancellable pulls are `scope`'s."""
    _local.scope = scope
    try:
        yield
    finally:
        _local.scope = None


def current_scope() -> PullScope | None:
    """The PullScope of the job running in this thread, if any."""
    return getattr(_local, "scope", None)


class _ThreadLoop:
    """One asyncio loop per worker thread, closed with the thread."""

    def __init__(self) -> None:
        # Not asyncio.new_event_loop(): trio-asyncio's policy would hand out its own loop.
        self.loop = asyncio.SelectorEventLoop()

    def __del__(self) -> None:
        self.loop.close()


def _thread_loop() -> asyncio.AbstractEventLoop:
    holder = getattr(_local, "loop", None)
    if holder is None:
        holder = _local.loop = _ThreadLoop()
    return holder.loop


async def _next_batch(source: CancellableBatches) -> Any:
    # Reached through `source`, not held: a traceback kept after a cancel must not keep the stream
    # (and with it the query's running tasks) alive.
    return await source._stream.__anext__()


class CancellableBatches:
    """A DataFusion RecordBatchStream whose first `next()` waits cancellably (module doc)."""

    def __init__(self, stream: Any, on_first: Callable[[float], None] | None = None) -> None:
        self._stream: Any = stream
        self._first = True
        self._on_first = on_first  # told how many seconds the first pull took, if it completed

    def __iter__(self) -> CancellableBatches:
        return self

    def __next__(self) -> Any:
        if self._stream is None:
            raise PullCancelled("the query was cancelled")
        if not self._first or asyncio._get_running_loop() is not None:
            # Later batches, or a caller inside an event loop (no second loop can run here).
            return next(self._stream)
        self._first = False
        loop = _thread_loop()
        task = loop.create_task(_next_batch(self))
        scope: PullScope | None = getattr(_local, "scope", None)
        if scope is not None and not scope.waiting(loop, task):
            task.cancel()
        started = time.perf_counter()
        try:
            batch = loop.run_until_complete(task)
            self._pulled(started)
            return batch
        except asyncio.CancelledError:
            pass
        except StopAsyncIteration:
            self._pulled(started)
            raise StopIteration from None
        finally:
            if scope is not None:
                scope.finished()
        # Dropping the stream stops the query's tasks; a half-made batch is never resumed.
        self._stream = None
        raise PullCancelled("the query was cancelled")

    def _pulled(self, started: float) -> None:
        if self._on_first is not None:
            self._on_first(time.perf_counter() - started)
