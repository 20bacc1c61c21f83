"""Start-up recovery of the staging records earlier runs of this data directory left
(engine/staging.py), each through the staged-file machine against the lakehouse."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from icegres.engine.staging import DeadRun, FileStaging, MemoryStaging, dead_runs, delete_file
from icegres.machines.staged import StagingRecord, TableSeen

log = logging.getLogger("icegres.staging")


class LakeStagedWorld:
    """Start-up recovery against the lakehouse: every snapshot's manifests are read (fail closed)."""

    def __init__(self, lakehouse: Any, forget: Any) -> None:
        self.lakehouse = lakehouse
        self._forget = forget
        self._ios: dict[str, Any] = {}  # path -> its table's FileIO, from the inspection

    def inspect(self, record: StagingRecord, tables: tuple[str, ...]) -> tuple[TableSeen, ...]:
        from pyiceberg.exceptions import NoSuchTableError

        from icegres.engine.lake_world import carries_token
        from icegres.engine.maintenance import reachable

        seen = []
        for name in tables:
            ns, _, table_name_ = name.rpartition(".")
            try:
                table = self.lakehouse.load_table(ns, table_name_)
            except NoSuchTableError:
                seen.append(TableSeen(name, False, None))
                continue
            meta = table.metadata
            mine = {f.path for f in record.files if f.table == name}
            self._ios.update(dict.fromkeys(mine, table.io))
            used = reachable.referenced(table.io, meta, meta.snapshots, live_only=False)
            seen.append(TableSeen(name, True, str(meta.table_uuid), carries_token(meta, record.token),
                                  frozenset(p for p in mine if p in used)))
        return tuple(seen)

    def delete_files(self, files: frozenset[str]) -> frozenset[str]:
        return frozenset(p for p in files if not delete_file(self._ios[p], p))

    def forget(self, token: str) -> None:
        self._forget(token)


async def recover_staged(lakehouse: Any, staging: MemoryStaging) -> tuple[int, int]:
    """Start-up: recover the records that runs of this data directory left, each through the
    staged-file machine; a run whose process still runs is left alone. Returns (files deleted,
    records left). Blocking work runs in worker threads."""
    import trio

    from icegres.machines.drivers.staged import run_recovery
    from icegres.machines.staged import Phase

    if not isinstance(staging, FileStaging):
        return 0, 0
    runs = await trio.to_thread.run_sync(dead_runs, staging.root, staging.run)
    deleted = left = 0
    for run in runs:
        try:
            for record in run.records:
                directory = run.directory

                def forget(token: str, directory: Path = directory) -> None:
                    (directory / f"{token}.ndjson").unlink(missing_ok=True)

                state = await run_recovery(record, run.owner_running, LakeStagedWorld(lakehouse, forget))
                if state.phase is Phase.CLEANED:
                    deleted += len(state.deleting)
                    if state.deleting or state.kept:
                        log.info("recovered staging record %s: deleted %d unreferenced staged files, kept %d%s",
                                 record.token, len(state.deleting), len(state.kept),
                                 " (its commit had landed)" if state.landed else "")
                else:
                    left += 1
                    if not run.owner_running:
                        log.warning("staging record %s kept: %s", record.token, state.reason)
            if not run.owner_running:
                await trio.to_thread.run_sync(_retire, run)
        finally:
            if run.lock is not None:
                run.lock.close()
    return deleted, left


def _retire(run: DeadRun) -> None:
    """A dead run with no record left: its directory goes."""
    if any(run.directory.glob("*.ndjson")):
        return
    for leftover in run.directory.iterdir():
        leftover.unlink(missing_ok=True)
    try:
        run.directory.rmdir()
    except OSError:
        pass
