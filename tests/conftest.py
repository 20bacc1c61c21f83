from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (shared fixture)
from tests.support.icegres_server import IcegresServer, running_icegres, seed_data_dir
from tests.support.stack_fixtures import stack  # noqa: F401  (shared fixture)


@pytest.fixture(scope="session")
def seeded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One seeded demo lakehouse (1M trips + cities) shared read-only by e2e tests."""
    data_dir = tmp_path_factory.mktemp("lake") / "data"
    seed_data_dir(data_dir)
    return data_dir


@pytest.fixture(scope="session", params=["embedded", "seaweedfs"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    """A real `icegres serve` over the seeded demo lakehouse, trust auth on loopback.

    Every client test runs twice: on the embedded default (SQLite catalog, local files) and on the
    real stack (SeaweedFS's Iceberg REST catalog with SigV4, Parquet on its S3).
    """
    if request.param == "embedded":
        data_dir = request.getfixturevalue("seeded_dir")
        with running_icegres(data_dir) as srv:
            yield srv
        return
    lake_stack = request.getfixturevalue("stack")
    data_dir = tmp_path_factory.mktemp("stacklake")
    env = lake_stack.env()
    subprocess.run([sys.executable, "-m", "icegres", "seed", "--data-dir", str(data_dir)], check=True,
                   timeout=600, env={**__import__("os").environ, **env}, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL)
    with running_icegres(data_dir, env=env) as srv:
        yield srv
