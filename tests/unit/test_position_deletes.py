"""Position deletes applied by row position (engine/position_deletes.py), on a file DataFusion
splits between partitions and prunes by row group."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icegres.engine.executor import _READS_ROW_POSITIONS
from icegres.engine.position_deletes import live_rows

pytestmark = pytest.mark.unit

ROWS = 300_000


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("deletes") / "data.parquet"
    pq.write_table(pa.table({"a": np.arange(ROWS, dtype=np.int64)}), path, row_group_size=10_000)
    return str(path)


def _ctx():
    from datafusion import SessionConfig, SessionContext

    # four partitions over byte ranges of the one file: positions must stay the file's own
    return SessionContext(SessionConfig().with_target_partitions(4)
                          .set("datafusion.optimizer.repartition_file_min_size", "1024"))


@pytest.mark.parametrize("deleted", [
    [], [0], [ROWS - 1], [0, 1, 2, 9_999, 10_000, 150_000, ROWS - 1], list(range(0, ROWS, 3)),
])
def test_the_rows_at_deleted_positions_are_gone(data_file: str, deleted: list[int]) -> None:
    ctx = _ctx()
    ctx.register_view("t", live_rows(ctx.read_parquet(data_file), np.array(deleted, dtype=np.int64)))
    gone = set(deleted)
    count, total = ctx.sql("select count(*), sum(a) from t").collect()[0].to_pylist()[0].values()
    assert count == ROWS - len(gone)
    assert total == ROWS * (ROWS - 1) // 2 - sum(gone)
    # a filter that prunes row groups: positions are still the file's
    near = ctx.sql("select a from t where a between 9990 and 10010 order by a").to_pydict()["a"]
    assert near == [a for a in range(9990, 10011) if a not in gone]


def test_a_plan_applying_deletes_is_kept_from_execution_processes(data_file: str) -> None:
    """DataFusion 55 writes such a plan's scan but cannot read it back; executor.py keeps any plan
    whose bytes name the row index in the server. Should the round trip start to work upstream,
    this test says so (and the guard can go)."""
    from datafusion import SessionContext
    from datafusion.plan import ExecutionPlan

    ctx = _ctx()
    ctx.register_view("t", live_rows(ctx.read_parquet(data_file), np.array([5], dtype=np.int64)))
    plan = ctx.sql("select count(*) from t a join t b on a.a = b.a").execution_plan().to_bytes()
    assert _READS_ROW_POSITIONS in plan
    with pytest.raises(Exception, match="out of bounds"):
        ExecutionPlan.from_bytes(SessionContext(), plan)
