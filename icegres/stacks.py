"""Thread stacks deep enough for DataFusion's casts of long strings.

arrow-rs parses a string cast to a number recursively over its characters: casting a 5 MB string
to numeric overflowed an 8 MB stack and killed the whole process with SIGSEGV (`select
repeat('1', 5000000)::numeric(38,2)`, or the same cast over a long value in a table), where a
bigger stack gets the cast's ordinary error. The stack a cast needs is about three bytes per
character of the string, so every thread that can run DataFusion gets 256 MB of stack (strings up
to about 80 MB; PostgreSQL's own limit for a value is 1 GB): Python's threads (worker threads,
threading.stack_size) and the Rust runtime's (tokio's workers and blocking threads read
RUST_MIN_STACK when they start). It is address space, not memory: a stack's pages are only
touched as deep as a call goes.
"""

from __future__ import annotations

import os
import threading

STACK_BYTES = 256 << 20


def deep_stacks() -> None:
    """Give every thread started from now on a deep stack; before DataFusion starts its runtime."""
    os.environ.setdefault("RUST_MIN_STACK", str(STACK_BYTES))
    threading.stack_size(STACK_BYTES)
