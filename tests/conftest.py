from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fixtures import real_postgres  # noqa: F401  (shared fixture)
from tests.support.icegres_server import IcegresServer, running_icegres, seed_data_dir


@pytest.fixture(scope="session")
def seeded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One seeded demo lakehouse (1M trips + cities) shared read-only by e2e tests."""
    data_dir = tmp_path_factory.mktemp("lake") / "data"
    seed_data_dir(data_dir)
    return data_dir


@pytest.fixture(scope="session")
def server(seeded_dir: Path) -> Iterator[IcegresServer]:
    """A real `icegres serve` over the seeded lakehouse, trust auth on loopback."""
    with running_icegres(seeded_dir) as srv:
        yield srv
