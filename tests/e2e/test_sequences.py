"""Sequences, serial and identity columns (issue 29): statement by statement against PostgreSQL 15
(values, tags, SQLSTATEs, messages); then what PostgreSQL cannot be compared on — several icegres
servers on one catalog drawing from one sequence at once, a server SIGKILLed while it holds a
block, and the same race on SeaweedFS's REST catalog — where no value may ever be handed out
twice."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.differential import outcome as _run
from tests.support.fixtures import real_postgres  # noqa: F401  (session fixture)
from tests.support.icegres_server import IcegresServer, running_icegres
from tests.support.stack_fixtures import stack  # noqa: F401  (session fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def icegres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IcegresServer]:
    with running_icegres(tmp_path_factory.mktemp("sequences") / "lake") as srv:
        yield srv


def _play(icegres: IcegresServer, postgres: Any, script: str, exact: bool = True) -> None:
    with psycopg.connect(postgres.dsn(), autocommit=True) as pg, psycopg.connect(icegres.dsn(), autocommit=True) as ig:
        _run(pg, "drop schema if exists sq cascade")
        _run(ig, "drop table if exists sq.t, sq.g, sq.d")
        for name in ("s", "d", "c", "t_id_seq", "g_id_seq", "d_id_seq"):
            _run(ig, f"drop sequence if exists sq.{name}")
        for conn in (pg, ig):
            assert _run(conn, "create schema if not exists sq")[0] == "ok"
            assert _run(conn, "set search_path = sq, public")[0] == "ok"
        for sql in (s.strip() for s in script.strip().splitlines() if s.strip()):
            theirs, ours = _run(pg, sql), _run(ig, sql)
            if not exact and theirs[0] == ours[0] == "error":
                theirs, ours = theirs[:2], ours[:2]
            assert ours == theirs, f"{sql}\n  postgres: {theirs}\n  icegres:  {ours}"


def test_sequences_answer_as_postgresql_answers(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    _play(icegres, real_postgres, """
        create sequence s
        select nextval('s'), nextval('s'), nextval('sq.s'::regclass)
        select currval('s'), lastval()
        select setval('s', 100)
        select nextval('s')
        select setval('s', 7, false)
        select nextval('s'), nextval('s')
        select currval('s')
        create sequence s
        create sequence if not exists s
        create sequence d increment by -3 start 10 minvalue 0 maxvalue 10
        select nextval('d'), nextval('d'), nextval('d'), nextval('d')
        select nextval('d')
        create sequence c minvalue 1 maxvalue 3 cycle
        select nextval('c'), nextval('c'), nextval('c'), nextval('c'), nextval('c')
        alter sequence s restart with 1000
        select nextval('s')
        alter sequence s restart
        select nextval('s')
        select nextval('nope')
        select currval('d')
        select setval('s', 0)
        create table t (id serial, v text)
        select nextval('t')
        insert into s values (1)
        drop table s
        drop sequence d, c
        drop sequence d
        drop sequence if exists d
        create sequence bad increment 0
        create sequence bad minvalue 10 maxvalue 5
        create sequence bad start 0
        create sequence bad as smallint maxvalue 100000
        create sequence bad cache 0
    """)


def test_serial_and_identity_columns_as_in_postgresql(icegres: IcegresServer, real_postgres: Any) -> None:  # noqa: F811
    """(A serial column's DEFAULT names its sequence with the schema, where PostgreSQL leaves out
    a schema on the search path: docs/limitations.md.)"""
    _play(icegres, real_postgres, """
        create table t (id serial primary key, v text)
        insert into t (v) values ('a'), ('b') returning id, v
        insert into t values (default, 'c') returning id
        insert into t (id, v) values (100, 'd')
        insert into t (v) select 'e' returning id
        select id, v from t order by id
        select currval('t_id_seq')
        select pg_get_serial_sequence('t', 'id')
        select column_name, replace(column_default, 'sq.', ''), is_nullable, is_identity from information_schema.columns where table_name = 't' and table_schema = 'sq' order by 1
        create table g (id bigint generated always as identity (start with 10 increment by 10), v text)
        insert into g (v) values ('x'), ('y') returning id
        insert into g (id, v) values (5, 'z')
        insert into g values (default, 'w') returning id
        update g set id = 5 where v = 'x'
        update g set id = default where v = 'x' returning id, v
        update g set v = default where id = 20 returning id, v
        select column_name, column_default, is_identity, identity_generation from information_schema.columns where table_name = 'g' and table_schema = 'sq' order by 1
        select pg_get_serial_sequence('g', 'id')
        create table d (id int generated by default as identity, v text)
        insert into d (v) values ('x')
        insert into d (id, v) values (50, 'y')
        insert into d (v) values ('z') returning id
        select id, v from d order by id
        select relname, relkind from pg_class c join pg_namespace n on n.oid = c.relnamespace where nspname = 'sq' and relkind in ('r', 'S') order by 1
        select sequence_name, start_value, increment from information_schema.sequences where sequence_schema = 'sq' order by 1
        drop sequence t_id_seq
        drop table t
        select relname from pg_class c join pg_namespace n on n.oid = c.relnamespace where nspname = 'sq' and relkind = 'S' order by 1
        create table bad (id text generated always as identity)
    """)


def _draw(dsn: str, sql: str, n: int, out: list[int], errors: list[BaseException]) -> None:
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            for _ in range(n):
                out.append(c.execute(sql).fetchone()[0])
    except BaseException as exc:  # noqa: BLE001 - reported by the caller
        errors.append(exc)


def _race(servers: list[IcegresServer], sql: str, per_client: int, clients_per_server: int = 3) -> list[int]:
    got: list[list[int]] = []
    errors: list[BaseException] = []
    threads = []
    for srv in servers:
        for _ in range(clients_per_server):
            out: list[int] = []
            got.append(out)
            threads.append(threading.Thread(target=_draw, args=(srv.dsn(), sql, per_client, out, errors)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    for out in got:
        assert out == sorted(out), "one session's values ascend"
    return [v for out in got for v in out]


def test_servers_on_one_catalog_never_hand_out_a_value_twice(tmp_path: Path) -> None:
    catalog = f"sqlite:///{tmp_path / 'a' / 'catalog.db'}"
    # Blocks of one value: every nextval is a compare-and-swap that the other server may win.
    with running_icegres(tmp_path / "a", args=("--sequence-block", "1")) as a:
        with psycopg.connect(a.dsn(), autocommit=True) as c:
            c.execute("create schema race")
            c.execute("create sequence race.s cache 5")
            c.execute("create table race.t (id bigserial, server text)")
        with running_icegres(tmp_path / "b", args=("--catalog-uri", catalog, "--sequence-block", "1")) as b:
            values = _race([a, b], "select nextval('race.s')", 60)
            assert len(values) == len(set(values)) == 360
            ids = _race([a, b], "insert into race.t (server) values ('x') returning id", 20)
            assert len(ids) == len(set(ids)) == 120
            with psycopg.connect(b.dsn(), autocommit=True) as c:
                stored = [r[0] for r in c.execute("select id from race.t").fetchall()]
            assert sorted(stored) == sorted(ids)


def test_a_server_killed_while_holding_a_block_never_repeats_a_value(tmp_path: Path) -> None:
    """Values handed out before a SIGKILL are reserved in the catalog: the restarted server (and
    another one) continue past them; the killed server's unused values are a gap."""
    data = tmp_path / "lake"
    seen: list[int] = []
    with running_icegres(data) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            c.execute("create schema k")
            c.execute("create sequence k.s")
            c.execute("create table k.t (id serial, v int)")
            seen += [c.execute("select nextval('k.s')").fetchone()[0] for _ in range(5)]
            seen += [r[0] for r in c.execute("insert into k.t (v) values (1), (2) returning id").fetchall()]
            os.kill(srv.pid, signal.SIGKILL)
    with running_icegres(data) as srv, psycopg.connect(srv.dsn(), autocommit=True) as c:
        after = [c.execute("select nextval('k.s')").fetchone()[0] for _ in range(5)]
        assert min(after) > max(seen[:5]), (seen, after)
        ids = [r[0] for r in c.execute("insert into k.t (v) values (3) returning id").fetchall()]
        assert min(ids) > max(seen[5:]), (seen, ids)
        assert sorted(r[0] for r in c.execute("select id from k.t").fetchall()) == sorted(seen[5:] + ids)


def test_the_race_on_the_rest_catalog(stack: Any, tmp_path: Path) -> None:  # noqa: F811
    """SeaweedFS's Iceberg REST catalog: the swap is its commit's requirement."""
    schema = f"seq_{uuid.uuid4().hex[:8]}"
    one = ("--sequence-block", "1")
    with running_icegres(tmp_path / "a", env=stack.env(), args=one) as a, \
            running_icegres(tmp_path / "b", env=stack.env(), args=one) as b:
        with psycopg.connect(a.dsn(), autocommit=True) as c:
            c.execute(f"create schema {schema}")
            c.execute(f"create sequence {schema}.s")
        values = _race([a, b], f"select nextval('{schema}.s')", 25, clients_per_server=2)
        assert len(values) == len(set(values)) == 100
        with psycopg.connect(b.dsn(), autocommit=True) as c:
            c.execute(f"drop sequence {schema}.s")
            c.execute(f"drop schema {schema}")


def test_flight_sql_writes_take_the_sequence(tmp_path: Path) -> None:
    """Over Flight SQL too: nextval in a query, a serial column left out of executemany's INSERT
    and of a bulk ingest (its DEFAULT fills it), GENERATED ALWAYS refused a value."""
    import adbc_driver_flightsql.dbapi as adbc
    import pyarrow as pa

    with running_icegres(tmp_path / "lake", args=("--flight-port", "0")) as srv:
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            c.execute("create schema f")
            c.execute("create sequence f.s")
            c.execute("create table f.t (id serial, v text, n int default 7)")
            c.execute("create table f.g (id int generated always as identity, v text)")
        with adbc.connect(f"grpc://127.0.0.1:{srv.flight_port}", autocommit=True) as f, f.cursor() as cur:
            cur.execute("select nextval('f.s'), nextval('f.s')")
            assert cur.fetchall() == [(1, 2)]
            cur.executemany("insert into f.t (v) values (?)", [("a",), ("b",)])
            cur.adbc_ingest("t", pa.table({"v": pa.array(["c"])}), mode="append", db_schema_name="f")
            cur.execute("select id, v, n from f.t order by id")
            assert cur.fetchall() == [(1, "a", 7), (2, "b", 7), (3, "c", 7)]
            with pytest.raises(Exception, match="428C9|non-DEFAULT"):
                cur.executemany("insert into f.g (id, v) values (?, ?)", [(5, "x")])
