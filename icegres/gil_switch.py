"""How often a thread that runs Python gives the GIL to another that waits for it.

CPython makes a thread that wants the GIL wait up to the switch interval (5 ms by default) while
another thread runs Python. A statement's answer takes the GIL many times over (the event loop
after each socket wait, the worker thread after each DataFusion call, the loop again to send): a
bystander's `select 1` beside one CPU-bound statement waited about 5 ms at each of those turns,
69-89 ms in all beside a 50 MB UPDATE (tests/e2e/test_limits.py, planned_write[update], over
the 100 ms bound in a loaded CI run). At 0.5 ms the same bystander waited 22-33 ms, and the UPDATE
itself took as long (2.07-2.37 s vs 2.10-2.45 s; 2026-12-06, 2-core machine).

Only the process's own entry point applies it (the CLI); ICEGRES_GIL_SWITCH_INTERVAL_MS sets
another value.
"""

from __future__ import annotations

import os
import sys

DEFAULT_MS = 0.5


def configure() -> None:
    """Set this process's switch interval (ICEGRES_GIL_SWITCH_INTERVAL_MS, else DEFAULT_MS)."""
    text = os.environ.get("ICEGRES_GIL_SWITCH_INTERVAL_MS")
    try:
        ms = float(text) if text else DEFAULT_MS
    except ValueError:
        ms = DEFAULT_MS
    if ms > 0:
        sys.setswitchinterval(ms / 1000)
