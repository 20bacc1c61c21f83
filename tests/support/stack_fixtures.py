"""Pytest fixture for the real lakehouse stack. Import it where needed:
`from tests.support.stack_fixtures import stack  # noqa: F401`.

Set ICEGRES_KEEP_STACK=1 to keep the state dir (logs, data) after the session for inspection.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.stack import Stack, running_stack


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    """One SeaweedFS + PostgreSQL 15 stack for the whole session; fails (never skips) if it can't start."""
    # Not under pytest's tmp dir: its parents are private to root, and PostgreSQL runs as the
    # `postgres` OS user, which must be able to reach its data directory.
    state_dir = Path(tempfile.mkdtemp(prefix="icegres-stack-"))
    os.chmod(state_dir, 0o711)
    try:
        with running_stack(state_dir) as s:
            yield s
    finally:
        if os.environ.get("ICEGRES_KEEP_STACK") != "1":
            shutil.rmtree(state_dir, ignore_errors=True)
