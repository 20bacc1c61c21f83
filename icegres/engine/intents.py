"""Intent records of the catalog commit machine: a block's catalog plan, durable before it acts.

One JSON file per block under `<data dir>/intents/`, written atomically (a temporary file,
fsync, rename, fsync of the directory), so that the next start of this server finds every block
whose catalog changes may be half applied and finishes or undoes it
(`machines/catalog_commit.py`). A server without a data directory (an engine made in-process)
keeps them in memory: the same protocol, nothing to recover after a crash it cannot survive.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from icegres.machines.catalog_commit import CatalogPlan, Move


def plan_to_json(plan: CatalogPlan, decided: bool = False) -> str:
    return json.dumps({
        "token": plan.token,
        "moves": [[m.namespace, m.src, m.dst, m.table_uuid, m.kind] for m in plan.moves],
        "created": [list(k) for k in plan.created],
        "graveyard": [list(k) for k in plan.graveyard],
        "has_data": plan.has_data,
        "written": [list(k) for k in plan.written],
        "decided": decided,
    }, sort_keys=True)


def plan_from_json(text: str) -> tuple[CatalogPlan, bool]:
    doc = json.loads(text)
    plan = CatalogPlan(
        token=doc["token"],
        moves=tuple(Move(*m) for m in doc["moves"]),
        created=tuple((ns, n) for ns, n in doc["created"]),
        graveyard=tuple((ns, n) for ns, n in doc["graveyard"]),
        has_data=bool(doc["has_data"]),
        written=tuple((ns, n) for ns, n in doc["written"]),
    )
    return plan, bool(doc["decided"])


class MemoryIntents:
    """Intent records of an engine without a data directory."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._lock = threading.Lock()

    def record(self, plan: CatalogPlan, decided: bool = False) -> None:
        with self._lock:
            self._records[plan.token] = plan_to_json(plan, decided)

    def forget(self, token: str) -> None:
        with self._lock:
            self._records.pop(token, None)

    def pending(self) -> list[tuple[CatalogPlan, bool]]:
        with self._lock:
            return [plan_from_json(text) for text in self._records.values()]


class FileIntents(MemoryIntents):
    """Intent records as files in `directory` (blocking: call from worker threads)."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = directory

    def record(self, plan: CatalogPlan, decided: bool = False) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"{plan.token}.json"
        temporary = final.with_suffix(".tmp")
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(plan_to_json(plan, decided))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, final)
        self._sync_directory()

    def forget(self, token: str) -> None:
        try:
            (self.directory / f"{token}.json").unlink()
        except FileNotFoundError:
            return
        self._sync_directory()

    def pending(self) -> list[tuple[CatalogPlan, bool]]:
        if not self.directory.is_dir():
            return []
        return [plan_from_json(path.read_text(encoding="utf-8"))
                for path in sorted(self.directory.glob("*.json"))]

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
