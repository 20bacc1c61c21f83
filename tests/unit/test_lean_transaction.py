"""The lean transaction builds exactly the metadata pyiceberg builds, without its deep copies."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Transaction

from icegres.engine.lean_transaction import LeanTransaction, stage_update

pytestmark = pytest.mark.unit


@pytest.fixture
def table(tmp_path: Path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("ns")
    table = catalog.create_table(("ns", "t"), pa.schema([("id", pa.int64()), ("note", pa.string())]))
    for i in range(3):  # some history: snapshots, snapshot log, metadata log
        table.append(pa.table({"id": [i], "note": [f"n{i}"]}))
    return catalog, table


def _updates(tx: Transaction, rows: pa.Table) -> tuple:
    tx.append(rows)
    tx.set_properties({"icegres.test": "1"})
    return tx._updates


def _comparable(metadata) -> dict:
    out = json.loads(metadata.model_dump_json())
    out.pop("last-updated-ms")
    return out


def test_the_view_equals_pyiceberg_and_is_not_copied_on_every_look(table) -> None:
    _, t = table
    lean = LeanTransaction(t)
    assert lean.table_metadata is t.metadata  # nothing staged: the table's own metadata
    rows = pa.table({"id": [9], "note": ["x"]})
    _updates(lean, rows)
    plain = Transaction(t)
    plain._updates = lean._updates
    assert _comparable(lean.table_metadata) == _comparable(plain.table_metadata)
    assert lean.table_metadata is lean.table_metadata  # applied once per update tuple
    assert plain.table_metadata is not plain.table_metadata  # pyiceberg deep-copies every time


def test_staging_equals_pyiceberg_staging(table) -> None:
    catalog, t = table
    tx = LeanTransaction(t)
    updates = _updates(tx, pa.table({"id": [7], "note": ["y"]}))
    requirements = tx._requirements
    ours = stage_update(catalog, t, ("ns", "t"), requirements, updates)
    theirs = catalog._update_and_stage_table(t, ("ns", "t"), requirements, updates)
    # The same version number; the rest of the name is a fresh uuid.
    assert ours.metadata_location.rsplit("/", 1)[1][:6] == theirs.metadata_location.rsplit("/", 1)[1][:6] == "00004-"
    assert _comparable(ours.metadata) == _comparable(theirs.metadata)
    assert ours.metadata.metadata_log == theirs.metadata.metadata_log
    assert len(ours.metadata.snapshots) == 4 and ours.metadata.properties["icegres.test"] == "1"


def test_staging_validates_the_requirements(table) -> None:
    from pyiceberg.exceptions import CommitFailedException

    catalog, t = table
    tx = LeanTransaction(t)
    updates = _updates(tx, pa.table({"id": [1], "note": ["z"]}))
    requirements = tx._requirements
    t.append(pa.table({"id": [2], "note": ["w"]}))  # the branch moved under the staged updates
    with pytest.raises(CommitFailedException):
        stage_update(catalog, t, ("ns", "t"), requirements, updates)
