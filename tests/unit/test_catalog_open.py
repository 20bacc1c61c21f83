"""Opening one fresh embedded catalog from several processes at once: every one opens it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from icegres.engine import catalog

pytestmark = pytest.mark.unit

# Each process imports once, then opens the directory named by every line it reads: the six
# opens of a round start together, not spread over each process's second of imports.
_OPEN = ("import sys; from pathlib import Path; from icegres.engine.catalog import Lakehouse\n"
         "for line in sys.stdin:\n"
         "    Lakehouse.embedded(Path(line.strip()))\n"
         "    print('opened', flush=True)\n")


def test_processes_opening_a_fresh_data_directory_together_all_open_it(tmp_path: Path) -> None:
    # Before: both probes found no tables, both created them, and the second CREATE TABLE failed
    # ("table iceberg_tables already exists"); 5 of 90 such opens failed here (15 rounds of 6).
    root = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN], cwd=root, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    try:
        for round_ in range(8):
            data_dir = tmp_path / f"lake{round_}"
            for proc in procs:
                proc.stdin.write(f"{data_dir}\n")
                proc.stdin.flush()
            for proc in procs:
                assert proc.stdout.readline() == "opened\n", proc.communicate(timeout=60)[1][-2000:]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err[-2000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_open_is_retried_only_after_another_process_created_the_tables() -> None:
    calls: list[int] = []

    def racing() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("(sqlite3.OperationalError) table iceberg_tables already exists")
        return "catalog"

    assert catalog._first_open(racing) == "catalog" and len(calls) == 2

    def broken() -> str:
        raise RuntimeError("unable to open database file")

    with pytest.raises(RuntimeError, match="unable to open"):
        catalog._first_open(broken)


def test_a_sqlite_uri_opens_another_directorys_embedded_catalog(tmp_path: Path) -> None:
    import pyarrow as pa

    from icegres.config import Settings

    lake = catalog.Lakehouse.embedded(tmp_path / "lake")
    lake.catalog.create_namespace("s")
    lake.catalog.create_table(("s", "t"), schema=pa.schema([pa.field("x", pa.int64())])).append(pa.table({"x": [7]}))
    shared = catalog.Lakehouse.from_settings(Settings(data_dir=tmp_path / "other",
                                                      catalog_uri=f"sqlite:///{tmp_path / 'lake' / 'catalog.db'}"))
    table = shared.catalog.load_table(("s", "t"))
    assert table.scan().to_arrow().column("x").to_pylist() == [7]
    assert shared.change_token() is not None  # exact freshness works through the shared file too
    assert not (tmp_path / "other").exists()


def test_a_sqlite_uri_naming_no_file_is_refused_not_created(tmp_path: Path) -> None:
    from icegres.config import Settings

    missing = tmp_path / "typo" / "catalog.db"
    with pytest.raises(catalog.CatalogUnavailable, match="no such file"):
        catalog.Lakehouse.from_settings(Settings(catalog_uri=f"sqlite:///{missing}"))
    assert not missing.exists()
