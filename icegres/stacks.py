"""Thread stacks deep enough for DataFusion's casts of long strings.

arrow-rs parses a string cast to a number recursively over its characters: casting a 5 MB string
to numeric overflowed an 8 MB stack and killed the whole process with SIGSEGV (`select
repeat('1', 5000000)::numeric(38,2)`, or the same cast over a long value in a table), where a
bigger stack gets the cast's ordinary error. The stack a cast needs is about three bytes per
character of the string, so every thread that can run DataFusion gets 4 GB of stack (strings up
to about 1.4 GB; PostgreSQL's own limit for a value is 1 GB, as icegres's for repeat/lpad/rpad,
and a pgwire message's here is 256 MB): Python's threads (worker threads, threading.stack_size)
and the Rust runtime's (tokio's workers and blocking threads read RUST_MIN_STACK when they
start). It is address space, not memory: a stack's pages are only touched as deep as a call
goes. (256 MB stacks, before, left a 100 MB string's cast a SIGSEGV.)
"""

from __future__ import annotations

import os
import threading

STACK_BYTES = 4 << 30


def stack_bytes() -> int:
    """STACK_BYTES, or a quarter of the machine's memory where that is less: Linux refuses (under
    its default overcommit heuristic) one mapping larger than the memory and swap, so a thread
    could not start at all; and such a machine cannot hold the string that would need more."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 256 << 20
    return max(256 << 20, min(STACK_BYTES, memory // 4))


def deep_stacks() -> None:
    """Give every thread started from now on a deep stack; before DataFusion starts its runtime."""
    size = stack_bytes()
    os.environ.setdefault("RUST_MIN_STACK", str(size))
    threading.stack_size(size)
