"""The server's collector settings after start-up (in a child process: they are process-wide)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_settle_freezes_the_survivors_and_raises_the_young_threshold():
    code = (
        "import gc\n"
        "from icegres import collector\n"
        "assert gc.get_freeze_count() == 0\n"
        "middle, old = gc.get_threshold()[1:]\n"
        "collector.settle()\n"
        "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n"
        "assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, middle, old)\n"
        "assert gc.isenabled()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
