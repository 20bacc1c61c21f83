"""engine/long_texts.py on a real pyiceberg table (SQLite catalog, local files): a long text is
kept in a file beside the metadata and read back exactly; a short one stays in place unless it
begins with the marker; a file gone or altered is the damage error naming it, never another
text; orphan GC keeps the files the metadata references and collects one it no longer does."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from icegres.engine import long_texts
from icegres.engine.maintenance import orphans
from icegres.pg import text_arrays
from icegres.pg.errors import PgError

pytestmark = pytest.mark.unit

TEXT = "ab'c\u00e9\u20ac\U0001f600" * 20_000  # 140,000 characters of 1-4 bytes each


@pytest.fixture
def table(tmp_path: Path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("ns")
    return catalog.create_table(("ns", "t"), pa.schema([("id", pa.int64())]))


def _fresh_process(monkeypatch) -> None:
    monkeypatch.setattr(long_texts, "_READ", type(long_texts._READ)())


def test_a_long_text_is_a_reference_to_a_file_that_reads_back_exactly(table, monkeypatch) -> None:
    monkeypatch.setattr(text_arrays, "PIECE_CHARS", 7_001)  # pieces that split no character differently
    monkeypatch.setattr(long_texts, "_PIECE_BYTES", 4_099)  # reads that split characters
    stored = long_texts.kept(table.io, table.location(), TEXT)
    assert long_texts.is_reference(stored) and len(stored) < 300
    path = stored.split(":", 2)[2]
    assert Path(path.removeprefix("file://")).read_bytes() == TEXT.encode()
    assert path.startswith(table.location() + "/metadata/")
    _fresh_process(monkeypatch)
    assert long_texts.text(table.io, stored, "ns.t") == TEXT


def test_short_texts_stay_in_place_unless_they_look_like_a_reference(table) -> None:
    assert long_texts.kept(table.io, table.location(), "a comment") == "a comment"
    assert long_texts.text(table.io, "a comment", "ns.t") == "a comment"
    tricky = long_texts.MARKER + "not a reference"
    stored = long_texts.kept(table.io, table.location(), tricky)
    assert stored != tricky and long_texts.text(table.io, stored, "ns.t") == tricky
    values = {"a": "x", "b": long_texts.kept(table.io, table.location(), TEXT)}
    assert long_texts.texts(table.io, values, "ns.t") == {"a": "x", "b": TEXT}


def test_a_missing_or_altered_file_is_the_damage_error_naming_it(table, monkeypatch) -> None:
    stored = long_texts.kept(table.io, table.location(), TEXT)
    path = Path(stored.split(":", 2)[2].removeprefix("file://"))
    _fresh_process(monkeypatch)
    path.write_bytes(TEXT.encode()[:-1] + b"?")
    with pytest.raises(PgError) as altered:
        long_texts.text(table.io, stored, "ns.t")
    assert altered.value.sqlstate == "XX001" and str(path) in altered.value.message
    path.unlink()
    with pytest.raises(PgError) as gone:
        long_texts.text(table.io, stored, "ns.t")
    assert gone.value.sqlstate == "58P01" and str(path) in gone.value.message


def test_orphan_gc_keeps_the_texts_the_metadata_references(table) -> None:
    comment = long_texts.kept(table.io, table.location(), TEXT)
    doc = long_texts.kept(table.io, table.location(), TEXT + "d")
    dropped = long_texts.kept(table.io, table.location(), TEXT + "x")  # a commit that failed
    with table.transaction() as txn:
        txn.set_properties({"comment": comment})
        with txn.update_schema() as update:
            update.update_column("id", doc=doc)
    table = table.refresh()
    hour_ago = time.time() - 3600
    for stored in (comment, doc, dropped):
        path = stored.split(":", 2)[2].removeprefix("file://")
        os.utime(path, (hour_ago, hour_ago))
    report = orphans.remove_orphans(table, "ns.t", older_than_ms=int(time.time() * 1000) - 60_000)
    assert [o.path for o in report.orphans] == [dropped.split(":", 2)[2].removeprefix("file://")]
