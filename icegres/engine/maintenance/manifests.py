"""Manifest rewrite: Spark's `rewrite_manifests`, so that commit and planning cost stay flat.

Every icegres commit is a fast append: one new manifest per commit, and the manifest list of each
new snapshot names every manifest before it. A table with 2,000 one-row commits has 2,000
manifests: a scan opens each of them to plan, and a commit writes a manifest list that long
(docs/limitations.md). Rewriting merges the data manifests of each partition spec into manifests
of `commit.manifest.target-size-bytes` (Iceberg's property, default 8 MiB), with every live entry
kept as EXISTING under its original snapshot id and sequence numbers, and drops the entries of
files deleted earlier. One `replace` snapshot: the same data files, fewer manifests. Delete
manifests are kept as they are. pyiceberg 0.12 has no rewrite-manifests API (its
`_ManifestMergeManager` only merges during a merge-append); this producer does it alone.

Concurrency: no data file changes, so any concurrent commit is rebased onto: the commit machine
publishes it as a metadata change that is built again on the new head (`commit_metadata_change`).

Blocking (manifest reads and writes, catalog calls): run it in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyiceberg.manifest import ManifestContent
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT

if TYPE_CHECKING:
    from pyiceberg.manifest import ManifestEntry, ManifestFile

    from icegres.engine.catalog import Lakehouse

TARGET_PROPERTY = "commit.manifest.target-size-bytes"
DEFAULT_TARGET_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class ManifestResult:
    """Spark's result row (rewritten_manifests_count, added_manifests_count), plus a report's."""

    rewritten_manifests_count: int = 0
    added_manifests_count: int = 0
    manifests_before: int = 0
    entries: int = 0  # live data file entries written again
    snapshot_id: int | None = None  # None: nothing to merge, nothing committed

    def as_dict(self) -> dict[str, Any]:
        return {"rewritten_manifests_count": self.rewritten_manifests_count,
                "added_manifests_count": self.added_manifests_count,
                "manifests_before": self.manifests_before, "entries": self.entries,
                "snapshot_id": self.snapshot_id}

    def row(self) -> Any:
        import pyarrow as pa

        values = (self.rewritten_manifests_count, self.added_manifests_count)
        return pa.table([pa.array([v], f.type) for v, f in zip(values, result_schema(), strict=True)],
                        schema=result_schema())


def result_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("rewritten_manifests_count", pa.int32()), ("added_manifests_count", pa.int32())])



class RewriteManifests(_SnapshotProducer["RewriteManifests"]):
    """A `replace` snapshot listing the same live data files as its parent in fewer manifests."""

    def __init__(self, tx: Any, target_bytes: int, spec_id: int | None = None,
                 snapshot_properties: dict[str, str] | None = None) -> None:
        super().__init__(operation=Operation.OVERWRITE, transaction=tx, io=tx._table.io, branch="main",
                         snapshot_properties=snapshot_properties or {})
        self._target_bytes = target_bytes
        self._spec_id = spec_id  # None: every spec's manifests
        self.result = ManifestResult()

    def plan(self) -> list[list[ManifestFile]]:
        """The bins of data manifests merged into one each (bins of one are kept as they are)."""
        from pyiceberg.utils.bin_packing import ListPacker

        snapshot = self._transaction.table_metadata.snapshot_by_name("main")
        if snapshot is None:
            return []
        by_spec: dict[int, list[ManifestFile]] = {}
        for manifest in snapshot.manifests(self._io):
            if manifest.content == ManifestContent.DATA and self._spec_id in (None, manifest.partition_spec_id):
                by_spec.setdefault(manifest.partition_spec_id, []).append(manifest)
        packer: ListPacker[ManifestFile] = ListPacker(self._target_bytes, lookback=1, largest_bin_first=False)
        return [b for _, ms in sorted(by_spec.items()) for b in packer.pack(ms, lambda m: m.manifest_length)
                if len(b) > 1]

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _existing_manifests(self) -> list[ManifestFile]:
        return []

    def _manifests(self) -> list[ManifestFile]:
        snapshot = self._transaction.table_metadata.snapshot_by_name("main")
        assert snapshot is not None
        every = snapshot.manifests(self._io)
        bins = self.plan()
        merged = {m.manifest_path for b in bins for m in b}
        kept = [m for m in every if m.manifest_path not in merged]
        written, entries = [], 0
        for manifests in bins:
            with self.new_manifest_writer(self.spec(manifests[0].partition_spec_id)) as writer:
                for manifest in manifests:
                    for entry in manifest.fetch_manifest_entry(self._io, discard_deleted=True):
                        writer.existing(entry)  # (its snapshot id and sequence numbers, as they were)
                        entries += 1
            written.append(writer.to_manifest_file())
        self.result = ManifestResult(len(merged), len(written), len(every), entries)
        return written + kept

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        summary = super()._summary(snapshot_properties)
        counts = {"manifests-created": str(self.result.added_manifests_count),
                  "manifests-replaced": str(self.result.rewritten_manifests_count),
                  "manifests-kept": str(self.result.manifests_before - self.result.rewritten_manifests_count),
                  "entries-processed": str(self.result.entries)}
        return Summary(Operation.REPLACE, **summary.additional_properties, **counts)


def target_bytes(properties: dict[str, str]) -> int:
    try:
        return max(1, int(properties.get(TARGET_PROPERTY, DEFAULT_TARGET_BYTES)))
    except ValueError:
        return DEFAULT_TARGET_BYTES


def manifest_count(table: Any) -> int:
    snapshot = table.metadata.current_snapshot()
    return 0 if snapshot is None else len(snapshot.manifests(table.io))


def rewrite_manifests(lakehouse: Lakehouse, key: tuple[str, str], spec_id: int | None = None,
                      before_commit: Callable[[], None] | None = None,
                      snapshot_properties: dict[str, str] | None = None) -> ManifestResult:
    """Merge the table's small data manifests (main branch; of one partition spec if `spec_id`)
    in one `replace` snapshot; nothing is committed when no two manifests of one spec fit a
    target-size manifest together. 22023 for a spec id the table does not have. `before_commit`
    is called before each commit attempt; what it raises stops the rewrite there.
    `snapshot_properties` go into the replace snapshot's summary (the lease's epoch)."""
    from icegres.engine.lake_world import commit_metadata_change

    table = lakehouse.load_table(*key)
    if table.metadata.current_snapshot() is None:
        return ManifestResult()
    if spec_id is not None and spec_id not in table.metadata.specs():
        from icegres.pg.errors import INVALID_PARAMETER_VALUE, PgError

        raise PgError(INVALID_PARAMETER_VALUE, f'table "{key[0]}.{key[1]}" has no partition spec {spec_id}')
    target = target_bytes(table.metadata.properties)
    probe = RewriteManifests(table.transaction(), target, spec_id)
    if not probe.plan():
        return ManifestResult(manifests_before=manifest_count(table))
    made: list[RewriteManifests] = []

    def change(tx: Any) -> None:
        # Built again on the head at each attempt: a concurrent commit is rebased onto.
        if before_commit is not None:
            before_commit()
        producer = RewriteManifests(tx, target, spec_id, snapshot_properties)
        made.append(producer)
        producer.commit()

    commit_metadata_change(lakehouse, key, table, change)
    last = made[-1]
    from dataclasses import replace

    return replace(last.result, snapshot_id=last.snapshot_id)
