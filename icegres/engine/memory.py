"""The query engine's memory: one pool every DataFusion context of the process shares, and a
spill directory, so sorts, aggregates and joins spill to disk instead of growing without bound.

DataFusion accounts the memory of its operators' state (sort buffers, hash tables, a join's
build side) against the RuntimeEnv's pool; a consumer that can spill (a sort, a grouped
aggregate, a sort-merge join) writes to the disk manager's files when its fair share is used up,
and one that cannot (a hash or nested-loop join's build side) fails the query with
"Resources exhausted", which the front ends answer as PostgreSQL's 53200 "out of memory".

Every SessionContext gets a RuntimeEnv of its own, built from the RuntimeEnvBuilder it is given.
The builder holds the pool as one shared object, so handing every context of the process the
same builder gives them one pool (measured: with a 40 MB pool shared by two contexts, the second
context's 17 MB join build failed while the first one's stream held its build; with two
builders both ran). FairSpillPool divides what the non-spilling consumers leave among the
spilling ones, so concurrent sorts each get an even share rather than the first one taking all.

What the pool does not see (docs/limitations.md, "Memory"): batches in flight between operators,
the Parquet reader's decoding buffers, a scalar function's output (`repeat()`: bounded by
`pg_builtins`' length check instead), and Python's copies of results.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

SPILL_DIR = "spill"  # under the data directory

def spill_dir(data_dir: Path) -> Path:
    """This process's spill directory: `<data dir>/spill/<pid>`, made empty. Servers share a data
    directory (one starts while the one before it still drains), so each spills under its own
    pid, and one starting removes only what dead processes left (DataFusion removes its files only
    when it exits cleanly): emptying the whole of `spill` at start-up removed a running server's
    files, and a start racing another failed with DataFusion's EEXIST."""
    root = data_dir / SPILL_DIR
    root.mkdir(parents=True, exist_ok=True)
    for entry in root.iterdir():
        if _left_behind(entry):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
    own = root / str(os.getpid())
    shutil.rmtree(own, ignore_errors=True)  # (a pid used again: the dead one's files)
    own.mkdir()
    return own


_LAYOUT_AGE_S = 3600  # (files of the layout before per-process directories: left an hour)


def _left_behind(entry: Path) -> bool:
    """Whether a spill entry belongs to no running process."""
    if not entry.name.isdigit():
        try:
            return time.time() - entry.stat().st_mtime > _LAYOUT_AGE_S
        except OSError:
            return False
    try:
        os.kill(int(entry.name), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False


def runtime_env(pool_bytes: int, spill: Path) -> Any:
    """The RuntimeEnvBuilder every context of the process is made with: a fair spill pool of
    `pool_bytes` and spill files under `spill` (`spill_dir`: this process's own)."""
    from datafusion import RuntimeEnvBuilder

    spill.mkdir(parents=True, exist_ok=True)
    return RuntimeEnvBuilder().with_fair_spill_pool(pool_bytes).with_temp_file_path(str(spill))
