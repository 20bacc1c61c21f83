"""Running `icegres verify` as an operator would, and fingerprinting the lake it must not touch."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRATCH = "icegres_verify"


def verify_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEGRES_")}
    env.update(extra or {})
    return env


def run_verify(*args: str, env: dict[str, str] | None = None, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "icegres", "verify", *args], capture_output=True, text=True,
                          timeout=timeout_s, stdin=subprocess.DEVNULL, env=verify_env(env))


def verdicts(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """The --json document's claims, by name."""
    document = json.loads(proc.stdout)
    return {c["claim"]: c for c in document["claims"]}


def embedded_fingerprint(data_dir: Path, scratch: str = SCRATCH) -> dict[str, str]:
    """Every catalog row and every warehouse file outside the scratch namespace, hashed."""
    out: dict[str, str] = {}
    with sqlite3.connect(data_dir / "catalog.db") as db:
        for table in ("iceberg_tables", "iceberg_namespace_properties"):
            column = "table_namespace" if table == "iceberg_tables" else "namespace"
            for row in db.execute(f"select * from {table} where {column} != ? order by 1, 2, 3", (scratch,)):
                out[f"{table}:{row[:3]}"] = repr(row)
    for path in sorted((data_dir / "warehouse").rglob("*")):
        relative = path.relative_to(data_dir / "warehouse")
        if path.is_file() and relative.parts[0] != scratch:
            out[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def scratch_rows(data_dir: Path, scratch: str = SCRATCH) -> list[tuple[Any, ...]]:
    with sqlite3.connect(data_dir / "catalog.db") as db:
        return db.execute("select * from iceberg_namespace_properties where namespace = ?", (scratch,)).fetchall() + \
            db.execute("select * from iceberg_tables where table_namespace = ?", (scratch,)).fetchall()
