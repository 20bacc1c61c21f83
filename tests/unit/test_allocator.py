"""The allocator defaults the CLI applies before DataFusion loads."""

from __future__ import annotations

import os
import subprocess
import sys

from icegres import allocator


def test_defaults_fill_only_what_the_environment_lacks():
    env: dict[str, str] = {}
    allocator.configure(env)
    assert env == {"MIMALLOC_PURGE_DELAY": "10000"}
    mine = {"MIMALLOC_PURGE_DELAY": "-1"}
    allocator.configure(mine)
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
