"""Merge-on-read staging as plain values: positions grouped per file, a write's view applying its
staged deletes on top of other engines' ones, and what a rewrite or a rollback leaves of them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from icegres.engine.dml.merge_on_read import positions_of
from icegres.engine.dml.target import FILE_COLUMN, POS_COLUMN
from icegres.engine.mounts import FileRead, ReadPlan
from icegres.engine.txn import StagedWrite, TxnState

IDENTITY = (("a", "a"),)


def _plan() -> ReadPlan:
    files = (FileRead("f1", IDENTITY, ("other-engine.parquet",), np.array([1, 5])), FileRead("f2", IDENTITY))
    return ReadPlan(metadata_location="m", schema=pa.schema([("a", pa.int64())]), field_ids=(1,), files=files,
                    data_files={"f1": object(), "f2": object()})


def test_positions_are_grouped_per_file_sorted_and_unique() -> None:
    found = pa.table({FILE_COLUMN: ["f2", "f1", "f2", "f1", "f2"], POS_COLUMN: pa.array([9, 3, 0, 3, 4], pa.int64())})
    got = positions_of(found, FILE_COLUMN)
    assert {k: v.tolist() for k, v in got.items()} == {"f1": [3], "f2": [0, 4, 9]}
    assert positions_of(found.slice(0, 0), FILE_COLUMN) == {}


def test_the_view_applies_staged_deletes_beside_other_engines_deletes() -> None:
    write = StagedWrite(("s", "t"), _plan())
    write, orphans = write.deleted_rows({"f1": np.array([2, 5])}, {"d1": object()}, {"n1": object()}, 1)
    assert orphans == [] and not write.is_append and write.changes_rows and write.read_rows
    write, orphans = write.deleted_rows({"f2": np.array([7])}, {"d2": object()}, {}, 0)
    assert orphans == ["d1"]  # each statement writes the transaction's delete file anew
    assert write.changed_files == {"f1", "f2"}
    files = {f.path: f for f in write.view().files}
    assert files["f1"].deleted.tolist() == [1, 2, 5]
    assert files["f1"].deletes == ("other-engine.parquet", "d2")
    assert files["f2"].deleted.tolist() == [7]
    assert set(files) == {"f1", "f2", "n1"}


def test_a_rewrite_of_a_file_drops_its_staged_positions_and_rollback_orphans_the_delete_file() -> None:
    txn = TxnState()
    key = ("s", "t")
    txn.pins[key] = _plan()
    txn.mark("sp")
    write, _ = txn.write_for(key).deleted_rows({"f1": np.array([0])}, {"d1": object()}, {}, 0)
    txn.stage(write)
    assert txn.has_writes and txn.all_added() == ["d1"]
    rewritten, _ = write.rewrite({"f1"}, {"n2": object()}, 3)
    assert "f1" not in rewritten.deleted and "f1" in rewritten.removed
    txn.rollback_to(0)
    assert txn.orphans == ["d1"] and not txn.has_writes


def test_rolling_back_to_a_savepoint_keeps_the_files_its_writes_reference() -> None:
    txn = TxnState()
    key = ("s", "t")
    txn.pins[key] = _plan()
    write, _ = txn.write_for(key).deleted_rows({"f1": np.array([0])}, {"d1": object()}, {"n1": object()}, 1)
    txn.stage(write)
    txn.mark("sp")
    # since the savepoint: the delete file written anew, the staged data file rewritten
    write, orphans = write.deleted_rows({"f2": np.array([3])}, {"d2": object()}, {}, 0)
    txn.stage(write, orphans)
    write, orphans = write.rewrite({"n1"}, {"n2": object()}, 1)
    txn.stage(write, orphans)
    assert sorted(txn.orphans) == ["d1", "n1"]
    txn.rollback_to(0)
    assert sorted(txn.orphans) == ["d2", "n2"]  # d1 and n1 are the savepoint's again
    assert sorted(txn.all_added()) == ["d1", "n1"]
