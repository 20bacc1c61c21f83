"""Shared pytest fixtures. Import the ones a conftest needs: `from tests.support.fixtures import real_postgres`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import PostgresServer, running_postgres


@pytest.fixture(scope="session")
def real_postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL 15 for the whole session; fails (never skips) if it cannot start."""
    with running_postgres() as server:
        yield server
