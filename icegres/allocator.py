"""Settings for the allocator inside DataFusion's native library, applied before it loads.

DataFusion's Python bindings allocate through mimalloc, which by default gives freed memory back
to the kernel 10 ms after it falls idle. A query allocates its buffers and hash tables afresh,
so at a server's pace each statement page-faulted that memory in again and the kernel zeroed it
(`clear_page` was 18% of the server's CPU samples while streaming a 10M-row result). Holding
freed memory for 10 s, as jemalloc's default decay does, keeps it across a busy stretch and
still returns it to the system once the server idles. Measured over pgwire, servers with and
without it interleaved (2026-12-03, seed-1m): point lookup 6.54 -> 6.17 ms, group-by
21.7 -> 19.7 ms; eleven of twelve query/run pairs faster, RSS after a 1M-row result the same.

mimalloc also commits its 1 GiB arenas eagerly and advises the kernel to back them with 2 MB
transparent huge pages. The first touch of such a page zeroes all 2 MB at once, and DataFusion
touches them inside calls that hold the GIL: a session's first statement in a new worker thread
(its SessionContext) spent 30-70 ms of system time in `clear_page_erms` under
`do_huge_pmd_anonymous_page` (perf, 2026-12-06), and every other session waited that long for
the GIL (test_limits' 50 MB statement: its bystander's worst `select 1` was 40-114 ms on a fresh
server, 7-19 ms without huge pages). So the process opts out of transparent huge pages
(PR_SET_THP_DISABLE, inherited by the executor processes it starts). Measured over pgwire,
servers with and without interleaved on seed-1m (2026-12-06): point lookup 5.02 -> 5.00 ms,
group-by 17.06 -> 17.05 ms, join 24.3 -> 24.4 ms, a 1M-row result 1.31 -> 1.30 s, RSS 472 ->
432 MB. (Turning eager commit off instead cost 3-6%: mimalloc then commits by system call.)

Only the process's own entry points call `configure` (the CLI and the benchmarks' in-process
engine); a value the user set in the environment wins, and ICEGRES_HUGE_PAGES=1 keeps the
kernel's huge-page policy.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import MutableMapping

DEFAULTS = {"MIMALLOC_PURGE_DELAY": "10000"}


def configure() -> None:
    """Set up this process's allocation before `import datafusion`: the environment's defaults
    and the huge-page opt-out."""
    set_defaults(os.environ)
    if os.environ.get("ICEGRES_HUGE_PAGES") != "1":
        no_transparent_huge_pages()


def set_defaults(environ: MutableMapping[str, str]) -> None:
    """Set the defaults `environ` does not already have."""
    for key, value in DEFAULTS.items():
        environ.setdefault(key, value)


_PR_SET_THP_DISABLE = 41


def no_transparent_huge_pages() -> bool:
    """Opt this process (and the processes it starts) out of transparent huge pages; False
    where the platform has no such switch (not Linux, or a kernel before 3.15)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
