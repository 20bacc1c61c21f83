"""What tests measure of a server process and its children (its execution processes)."""

from __future__ import annotations

import psutil


def tree_rss_mb(pid: int) -> float:
    """RSS in MiB of `pid` and its child processes (the execution processes)."""
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20
