"""Automatic maintenance's task (engine/maintenance/scheduler.py) and its jobs (worker.py) on an
embedded lake, without a server: a job runs under the table's real lease (engine/lease_store.py),
and a job whose lease is lost, nearly out, or whose server drains commits nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import trio

from icegres.engine.lease_store import NAMESPACE, IcebergLease
from icegres.engine.maintenance.scheduler import Maintainer
from icegres.engine.maintenance.worker import Gate, LeaseLost, Request, run_op

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([("id", pa.int64())])
PROPS = {"icegres.maintain.compact.min-files": "5", "icegres.maintain.expire.max-snapshot-age-ms": "0",
         "icegres.maintain.expire.min-snapshots": "3"}


class FakeEngine:
    """What the task asks of the engine: the lakehouse, the files statements may open, refresh."""

    def __init__(self, lakehouse: Any) -> None:
        self.lakehouse = lakehouse
        self.in_use: set[str] = set()
        self.refreshed: list[set[tuple[str, str]]] = []

        class ScanSets:
            def live_files(inner) -> set[str]:  # noqa: N805 - the engine's ScanSets, as far as used
                return self.in_use

        self.scan_sets = ScanSets()

    def refresh(self, keys: set[tuple[str, str]]) -> None:
        self.refreshed.append(keys)


@pytest.fixture
def lake(tmp_path: Path) -> Any:
    from icegres.engine.catalog import Lakehouse

    lh = Lakehouse.embedded(tmp_path / "lake")
    lh.create_namespace_if_missing("ns")
    return lh


def written(lake: Any, name: str, commits: int) -> Any:
    table = lake.create_table("ns", name, SCHEMA, PROPS)
    for i in range(commits):
        table.append(pa.table({"id": [i]}, schema=SCHEMA))
    return lake.load_table("ns", name)


def data_files_on_disk(table: Any) -> set[str]:
    root = Path(table.metadata.location.removeprefix("file://")) / "data"
    return {str(p) for p in root.rglob("*.parquet")}


def request(op: str, name: str = "t", in_use: frozenset[str] = frozenset(), epoch: int = 0) -> Request:
    return Request(op, ("ns", name), 5, 0, 1, frozenset(), in_use, commit_margin_s=15.0, quiet_s=0.01,
                   max_defer_s=0.1, epoch=epoch)


def gate(left_s: float, stopping: bool = False) -> Gate:
    g = Gate()
    g.deadline = time.monotonic() + left_s
    g.stopping = stopping
    return g


def maintainer(lake: Any) -> Maintainer:
    return Maintainer(FakeEngine(lake), interval_s=60, duty_cycle=1.0, holder="test")


@pytest.mark.parametrize("left_s", [float("-inf"), 5.0], ids=["lost", "nearly-out"])
def test_a_compaction_whose_lease_is_lost_or_nearly_out_commits_nothing(lake: Any, left_s: float) -> None:
    table = written(lake, "t", 8)
    before = (table.metadata.current_snapshot_id, data_files_on_disk(table))
    with pytest.raises(LeaseLost):
        run_op(lake, request("compact"), gate(left_s))
    after = lake.load_table("ns", "t")
    # No replace landed, and the files the compaction wrote were deleted again.
    assert (after.metadata.current_snapshot_id, data_files_on_disk(after)) == before


def test_an_expiry_whose_lease_is_nearly_out_expires_nothing(lake: Any) -> None:
    table = written(lake, "t", 6)
    with pytest.raises(LeaseLost):
        run_op(lake, request("expire"), gate(5.0))
    assert len(lake.load_table("ns", "t").metadata.snapshots) == len(table.metadata.snapshots)


def test_a_draining_server_commits_nothing(lake: Any) -> None:
    table = written(lake, "t", 8)
    with pytest.raises(LeaseLost):
        run_op(lake, request("compact"), gate(60.0, stopping=True))
    assert lake.load_table("ns", "t").metadata.current_snapshot_id == table.metadata.current_snapshot_id


def test_a_held_lease_compacts_and_expires(lake: Any) -> None:
    written(lake, "t", 8)
    done = run_op(lake, request("compact"), gate(60.0))
    assert done == {"found": True, "compacted": 8, "written": 1}
    done = run_op(lake, request("expire"), gate(60.0))
    assert done["found"] and done["expired"] == 8 and done["deleted"] > 8
    table = lake.load_table("ns", "t")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(8))


def test_expiry_leaves_files_a_running_statement_may_open(lake: Any) -> None:
    table = written(lake, "t", 6)
    first = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
    run_op(lake, request("compact"), gate(60.0))
    done = run_op(lake, request("expire", in_use=frozenset(first[:2])), gate(60.0))
    on_disk = data_files_on_disk(lake.load_table("ns", "t"))
    assert set(first[:2]) <= on_disk
    assert not set(first[2:]) & on_disk
    assert done["expired"] >= 5 and any("orphan sweep" in n for n in done["notes"])


async def test_a_round_runs_the_due_jobs_under_the_tables_lease(lake: Any) -> None:
    written(lake, "t", 8)
    lake.create_table("ns", "off", SCHEMA, {**PROPS, "icegres.maintain.enabled": "false"})
    for i in range(8):
        lake.load_table("ns", "off").append(pa.table({"id": [i]}, schema=SCHEMA))
    m = maintainer(lake)
    async with trio.open_nursery() as nursery:
        await nursery.start(m.run)
        assert await m.round() == 1
        await m.stop()
    assert m.counters.jobs_run == 1 and m.counters.jobs_failed == 0
    assert m.counters.files_compacted == 8 and m.counters.snapshots_expired >= 8
    table = lake.load_table("ns", "t")
    assert len(list(table.scan().plan_files())) == 1 and len(table.metadata.snapshots) == 1
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(8))
    assert len(list(lake.load_table("ns", "off").scan().plan_files())) == 8
    # The lease was taken and released: epoch 1, free for the next server.
    record = IcebergLease.for_table(lake, "ns", "t").read()
    assert record.epoch == 1 and record.released
    # One lease table: demo.off, left alone, never had its lease taken.
    assert [e.name for e in lake.listing(internal=True).tables if e.namespace == NAMESPACE] == [
        IcebergLease.for_table(lake, "ns", "t").key[1]]
    # The next round finds nothing due: the compacted table has one file and one snapshot.
    assert await _round_alone(m) == 0


async def _round_alone(m: Maintainer) -> int:
    m._stopping = False
    m._stopped = trio.Event()
    return await m.round()


def test_the_leases_epoch_is_in_the_summary_of_what_a_job_commits(lake: Any) -> None:
    from icegres.engine.maintenance.worker import EPOCH_PROPERTY

    written(lake, "t", 8)
    run_op(lake, request("compact", epoch=7), gate(60.0))
    head = lake.load_table("ns", "t").current_snapshot()
    assert head.summary.operation.value == "replace" and head.summary[EPOCH_PROPERTY] == "7"
    for i in range(3):  # more manifests than the one the compaction wrote
        lake.load_table("ns", "t").append(pa.table({"id": [100 + i]}, schema=SCHEMA))
    assert run_op(lake, request("rewrite_manifests", epoch=8), gate(60.0))["found"]
    assert lake.load_table("ns", "t").current_snapshot().summary[EPOCH_PROPERTY] == "8"
