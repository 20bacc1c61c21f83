"""Snapshot expiry and orphan GC on a real pyiceberg table (SQLite catalog, local files): what is
kept, what is deleted, and that the write tails' watermark survives the history it lived in."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icegres.engine.maintenance import expire as ex
from icegres.engine.maintenance import orphans, watermarks
from icegres.engine.maintenance.reachable import Unreadable
from icegres.ladder import TAIL_ID_PROPERTY, TAIL_LSN_PROPERTY

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([("id", pa.int64())])
FAR_FUTURE_MS = int(time.time() * 1000) + 10**9


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("ns")
    catalog.create_table(("ns", "t"), SCHEMA)
    return catalog


def _append(catalog: SqlCatalog, ids: list[int], **summary: str) -> int:
    table = catalog.load_table(("ns", "t"))
    table.append(pa.table({"id": ids}, schema=SCHEMA), snapshot_properties=summary)
    return table.refresh().metadata.current_snapshot_id


def _overwrite(catalog: SqlCatalog, ids: list[int]) -> int:
    table = catalog.load_table(("ns", "t"))
    table.overwrite(pa.table({"id": ids}, schema=SCHEMA))
    return table.refresh().metadata.current_snapshot_id


def _ids(table, snapshot_id: int | None = None) -> list[int]:
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow()["id"].to_pylist())


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def _load(catalog: SqlCatalog):
    return lambda: catalog.load_table(("ns", "t"))


def test_expiry_keeps_the_last_n_and_deletes_only_what_no_kept_snapshot_references(catalog, tmp_path) -> None:
    for i in range(4):
        _append(catalog, [i])
    head = _overwrite(catalog, [100])  # the four appended files now referenced only by expired snapshots
    before = _files(tmp_path / "w")
    report = ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS, retain_last=1))
    table = catalog.load_table(("ns", "t"))
    assert [s.snapshot_id for s in table.metadata.snapshots] == [head]
    assert len(report.expired_snapshots) == 5  # pyiceberg's overwrite is a delete and an append snapshot
    row = report.spark_row()
    assert row["deleted_data_files_count"] == 4
    assert row["deleted_manifest_lists_count"] == 5
    assert row["deleted_manifest_files_count"] >= 4
    assert report.deleted_bytes > 0
    gone = before - _files(tmp_path / "w")
    assert gone == {p.removeprefix("file://") for p in report.deleted.kinds}
    assert _ids(table) == [100]


def test_a_dry_run_changes_nothing_and_reports_the_same(catalog, tmp_path) -> None:
    for i in range(3):
        _append(catalog, [i])
    _overwrite(catalog, [7])
    before = _files(tmp_path / "w")
    dry = ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS), dry_run=True)
    assert _files(tmp_path / "w") == before and len(catalog.load_table(("ns", "t")).metadata.snapshots) == 5
    real = ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS))
    assert dry.spark_row() == real.spark_row() and dry.expired_snapshots == real.expired_snapshots


def test_branch_and_tag_heads_retain_last_and_pinned_snapshots_stay_readable(catalog) -> None:
    first = _append(catalog, [1])
    second = _append(catalog, [2])
    third = _append(catalog, [3])
    table = catalog.load_table(("ns", "t"))
    table.manage_snapshots().create_tag(first, "v1").create_branch(second, "dev").commit()
    fourth = _append(catalog, [4])
    _append(catalog, [5])
    report = ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS, retain_last=2),
                       pinned=lambda t: {third})
    assert fourth not in report.expired_snapshots  # main's 2 newest
    table = catalog.load_table(("ns", "t"))
    kept = {s.snapshot_id for s in table.metadata.snapshots}
    assert {first, second, third, fourth} <= kept
    for snapshot_id in kept:  # every live snapshot still reads
        _ids(table, snapshot_id)
    assert _ids(table, first) == [1] and _ids(table, second) == [1, 2]


def test_nothing_is_younger_than_the_default_retention(catalog) -> None:
    for i in range(3):
        _append(catalog, [i])
    report = ex.expire(_load(catalog), "ns.t", ex.Policy())
    assert report.expired_snapshots == [] and report.older_than_ms < time.time() * 1000 - 6 * ex.DAY_MS


def test_retain_last_below_one_is_22023(catalog) -> None:
    with pytest.raises(ex.PgError) as err:
        ex.expire(_load(catalog), "ns.t", ex.Policy(retain_last=0))
    assert err.value.sqlstate == "22023"


def test_the_tail_watermark_is_carried_past_expired_history(catalog) -> None:
    _append(catalog, [1], **{TAIL_ID_PROPERTY: "wal-a", TAIL_LSN_PROPERTY: "7"})
    _append(catalog, [2], **{TAIL_ID_PROPERTY: "wal-b", TAIL_LSN_PROPERTY: "3"})
    _append(catalog, [3], **{TAIL_ID_PROPERTY: "wal-a", TAIL_LSN_PROPERTY: "9", "icegres.quorum-term": "2/1"})
    _append(catalog, [4])
    head = _append(catalog, [5])

    def mark(tail_id: str) -> dict | None:
        table = catalog.load_table(("ns", "t"))
        return watermarks.tail_summary(table.metadata, table.metadata.snapshot_by_id(head), tail_id)

    before = {t: mark(t) for t in ("wal-a", "wal-b", "wal-c")}
    ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS, retain_last=2))
    assert len(catalog.load_table(("ns", "t")).metadata.snapshots) == 2
    after = {t: mark(t) for t in ("wal-a", "wal-b", "wal-c")}
    assert after["wal-a"][TAIL_LSN_PROPERTY] == "9" and after["wal-a"]["icegres.quorum-term"] == "2/1"
    assert after["wal-b"][TAIL_LSN_PROPERTY] == before["wal-b"][TAIL_LSN_PROPERTY] == "3"
    assert after["wal-c"] is None
    _append(catalog, [6])
    new_head = _append(catalog, [7])
    ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS, retain_last=1))  # cuts deeper
    table = catalog.load_table(("ns", "t"))
    assert [s.snapshot_id for s in table.metadata.snapshots] == [new_head]
    carried = [k for k in table.metadata.properties if k.startswith(watermarks.CARRIED_PREFIX)]
    assert carried == [f"{watermarks.CARRIED_PREFIX}{new_head}"]  # the old root's property went with it
    summary = watermarks.tail_summary(table.metadata, table.metadata.current_snapshot(), "wal-a")
    assert summary[TAIL_LSN_PROPERTY] == "9"


def test_orphans_dry_run_grace_period_and_delete(catalog, tmp_path) -> None:
    _append(catalog, [1])
    table = catalog.load_table(("ns", "t"))
    data = Path(table.metadata.location.removeprefix("file://")) / "data"
    old, young = data / "crashed-old.parquet", data / "crashed-young.parquet"
    old.write_bytes(b"x" * 100)
    young.write_bytes(b"y" * 10)
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    before = _files(tmp_path / "w")
    grace_30min = int(time.time() * 1000) - 1_800_000
    dry = orphans.remove_orphans(table, "ns.t", older_than_ms=grace_30min)
    assert [o.path for o in dry.orphans] == [str(old)] and dry.orphan_bytes == 100 and dry.dry_run
    assert _files(tmp_path / "w") == before
    assert orphans.remove_orphans(table, "ns.t").orphans == []  # default grace: 3 days
    done = orphans.remove_orphans(table, "ns.t", older_than_ms=grace_30min, dry_run=False)
    assert [o.path for o in done.orphans] == [str(old)]
    assert _files(tmp_path / "w") == before - {str(old)}
    assert _ids(catalog.load_table(("ns", "t"))) == [1]


def test_orphan_gc_fails_closed_on_an_unreadable_manifest(catalog, tmp_path) -> None:
    _append(catalog, [1])
    _append(catalog, [2])
    table = catalog.load_table(("ns", "t"))
    stray = Path(table.metadata.location.removeprefix("file://")) / "data" / "stray.parquet"
    stray.write_bytes(b"z")
    os.utime(stray, (0, 0))
    manifest = table.metadata.current_snapshot().manifests(table.io)[0].manifest_path
    Path(manifest.removeprefix("file://")).write_bytes(b"not avro")
    before = _files(tmp_path / "w")
    with pytest.raises(Unreadable) as err:
        orphans.remove_orphans(table, "ns.t", older_than_ms=FAR_FUTURE_MS, dry_run=False)
    assert err.value.sqlstate == "58030"
    with pytest.raises(Unreadable):
        ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS))
    assert _files(tmp_path / "w") == before
    assert len(catalog.load_table(("ns", "t")).metadata.snapshots) == 2


def test_a_ref_moved_onto_a_snapshot_being_expired_fails_the_commit_and_the_replan_keeps_it(catalog) -> None:
    old = _append(catalog, [1])
    _append(catalog, [2])
    stale = catalog.load_table(("ns", "t"))  # planned on: `old` is kept by nothing
    catalog.load_table(("ns", "t")).manage_snapshots().create_tag(old, "audit").commit()
    loads = iter([stale])

    def load():
        return next(loads, None) or catalog.load_table(("ns", "t"))

    report = ex.expire(load, "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS), local_requirements=True)
    assert report.attempts == 2 and old not in report.expired_snapshots
    table = catalog.load_table(("ns", "t"))
    assert table.metadata.refs["audit"].snapshot_id == old and _ids(table, old) == [1]


def test_a_writer_moving_main_forward_does_not_fail_a_sql_catalog_expiry(catalog) -> None:
    for i in range(3):
        _append(catalog, [i])
    stale = catalog.load_table(("ns", "t"))
    _append(catalog, [3])  # main moved on after the plan was read
    loads = iter([stale])
    report = ex.expire(lambda: next(loads, None) or catalog.load_table(("ns", "t")), "ns.t",
                       ex.Policy(older_than_ms=FAR_FUTURE_MS), local_requirements=True)
    assert report.attempts == 1 and len(report.expired_snapshots) == 2
    assert _ids(catalog.load_table(("ns", "t"))) == [0, 1, 2, 3]


def test_orphan_gc_refuses_a_location_another_table_shares(catalog) -> None:
    _append(catalog, [1])
    catalog.rename_table(("ns", "t"), ("ns", "u"))  # u keeps .../ns/t; a new t gets the same location
    catalog.create_table(("ns", "t"), SCHEMA)
    t, u = catalog.load_table(("ns", "t")), catalog.load_table(("ns", "u"))
    assert t.metadata.location == u.metadata.location
    with pytest.raises(ex.PgError) as err:
        orphans.remove_orphans(t, "ns.t", older_than_ms=FAR_FUTURE_MS, dry_run=False,
                               neighbours=[("ns.u", u.metadata_location)])
    assert err.value.sqlstate == "55000" and "ns.u" in err.value.message
    assert _ids(catalog.load_table(("ns", "u"))) == [1]


def test_a_crash_between_the_expiry_commit_and_its_deletions_leaves_only_orphans(catalog, tmp_path) -> None:
    for i in range(4):
        _append(catalog, [i])
    _overwrite(catalog, [9])
    deleted: list[str] = []

    class Crash(Exception):
        pass

    def dies_after_two(io, path: str) -> None:
        if len(deleted) == 2:
            raise Crash
        io.delete(path)
        deleted.append(path)

    dry = ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS), dry_run=True)
    with pytest.raises(Crash):
        ex.expire(_load(catalog), "ns.t", ex.Policy(older_than_ms=FAR_FUTURE_MS), delete=dies_after_two)
    table = catalog.load_table(("ns", "t"))
    assert len(table.metadata.snapshots) == 1 and _ids(table) == [9]  # the commit landed
    left = orphans.remove_orphans(table, "ns.t", older_than_ms=FAR_FUTURE_MS, dry_run=False)
    # What the crash left is exactly the rest of what expiry meant to delete (plus old metadata files).
    leftover_content = {o.path for o in left.orphans if not o.path.endswith(".metadata.json")}
    assert leftover_content == {p.removeprefix("file://") for p in dry.deleted.kinds} - \
        {p.removeprefix("file://") for p in deleted}
    assert _ids(catalog.load_table(("ns", "t"))) == [9]
