"""Opening one fresh embedded catalog from several processes at once: every one opens it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from icegres.engine import catalog

pytestmark = pytest.mark.unit

_OPEN = "import sys; from pathlib import Path; from icegres.engine.catalog import Lakehouse; Lakehouse.embedded(Path(sys.argv[1]))"


def test_processes_opening_a_fresh_data_directory_together_all_open_it(tmp_path: Path) -> None:
    # Before: both probes found no tables, both created them, and the second CREATE TABLE failed
    # ("table iceberg_tables already exists"); 5 of 90 such opens failed here (15 rounds of 6).
    root = Path(__file__).resolve().parents[2]
    for round_ in range(5):
        data_dir = tmp_path / f"lake{round_}"
        procs = [subprocess.Popen([sys.executable, "-c", _OPEN, str(data_dir)], cwd=root, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-2000:]


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
