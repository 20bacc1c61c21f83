"""`icegres branch` on a lake: whole-lake branches in one atomic commit (or none, under a racing
commit or a crash), diff over metadata only, merge that fast-forwards or refuses, reset."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytestmark = pytest.mark.e2e

ICEGRES = [sys.executable, "-m", "icegres"]


def _lake(data_dir: Path) -> Any:
    from icegres.engine.catalog import Lakehouse

    return Lakehouse.embedded(data_dir)


def branch(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ICEGRES, "branch", *args, "--data-dir", str(data_dir), "--log-level", "warning"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def refs(data_dir: Path, name: str) -> dict[str, int | None]:
    lake = _lake(data_dir)
    out = {}
    for entry in lake.listing().tables:
        table = lake.load_table(entry.namespace, entry.name)
        found = table.metadata.refs.get(name)
        out[f"{entry.namespace}.{entry.name}"] = None if found is None else found.snapshot_id
    return out


def heads(data_dir: Path) -> dict[str, int | None]:
    return refs(data_dir, "main")


def append(data_dir: Path, name: str, ids: list[int]) -> None:
    _lake(data_dir).load_table("lake", name).append(pa.table({"id": pa.array(ids, pa.int64())}))


def diverge(data_dir: Path, name: str, dev_rows: list[int], main_rows: list[int]) -> None:
    """Make branch dev and main of lake.<name> diverge: main commits `dev_rows`, dev moves to that
    commit, main goes back to its parent and commits `main_rows` instead."""
    lh = _lake(data_dir)
    append(data_dir, name, dev_rows)
    ahead = lh.load_table("lake", name).metadata.current_snapshot_id
    assert branch(data_dir, "reset", "dev", "--to", str(ahead), "--table", f"lake.{name}").returncode == 0
    table = lh.load_table("lake", name)
    parent = table.metadata.snapshot_by_id(ahead).parent_snapshot_id
    table.manage_snapshots().set_current_snapshot(snapshot_id=parent).commit()
    append(data_dir, name, main_rows)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """Schema `lake` with tables t0..t4 of two rows each, and `empty` without a snapshot."""
    data_dir = tmp_path / "data"
    lh = _lake(data_dir)
    lh.create_namespace_if_missing("lake")
    for i in range(5):
        lh.create_table("lake", f"t{i}", pa.schema([("id", pa.int64())]))
        append(data_dir, f"t{i}", [1, 2])
    lh.create_table("lake", "empty", pa.schema([("id", pa.int64())]))
    return data_dir


def test_create_all_pins_every_table_at_mains_head_in_one_commit(lake):
    before = heads(lake)
    done = branch(lake, "create", "preview", "--all", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["skipped"] == ["lake.empty: no snapshot yet"]
    assert refs(lake, "preview") == {k: (v if k != "lake.empty" else None) for k, v in before.items()}
    assert heads(lake) == before  # main did not move
    again = branch(lake, "create", "preview", "--all")
    assert again.returncode == 1 and "42710" in again.stderr
    listed = branch(lake, "list", "--namespace", "lake", "--json")
    assert {(r["table"], r["ref"]) for r in json.loads(listed.stdout)} >= {("lake.t0", "preview"), ("lake.t0", "main")}


def test_a_racing_commit_leaves_no_table_branched(lake):
    # The CLI stops after building its commit, before publishing it; another writer commits to
    # one table meanwhile: the whole set is refused, none of the tables has the branch.
    proc = subprocess.Popen([*ICEGRES, "branch", "create", "cut", "--all", "--data-dir", str(lake),
                             "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ICEGRES_FAULTS": "before-publish=sleep:4"})
    deadline = time.monotonic() + 60
    reached = threading.Event()

    def watch() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "icegres-fault: reached before-publish" in line:
                reached.set()
                return

    threading.Thread(target=watch, daemon=True).start()
    assert reached.wait(max(0.0, deadline - time.monotonic())), "the fault point was never reached"
    append(lake, "t3", [3])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert all(v is None for v in refs(lake, "cut").values())


def test_a_crash_mid_publish_leaves_no_table_branched(lake):
    crashed = branch(lake, "create", "crash", "--all", env={"ICEGRES_FAULTS": "mid-publish=crash"})
    assert crashed.returncode == 137
    assert all(v is None for v in refs(lake, "crash").values())
    assert branch(lake, "create", "crash", "--all").returncode == 0
    assert all(v is not None for k, v in refs(lake, "crash").items() if k != "lake.empty")


def test_diff_reads_metadata_only_and_names_each_state(lake):
    assert branch(lake, "create", "dev", "--all").returncode == 0
    append(lake, "t1", [3, 4, 5])  # main advanced past dev
    diverge(lake, "t2", dev_rows=[9], main_rows=[7, 8])
    assert branch(lake, "drop", "dev", "--table", "lake.t3").returncode == 0  # dev gone in t3
    # Every data file is gone: a diff that opened one would fail.
    for path in (lake / "warehouse").rglob("*.parquet"):
        path.unlink()
    done = branch(lake, "diff", "dev", "main", "--namespace", "lake", "--json")
    assert done.returncode == 0, done.stderr
    states = {d["table"]: d for d in json.loads(done.stdout)}
    assert states["lake.t0"]["state"] == "same"
    assert states["lake.t1"]["state"] == "advanced" and states["lake.t1"]["rows_added"] == 3
    assert states["lake.t2"]["state"] == "diverged"
    assert (states["lake.t2"]["rows_added"], states["lake.t2"]["a_rows_added"]) == (2, 1)
    assert states["lake.t3"]["state"] == "created"  # only main (B) has it
    assert states["lake.empty"]["state"] == "absent"


def test_merge_fast_forwards_all_or_refuses_all(lake):
    assert branch(lake, "create", "dev", "--all").returncode == 0
    for name in ("t0", "t1"):
        append(lake, name, [10])
    main_heads = heads(lake)
    dev_before = refs(lake, "dev")
    dry = branch(lake, "merge", "main", "dev", "--all", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["executed"] is False
    assert refs(lake, "dev") == dev_before  # a dry run changes nothing
    done = branch(lake, "merge", "main", "dev", "--all", "--execute")
    assert done.returncode == 0, done.stderr
    assert refs(lake, "dev")["lake.t0"] == main_heads["lake.t0"]
    assert refs(lake, "dev")["lake.t1"] == main_heads["lake.t1"]
    # Diverge t4, advance t0: the merge is refused whole.
    diverge(lake, "t4", dev_rows=[5], main_rows=[6])
    append(lake, "t0", [11])
    dev_before = refs(lake, "dev")
    refused = branch(lake, "merge", "main", "dev", "--all", "--execute")
    assert refused.returncode == 1
    assert "CONFLICT lake.t4" in refused.stdout and "nothing was merged" in refused.stdout
    assert refs(lake, "dev") == dev_before


def test_merge_rebase_reapplies_appends_where_both_sides_only_appended(lake):
    assert branch(lake, "create", "dev", "--all").returncode == 0
    lh = _lake(lake)
    rows = lambda ids: pa.table({"id": pa.array(ids, pa.int64())})  # noqa: E731
    append(lake, "t0", [10])  # main moves on ...
    lh.load_table("lake", "t0").append(rows([20]), branch="dev")  # ... and so does dev: diverged
    lh.load_table("lake", "t1").append(rows([30]), branch="dev")  # dev only: a fast-forward
    lh.load_table("lake", "t2").delete("id == 1", branch="dev")  # not an append: no rebase
    append(lake, "t2", [40])
    before = heads(lake)
    refused = branch(lake, "merge", "dev", "main", "--all", "--rebase", "--execute")
    assert refused.returncode == 1 and "CONFLICT lake.t2" in refused.stdout
    assert heads(lake) == before  # one table refused: nothing of the set landed
    assert branch(lake, "reset", "dev", "--to", "main", "--table", "lake.t2").returncode == 0
    dry = branch(lake, "merge", "dev", "main", "--all", "--rebase", "--json")
    plan = json.loads(dry.stdout)
    assert dry.returncode == 0 and plan["executed"] is False
    assert list(plan["rebased"]) == ["lake.t0"] and list(plan["moves"]) == ["lake.t1"]
    assert heads(lake) == before
    done = branch(lake, "merge", "dev", "main", "--all", "--rebase", "--execute")
    assert done.returncode == 0, done.stdout + done.stderr
    t0 = lh.load_table("lake", "t0")
    assert sorted(t0.scan().to_arrow().column("id").to_pylist()) == [1, 2, 10, 20]
    head = t0.metadata.snapshot_by_id(t0.metadata.current_snapshot_id)
    assert head.parent_snapshot_id == before["lake.t0"]  # on top of main: main's history kept
    assert head.summary["icegres.rebased-from"] == str(plan["rebased"]["lake.t0"][0])
    t1 = lh.load_table("lake", "t1")
    assert t1.metadata.current_snapshot_id == t1.metadata.refs["dev"].snapshot_id
    assert sorted(t1.scan().to_arrow().column("id").to_pylist()) == [1, 2, 30]


def test_reset_to_a_ref_a_snapshot_and_a_time(lake):
    assert branch(lake, "create", "dev", "--all").returncode == 0
    first = heads(lake)
    time.sleep(0.05)
    between = time.time()
    time.sleep(0.05)
    for i in range(5):
        append(lake, f"t{i}", [3])
    assert branch(lake, "reset", "dev", "--to", "main", "--all").returncode == 0
    assert refs(lake, "dev") == {k: v for k, v in heads(lake).items()} | {"lake.empty": None}
    import datetime as dt

    at = dt.datetime.fromtimestamp(between, dt.UTC).isoformat()
    assert branch(lake, "reset", "dev", "--to", at, "--all").returncode == 0
    assert refs(lake, "dev") == first | {"lake.empty": None}
    missing = branch(lake, "reset", "dev", "--to", "nope", "--table", "lake.t0")
    assert missing.returncode == 1 and "42704" in missing.stderr
