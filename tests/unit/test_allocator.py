"""The allocator defaults the CLI applies before DataFusion loads."""

from __future__ import annotations

import os
import subprocess
import sys

from icegres import allocator


def test_defaults_fill_only_what_the_environment_lacks():
    env: dict[str, str] = {}
    allocator.set_defaults(env)
    assert env == {"MIMALLOC_PURGE_DELAY": "10000"}
    mine = {"MIMALLOC_PURGE_DELAY": "-1"}
    allocator.set_defaults(mine)
    assert mine == {"MIMALLOC_PURGE_DELAY": "-1"}


def test_the_cli_sets_them_before_any_command_loads_datafusion():
    # mimalloc reads its options when the native library loads: too late once datafusion is in.
    probe = (
        "import os, sys\n"
        "from icegres import cli\n"
        "assert 'datafusion' not in sys.modules\n"
        "try:\n"
        "    cli.main(['keeper'])\n"  # parses, then refuses: no --port
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ.get('MIMALLOC_PURGE_DELAY'), 'datafusion' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["10000", "False"]


def _thp_enabled(status: str) -> str | None:
    line = next((x for x in status.splitlines() if x.startswith("THP_enabled:")), None)
    return None if line is None else line.split()[1]


def test_the_cli_opts_its_process_and_children_out_of_transparent_huge_pages():
    """mimalloc's arenas are advised huge pages; faulting one in zeroes 2 MB inside a call that
    holds the GIL (allocator.py). The opt-out is inherited by the processes the server starts
    (the executor), and ICEGRES_HUGE_PAGES=1 keeps the kernel's policy."""
    if _thp_enabled(open("/proc/self/status").read()) is None:
        import pytest

        pytest.skip("this kernel's /proc/PID/status does not report THP_enabled")
    probe = (
        "import subprocess, sys\n"
        "from icegres import cli\n"
        "try:\n"
        "    cli.main(['keeper'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(open('/proc/self/status').read().split('THP_enabled:')[1].split()[0])\n"
        "child = subprocess.run(['cat', '/proc/self/status'], capture_output=True, text=True).stdout\n"
        "print(child.split('THP_enabled:')[1].split()[0])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ICEGRES_HUGE_PAGES"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["0", "0"]
    kept = subprocess.run([sys.executable, "-c", probe], env={**env, "ICEGRES_HUGE_PAGES": "1"},
                          capture_output=True, text=True, timeout=60, check=True)
    assert kept.stdout.split() == ["1", "1"]
