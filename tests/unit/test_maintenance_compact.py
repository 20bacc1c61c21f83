"""Compaction's and the manifest rewrite's rules without a server: which files Spark's options pick,
how the procedures' arguments read, and the replace snapshots both commit on an embedded lake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from icegres.engine import procedures
from icegres.engine.maintenance import calls, compaction_calls
from icegres.engine.maintenance.compact import (
    CompactOptions,
    SortKey,
    compact,
    operations_since,
    parse_sort_order,
    plan_compaction,
)
from icegres.engine.maintenance.manifests import manifest_count, rewrite_manifests
from icegres.pg.errors import PgError

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


@pytest.fixture
def lake(tmp_path: Path) -> Any:
    from icegres.engine.catalog import Lakehouse

    lh = Lakehouse.embedded(tmp_path / "lake")
    lh.create_namespace_if_missing("ns")
    return lh


def appended(lake: Any, name: str, commits: int) -> Any:
    table = lake.create_table("ns", name, SCHEMA)
    for i in range(commits):
        table.append(pa.table({"id": [i], "v": [f"v{i}"]}, schema=SCHEMA))
    return lake.load_table("ns", name)


def test_spark_rules_pick_small_files_in_groups_of_min_input_files(lake: Any) -> None:
    table = appended(lake, "t", 6)
    assert plan_compaction(table, CompactOptions(), "ns.t").input_files == 6
    assert plan_compaction(table, CompactOptions(min_input_files=7), "ns.t").groups == ()
    # files are ~700 bytes: a 100-byte threshold makes none of them small
    assert plan_compaction(table, CompactOptions(min_file_size_bytes=100), "ns.t").groups == ()
    assert plan_compaction(table, CompactOptions(min_file_size_bytes=100, rewrite_all=True), "ns.t").input_files == 6
    # a target of two files' size bin-packs them into three groups of two
    size = max(t.file.file_size_in_bytes for t in table.scan().plan_files())
    plan = plan_compaction(table, CompactOptions(target_file_size_bytes=2 * size, min_file_size_bytes=10 * size,
                                                 min_input_files=2), "ns.t")
    assert [len(g.tasks) for g in plan.groups] == [2, 2, 2]


def test_the_target_is_the_option_then_the_table_property_then_512_mib() -> None:
    assert CompactOptions().target_bytes({}) == 512 * 1024 * 1024
    assert CompactOptions().target_bytes({"write.target-file-size-bytes": "1000"}) == 1000
    assert CompactOptions(target_file_size_bytes=5).target_bytes({"write.target-file-size-bytes": "1000"}) == 5
    assert CompactOptions().min_bytes(1000) == 750
    with pytest.raises(PgError) as raised:
        CompactOptions(min_input_files=0)
    assert raised.value.sqlstate == "22023"


def test_compaction_is_one_replace_snapshot_with_the_same_rows(lake: Any) -> None:
    table = appended(lake, "t", 7)
    before = table.scan().to_arrow().sort_by("id")
    history = [s.snapshot_id for s in table.metadata.snapshots]
    result = compact(lake, ("ns", "t"), CompactOptions())
    assert (result.rewritten_data_files_count, result.added_data_files_count, result.groups) == (7, 1, 1)
    table = lake.load_table("ns", "t")
    assert table.scan().to_arrow().sort_by("id").equals(before)
    assert [s.snapshot_id for s in table.metadata.snapshots][:-1] == history
    assert table.metadata.current_snapshot().summary.operation.value == "replace"
    assert table.scan(snapshot_id=history[2]).to_arrow().num_rows == 3
    assert operations_since(table.metadata, history[-1]) == ["replace"]
    assert operations_since(table.metadata, history[0])[:2] == ["replace", "append"]
    assert operations_since(table.metadata, 12345) is None
    assert compact(lake, ("ns", "t"), CompactOptions()).snapshot_id is None  # nothing left to do
    # rows come out in commit order (oldest first)
    assert [r["id"] for r in table.scan().to_arrow().to_pylist()] == list(range(7))


def test_manifest_rewrite_merges_and_keeps_every_file(lake: Any) -> None:
    table = appended(lake, "m", 12)
    files = {t.file.file_path for t in table.scan().plan_files()}
    assert manifest_count(table) == 12
    result = rewrite_manifests(lake, ("ns", "m"))
    assert (result.rewritten_manifests_count, result.added_manifests_count, result.entries) == (12, 1, 12)
    table = lake.load_table("ns", "m")
    assert manifest_count(table) == 1
    assert {t.file.file_path for t in table.scan().plan_files()} == files
    summary = table.metadata.current_snapshot().summary
    assert summary.operation.value == "replace" and summary["manifests-replaced"] == "12"
    assert rewrite_manifests(lake, ("ns", "m")).snapshot_id is None  # one manifest: nothing to merge
    with pytest.raises(PgError) as raised:
        rewrite_manifests(lake, ("ns", "m"), spec_id=3)
    assert raised.value.sqlstate == "22023"


def test_sparks_call_arguments_read_as_options() -> None:
    call = procedures.parse_call("CALL system.rewrite_data_files(table => 'ns.t', strategy => 'sort', "
                                 "sort_order => 'a DESC NULLS LAST, b', options => map('min-input-files', '2', "
                                 "'target-file-size-bytes', 1048576, 'rewrite-all', true))")
    options = compaction_calls.compact_options(call)
    assert options == CompactOptions(target_file_size_bytes=1048576, min_input_files=2, rewrite_all=True, sort=True,
                                     sort_order=(SortKey("a", True, False), SortKey("b", False, True)))
    assert compaction_calls.compact_options(procedures.parse_call("call iceberg.system.rewrite_data_files('t')")) == CompactOptions()
    assert calls.result_schema(call).names == ["rewritten_data_files_count", "added_data_files_count",
                                               "rewritten_bytes_count", "failed_data_files_count"]
    manifests = procedures.parse_call("CALL system.rewrite_manifests('ns.t', false, 0)")
    assert dict(manifests.args) == {"table": "ns.t", "use_caching": False, "spec_id": 0}
    assert calls.result_schema(manifests).names == ["rewritten_manifests_count", "added_manifests_count"]


@pytest.mark.parametrize(("sql", "sqlstate"), [
    ("CALL system.rewrite_data_files('t', 'zorder')", "22023"),
    ("CALL system.rewrite_data_files(table => 't', options => map('bogus', '1'))", "22023"),
    ("CALL system.rewrite_data_files(table => 't', options => map('min-input-files', '-1'))", "22023"),
    ("CALL system.rewrite_data_files(table => 't', options => map('rewrite-all', 'maybe'))", "22023"),
    ("CALL system.rewrite_data_files(table => 't', sort_order => 'a')", "22023"),
    ("CALL system.rewrite_data_files(table => 't', strategy => 'sort', sort_order => 'a SIDEWAYS')", "22023"),
    ("CALL system.rewrite_data_files(table => 't', where => 'a > 1')", "0A000"),
])
def test_bad_call_arguments(sql: str, sqlstate: str) -> None:
    with pytest.raises(PgError) as raised:
        compaction_calls.compact_options(procedures.parse_call(sql))
    assert raised.value.sqlstate == sqlstate


@pytest.mark.parametrize(("sql", "sqlstate"), [
    ("CALL system.rewrite_data_files(table => 't', options => map('a'))", "22023"),
    ("CALL system.rewrite_data_files(table => 't', options => map('a', 'b'", "42601"),
    ("CALL system.rewrite_manifests(table => 't', nope => 1)", "42883"),
])
def test_bad_call_syntax(sql: str, sqlstate: str) -> None:
    with pytest.raises(PgError) as raised:
        procedures.parse_call(sql)
    assert raised.value.sqlstate == sqlstate


def test_trinos_optimize_is_rewrite_data_files_of_the_files_under_the_threshold() -> None:
    call = procedures.parse_execute("alter table ns.t execute optimize(file_size_threshold => '128MB')")
    assert (call.procedure, call.execute, call.table) == ("rewrite_data_files", "optimize", "ns.t")
    assert compaction_calls.compact_options(call) == CompactOptions(min_file_size_bytes=128 << 20, min_input_files=2)
    assert calls.result_schema(call) is None  # answered with a command tag
    assert compaction_calls.compact_options(procedures.parse_execute("alter table t execute optimize")).min_file_size_bytes is None
    assert procedures.data_size_bytes("10kB", "x") == 10 * 1024
    assert procedures.data_size_bytes("1.5GB", "x") == 3 << 29
    assert procedures.data_size_bytes(100, "x") == 100
    for bad, sqlstate in (("lots", "22023"), ("0MB", "22023"), ("1XB", "22023")):
        with pytest.raises(PgError) as raised:
            procedures.data_size_bytes(bad, "x")
        assert raised.value.sqlstate == sqlstate
    with pytest.raises(PgError) as raised:
        procedures.parse_execute("alter table t execute vacuum")
    assert raised.value.sqlstate == "42883"


def test_sort_order_text() -> None:
    assert parse_sort_order("a") == (SortKey("a", False, True),)
    assert parse_sort_order('"A" desc, b asc nulls last') == (SortKey("A", True, False), SortKey("b", False, False))
