"""Client tools the e2e tests drive for real, each in a virtualenv of its own.

`infra/tool-venv.sh NAME` installs the pinned list infra/tools/NAME.txt into .tools/NAME (quick
when it is there already), so a tool's dependencies never meet the project's. `tool_venv(NAME)`
runs it and returns the venv.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_INSTALL_TIMEOUT_S = 600


def tool_venv(name: str) -> Path:
    """The venv tool `name` is installed in, installing it first if it is missing or stale."""
    proc = subprocess.run(
        ["bash", str(REPO / "infra" / "tool-venv.sh"), name], capture_output=True, text=True,
        timeout=_INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL,
        env={**os.environ, "ICEGRES_TOOL_PYTHON": os.environ.get("ICEGRES_TOOL_PYTHON", sys.executable)},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"installing {name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])
