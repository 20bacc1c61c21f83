"""The authorization document's store (issue 31) against real catalogs: two AclStores, each with its
own catalog connection as two icegres servers have, change one counter document at once — 200
increments, each exactly once — on the SQLite catalog, the SQL catalog on a real PostgreSQL, and
SeaweedFS's Iceberg REST catalog; a 200 KB document round-trips on each; the store's table keeps
its metadata small."""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from icegres import config
from icegres.engine.acl_store import AclStore, IcebergAcl, new_change_id
from icegres.engine.catalog import Lakehouse
from icegres.engine.internal import AUTH_NAMESPACE, INTERNAL_NAMESPACES
from icegres.machines.acl import Config
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.stack_fixtures import stack  # noqa: F401  (session fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

INCREMENTS = 200


def _increment(document: str) -> str:
    counter = json.loads(document) if document else {"n": 0}
    return json.dumps({**counter, "n": counter["n"] + 1})


def _race(one: AclStore, two: AclStore) -> list[str]:
    """INCREMENTS changes, half through each store, all started at once; the documents they wrote."""
    written: list[str] = []

    async def change(store: AclStore) -> None:
        written.append(await store.change(new_change_id(), _increment))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for n in range(INCREMENTS):
                nursery.start_soon(change, (one, two)[n % 2])

    trio.run(main)
    return written


def _check(one: Lakehouse, two: Lakehouse, table: str) -> None:
    # Each store sends one change at a time and the two race 100 each: on a loaded machine one
    # store's run of wins outlasted the other's 32 lost swaps (40001, once in a CI run). What this
    # checks is that every change lands once, in a serial order; giving up after max_conflicts
    # is the model test's (tests/model/test_acl.py, "conflicts-exhausted").
    patient = Config(max_conflicts=INCREMENTS)
    a, b = AclStore(one, table=table, config=patient), AclStore(two, table=table, config=patient)
    assert a.read() == (None, "")
    written = _race(a, b)
    version, document = b.read()
    assert version is not None and json.loads(document) == {"n": INCREMENTS}
    # Each change wrote a document of its own: the counter took every value from 1 to 200 once.
    assert sorted(json.loads(d)["n"] for d in written) == list(range(1, INCREMENTS + 1))
    record = IcebergAcl(one, table).read()
    assert record.count == INCREMENTS and len(record.applied) == 64
    # The store's table holds the current record and its parent only, however many swaps.
    loaded = one.load_table(AUTH_NAMESPACE, table)
    assert len(loaded.metadata.snapshots) <= 2 and len(loaded.metadata.metadata_log) <= 2

    big = "x" * 200_000 + 'é\n"\\✓\u0000'  # any text survives the summary, escapes and all
    wrote = trio.run(a.change, new_change_id(), lambda doc: json.dumps({**json.loads(doc), "pad": big}))
    assert b.read() == (IcebergAcl(two, table).read().version, wrote)
    assert len(wrote) > 200_000 and json.loads(b.read()[1])["n"] == INCREMENTS
    after = trio.run(b.change, new_change_id(), _increment)
    assert json.loads(after) == {"n": INCREMENTS + 1, "pad": big}

    # Internal: listed nowhere the engine looks.
    for lakehouse in (one, two):
        listing = lakehouse.listing()
        assert not INTERNAL_NAMESPACES & set(listing.namespaces), listing.namespaces
        assert not any(t.namespace in INTERNAL_NAMESPACES for t in listing.tables)
        assert (AUTH_NAMESPACE, table) in {(t.namespace, t.name) for t in lakehouse.listing(internal=True).tables}


def test_two_stores_on_one_sqlite_catalog(tmp_path: Path) -> None:
    _check(Lakehouse.embedded(tmp_path), Lakehouse.embedded(tmp_path), "acl")
    # Each swap's leftovers are collected: the metadata files off the log, the manifest lists of
    # removed snapshots and of swaps that lost a race. (A lost race on a SQL catalog still leaves
    # the metadata file the commit wrote before its compare-and-set failed.)
    metadata = tmp_path / "warehouse" / AUTH_NAMESPACE / "acl" / "metadata"
    assert len(list(metadata.glob("*.avro"))) == 2, sorted(metadata.iterdir())
    table = Lakehouse.embedded(tmp_path).load_table(AUTH_NAMESPACE, "acl")
    kept = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
    assert {Path(k.removeprefix("file://")).name for k in kept} <= {p.name for p in metadata.glob("*.json")}


def _create_at_once(one: Lakehouse, two: Lakehouse, table: str) -> list[str]:
    """Two servers' first changes create the store's table at the same moment: both changes land,
    on one table. What each create answered."""
    barrier = threading.Barrier(2, timeout=30)
    created: list[str] = []

    def racing(lakehouse: Lakehouse) -> None:
        original = lakehouse.create_table

        def create_table(*args: Any, **kwargs: Any) -> Any:
            barrier.wait()  # both read an absent store and are creating it
            try:
                result = original(*args, **kwargs)
            except Exception as exc:
                created.append(type(exc).__name__)
                raise
            created.append("created")
            return result
        lakehouse.create_table = create_table  # type: ignore[method-assign]

    racing(one)
    racing(two)
    a, b = AclStore(one, table=table), AclStore(two, table=table)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.change, "from-a", lambda doc: json.dumps(sorted([*json.loads(doc or "[]"), "a"])))
            nursery.start_soon(b.change, "from-b", lambda doc: json.dumps(sorted([*json.loads(doc or "[]"), "b"])))

    trio.run(main)
    assert len(created) == 2, created
    assert json.loads(a.read()[1]) == ["a", "b"] and IcebergAcl(two, table).read().count == 2
    return created


def test_two_servers_create_the_store_at_once_on_sqlite(tmp_path: Path) -> None:
    created = _create_at_once(Lakehouse.embedded(tmp_path), Lakehouse.embedded(tmp_path), "acl")
    assert sorted(created) == ["TableAlreadyExistsError", "created"], created


def test_two_servers_create_the_store_at_once_on_rest(stack: Any) -> None:  # noqa: F811
    """SeaweedFS lets both createTables succeed (10 runs of 10 here; with AssertCreate in a create
    transaction, 3 of 8), the later overwriting the earlier: with the first record in the create's
    commit, those 3 runs lost an acknowledged change. Created empty, nothing is lost."""
    settings = config.resolve({}, environ=stack.env())
    answers = [_create_at_once(Lakehouse.from_settings(settings), Lakehouse.from_settings(settings),
                               f"acl_{uuid.uuid4().hex[:8]}") for _ in range(6)]
    assert all(a.count("created") >= 1 for a in answers), answers


def test_two_stores_on_one_postgres_sql_catalog(real_postgres: Any, tmp_path: Path) -> None:  # noqa: F811
    db = f"aclcat_{os.getpid()}"
    with psycopg.connect(real_postgres.dsn(), autocommit=True) as admin:
        admin.execute(f"drop database if exists {db}")
        admin.execute(f"create database {db}")
    environ = {"ICEGRES_CATALOG_URI": f"postgresql://{real_postgres.user}@{real_postgres.host}:{real_postgres.port}/{db}",
               "ICEGRES_WAREHOUSE": (tmp_path / "warehouse").as_uri(), "ICEGRES_DATA_DIR": str(tmp_path)}
    settings = config.resolve({}, environ=environ)
    _check(Lakehouse.from_settings(settings), Lakehouse.from_settings(settings), "acl")


def test_two_stores_on_one_rest_catalog(stack: Any) -> None:  # noqa: F811
    """SeaweedFS's Iceberg REST catalog: the swap is its commit's requirement."""
    settings = config.resolve({}, environ=stack.env())
    _check(Lakehouse.from_settings(settings), Lakehouse.from_settings(settings), f"acl_{uuid.uuid4().hex[:8]}")
