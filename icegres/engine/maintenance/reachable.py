"""The files a table's snapshots reference, read from its metadata: what expiry and orphan GC
must never delete. Reading is fail-closed: a manifest list or manifest that cannot be read raises
`Unreadable`, and the caller then deletes nothing."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from icegres.pg.errors import PgError

# Iceberg's content kinds of a data file entry, as Spark's expire_snapshots counts them.
DATA, POSITION_DELETES, EQUALITY_DELETES = "data", "position_deletes", "equality_deletes"
MANIFEST, MANIFEST_LIST, STATISTICS = "manifest", "manifest_list", "statistics"


class Unreadable(PgError):
    """A metadata file the table references could not be read: nothing is deleted."""

    def __init__(self, path: str, exc: BaseException) -> None:
        super().__init__("58030", f'could not read table metadata file "{path}": {type(exc).__name__}: {exc}',
                         detail="Nothing was deleted: maintenance fails closed when it cannot see "
                                "every file the table references.")


@dataclass
class Files:
    """Paths by kind, each with its size in bytes where the metadata gives it (else None)."""

    kinds: dict[str, str] = field(default_factory=dict)  # path -> kind
    sizes: dict[str, int | None] = field(default_factory=dict)

    def add(self, path: str, kind: str, size: int | None) -> None:
        self.kinds.setdefault(path, kind)
        if self.sizes.get(path) is None:
            self.sizes[path] = size

    def __contains__(self, path: str) -> bool:
        return path in self.kinds

    def minus(self, other: Files) -> Files:
        out = Files()
        for path, kind in self.kinds.items():
            if path not in other:
                out.add(path, kind, self.sizes.get(path))
        return out


def referenced(io: Any, metadata: Any, snapshots: Iterable[Any], *, live_only: bool,
               seen: dict[str, list[Any]] | None = None) -> Files:
    """The manifest lists, manifests and content files of `snapshots` (`live_only`: only the
    entries a read of a snapshot uses, ADDED and EXISTING; else every entry, DELETED too).
    `seen` caches what was read (a manifest list's manifests, a manifest's entries) by path
    across calls: Iceberg never rewrites a metadata file in place. Raises Unreadable."""
    from pyiceberg.manifest import ManifestEntryStatus

    snapshots = list(snapshots)
    files = Files()
    cache = seen if seen is not None else {}
    for snapshot in snapshots:
        files.add(snapshot.manifest_list, MANIFEST_LIST, None)
        manifests = cache.get(snapshot.manifest_list)  # a manifest list never changes either
        if manifests is None:
            try:
                manifests = snapshot.manifests(io)
            except Exception as exc:
                raise Unreadable(snapshot.manifest_list, exc) from exc
            cache[snapshot.manifest_list] = manifests
        for manifest in manifests:
            files.add(manifest.manifest_path, MANIFEST, manifest.manifest_length)
            entries = cache.get(manifest.manifest_path)
            if entries is None:
                try:
                    entries = list(manifest.fetch_manifest_entry(io, discard_deleted=False))
                except Exception as exc:
                    raise Unreadable(manifest.manifest_path, exc) from exc
                cache[manifest.manifest_path] = entries
            for entry in entries:
                if live_only and entry.status == ManifestEntryStatus.DELETED:
                    continue
                data_file = entry.data_file
                files.add(data_file.file_path, _content_kind(data_file), data_file.file_size_in_bytes)
    ids = {s.snapshot_id for s in snapshots}
    for statistics in metadata.statistics:
        if statistics.snapshot_id in ids:
            files.add(statistics.statistics_path, STATISTICS, statistics.file_size_in_bytes)
    return files


def _content_kind(data_file: Any) -> str:
    content = getattr(data_file.content, "value", data_file.content)
    return {0: DATA, 1: POSITION_DELETES, 2: EQUALITY_DELETES}.get(int(content), DATA)


def metadata_files(metadata: Any, metadata_location: str) -> set[str]:
    """The table's current metadata file and the previous ones its metadata log lists."""
    return {metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
