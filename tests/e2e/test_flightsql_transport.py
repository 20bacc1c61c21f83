"""Flight SQL transport and the remaining metadata, with three independent clients.

The ADBC driver (Go), pyarrow.flight (C++) speaking raw Flight SQL with commands built from our
protobuf modules, and our own grpclib client read the same results: plain, with ZSTD-compressed
IPC bodies (--result-compression zstd), and over TLS (grpc+tls://, a self-signed certificate made
here). Keys, XDBC type info and SQL capabilities are read through pyarrow.flight, whose schemas are
compared with the reference ones exactly.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as paflight
import pytest

from icegres.protocol.flightsql import icegres_flight_pb2 as fl
from icegres.protocol.flightsql import icegres_flight_sql_metadata_pb2 as meta
from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
from icegres.protocol.flightsql import messages as M
from icegres.protocol.flightsql import metadata
from icegres.protocol.flightsql.client import FlightSqlClient
from tests.e2e.test_flightsql import flight_server
from tests.support.icegres_server import seed_data_dir
from tests.support.tls import self_signed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TLS_ROOTS = "adbc.flight.sql.client_option.tls_root_certs"
QUERIES = (
    "select * from demo.trips",
    "select id, city, fare, pickup_ts from demo.trips where id between 1000 and 1999 order by id",
    "select city, count(*) as n, sum(passengers) as riders from demo.trips group by city order by city",
)


def _host_port(uri: str) -> tuple[str, int]:
    host, port = uri.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def adbc_read(uri: str, query: str, db_kwargs: dict[str, str] | None = None) -> pa.Table:
    with adbc.connect(uri, db_kwargs=db_kwargs, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(query)
        return cur.fetch_arrow_table()


def pyarrow_command(client: paflight.FlightClient, command: object) -> pa.Table:
    """Raw Flight SQL through pyarrow's C++ client: the Any-wrapped command built by hand."""
    info = client.get_flight_info(paflight.FlightDescriptor.for_command(M.pack_any(command)))
    tables = [client.do_get(endpoint.ticket).read_all() for endpoint in info.endpoints]
    for table in tables:
        assert table.schema.equals(info.schema)
    return pa.concat_tables(tables) if tables else info.schema.empty_table()


def grpclib_read(uri: str, query: str, tls_root_certs: str | None = None) -> pa.Table:
    async def read() -> pa.Table:
        async with FlightSqlClient(*_host_port(uri), tls_root_certs=tls_root_certs) as client:
            return await asyncio.wait_for(client.query(query), 60)

    return asyncio.run(read())


def grpclib_body_bytes(uri: str, query: str) -> int:
    """The IPC body bytes of a query's DoGet stream, as they travel."""
    async def read() -> int:
        async with FlightSqlClient(*_host_port(uri)) as client:
            info = await client.flight_info(sql.CommandStatementQuery(query=query))
            frames = await client._stream("DoGet", fl.Ticket(ticket=info.endpoint[0].ticket.ticket), fl.FlightData)
            return sum(len(f.data_body) for f in frames)

    return asyncio.run(asyncio.wait_for(read(), 60))


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema.equals(b.schema), (a.schema, b.schema)
    assert a.num_rows == b.num_rows
    if "id" in a.column_names:  # `select *` streams files in parallel: the order is not fixed
        a, b = a.sort_by("id"), b.sort_by("id")
    assert a.combine_chunks().equals(b.combine_chunks())


@pytest.fixture(scope="module")
def plain(seeded_dir: Path) -> Iterator[str]:
    with flight_server(seeded_dir) as (uri, _, _, _):
        yield uri


@pytest.fixture(scope="module")
def zstd(seeded_dir: Path) -> Iterator[str]:
    with flight_server(seeded_dir, "--result-compression", "zstd") as (uri, _, _, _):
        yield uri


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls(seeded_dir: Path, certificate: tuple[Path, Path]) -> Iterator[tuple[str, str]]:
    cert, key = certificate
    with flight_server(seeded_dir, "--tls-cert", str(cert), "--tls-key", str(key)) as (uri, _, log, _):
        assert "grpc+tls://" in log.read_text(errors="replace")
        yield uri.replace("grpc://", "grpc+tls://"), cert.read_text()


# --- three clients, one answer -------------------------------------------------------------------

def test_adbc_pyarrow_flight_and_grpclib_read_the_same_results(plain):
    client = paflight.FlightClient(plain)
    try:
        for query in QUERIES:
            want = adbc_read(plain, query)
            _same(pyarrow_command(client, sql.CommandStatementQuery(query=query)), want)
            _same(grpclib_read(plain, query), want)
        full = adbc_read(plain, QUERIES[0])
        assert full.num_rows == 1_000_000 and pc.sum(full["id"]).as_py() == 1_000_000 * 1_000_001 // 2
    finally:
        client.close()


def test_grpclib_prepared_statement_round_trip(plain):
    async def run() -> pa.Table:
        async with FlightSqlClient(*_host_port(plain)) as client:
            return await client.prepared_query("select id, city from demo.trips where id = 77")

    table = asyncio.run(asyncio.wait_for(run(), 60))
    assert table.to_pylist() == adbc_read(plain, "select id, city from demo.trips where id = 77").to_pylist()


# --- ZSTD result bodies ---------------------------------------------------------------------------

def test_zstd_results_decode_in_every_client_and_are_smaller(plain, zstd):
    query = QUERIES[0]
    want = adbc_read(plain, query)
    _same(adbc_read(zstd, query), want)
    client = paflight.FlightClient(zstd)
    try:
        _same(pyarrow_command(client, sql.CommandStatementQuery(query=query)), want)
    finally:
        client.close()
    _same(grpclib_read(zstd, query), want)
    compressed, uncompressed = grpclib_body_bytes(zstd, query), grpclib_body_bytes(plain, query)
    assert compressed < 0.8 * uncompressed, (compressed, uncompressed)
    # Metadata results stay plain and still decode.
    with adbc.connect(zstd, autocommit=True) as conn:
        assert conn.adbc_get_info()["vendor_name"] == "icegres"


# --- TLS -----------------------------------------------------------------------------------------

def test_tls_serves_adbc_pyarrow_flight_and_grpclib(tls, plain):
    uri, pem = tls
    query = QUERIES[1]
    want = adbc_read(plain, query)
    _same(adbc_read(uri, query, {TLS_ROOTS: pem}), want)
    client = paflight.FlightClient(uri, tls_root_certs=pem.encode())
    try:
        _same(pyarrow_command(client, sql.CommandStatementQuery(query=query)), want)
    finally:
        client.close()
    _same(grpclib_read(uri, query, tls_root_certs=pem), want)


def test_plaintext_and_untrusting_clients_fail_clearly_against_tls(tls):
    uri, pem = tls
    plaintext = uri.replace("grpc+tls://", "grpc://")
    with pytest.raises(adbc_driver_manager.OperationalError, match="(?i)unavailable"):
        adbc_read(plaintext, "select 1")
    # Without the root certificate the self-signed server is not trusted.
    with pytest.raises(adbc_driver_manager.OperationalError, match="(?i)certificate|x509|unavailable"):
        adbc_read(uri, "select 1")
    # The server survives both and still serves a trusting client.
    assert adbc_read(uri, "select 42 as x", {TLS_ROOTS: pem}).to_pylist() == [{"x": 42}]


def test_serve_with_flight_port_and_tls(seeded_dir, certificate):
    cert, key = certificate
    args = ("--tls-cert", str(cert), "--tls-key", str(key), "--result-compression", "zstd")
    with flight_server(seeded_dir, *args, command="serve") as (uri, _, _, pg_port):
        tls_uri = uri.replace("grpc://", "grpc+tls://")
        got = adbc_read(tls_uri, "select count(*) as n from demo.cities", {TLS_ROOTS: cert.read_text()})
        assert got.to_pylist() == [{"n": 20}]
        with psycopg.connect(f"host=127.0.0.1 port={pg_port} dbname=icegres user=icegres") as pg:
            assert pg.execute("select count(*) from demo.cities").fetchone() == (20,)


@pytest.mark.parametrize("args, message", [
    (("--tls-cert", "only.pem"), "--tls-cert and --tls-key go together"),
    (("--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"), "no such file"),
    (("--result-compression", "gzip"), "--result-compression must be one of none, zstd"),
])
def test_bad_transport_options_stop_start_up_with_one_line(seeded_dir, args, message):
    done = subprocess.run([sys.executable, "-m", "icegres", "flight-serve", "--data-dir", str(seeded_dir),
                           "--port", "0", *args],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr


# --- metadata: keys, XDBC types, SQL info, session options ---------------------------------------

@pytest.fixture(scope="module")
def small_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("pklake") / "data"
    seed_data_dir(data_dir, rows=1000)
    return data_dir


def test_primary_keys_foreign_keys_and_type_info(small_lake):
    with flight_server(small_lake, command="serve") as (uri, _, _, pg_port):
        with psycopg.connect(f"host=127.0.0.1 port={pg_port} dbname=icegres user=icegres",
                             autocommit=True) as pg:
            pg.execute("create table demo.keyed (region text, id bigint, v text, primary key (region, id))")
        client = paflight.FlightClient(uri)
        try:
            command = meta.CommandGetPrimaryKeys(db_schema="demo", table="keyed")
            deadline = time.monotonic() + 20
            while (keys := pyarrow_command(client, command)).num_rows == 0:
                assert time.monotonic() < deadline, "the new table's key never showed up"
                time.sleep(0.2)
            assert keys.schema.equals(metadata.PRIMARY_KEYS_SCHEMA)
            assert keys.to_pylist() == [
                {"catalog_name": "icegres", "db_schema_name": "demo", "table_name": "keyed",
                 "column_name": "region", "key_sequence": 1, "key_name": "keyed_pkey"},
                {"catalog_name": "icegres", "db_schema_name": "demo", "table_name": "keyed",
                 "column_name": "id", "key_sequence": 2, "key_name": "keyed_pkey"},
            ]
            assert pyarrow_command(client, meta.CommandGetPrimaryKeys(db_schema="demo", table="trips")).num_rows == 0
            assert pyarrow_command(client, meta.CommandGetPrimaryKeys(catalog="x", table="keyed")).num_rows == 0
            for command in (meta.CommandGetExportedKeys(db_schema="demo", table="keyed"),
                            meta.CommandGetImportedKeys(table="keyed"),
                            meta.CommandGetCrossReference(pk_table="keyed", fk_table="trips")):
                got = pyarrow_command(client, command)
                assert got.schema.equals(metadata.KEYS_SCHEMA) and got.num_rows == 0
            types = pyarrow_command(client, meta.CommandGetXdbcTypeInfo())
            assert types.schema.equals(metadata.XDBC_TYPE_INFO_SCHEMA)
            assert {"bigint", "text", "numeric", "timestamp with time zone"} <= set(types["type_name"].to_pylist())
            varchar = pyarrow_command(client, meta.CommandGetXdbcTypeInfo(data_type=12))
            assert sorted(varchar["type_name"].to_pylist()) == ["text", "varchar"]
            # GetSchema of a metadata command answers the same schema without running it.
            schema = client.get_schema(paflight.FlightDescriptor.for_command(M.pack_any(command))).schema
            assert schema.equals(metadata.KEYS_SCHEMA)
        finally:
            client.close()


def test_sql_info_capabilities_and_session_options(plain):
    client = paflight.FlightClient(plain)
    try:
        info = pyarrow_command(client, sql.CommandGetSqlInfo(info=[0, 8, 503, 504, 509, 510, 528, 529]))
        assert info.schema.equals(M.SQL_INFO_SCHEMA)
        values = dict(zip(info["info_name"].to_pylist(), info["value"].to_pylist(), strict=True))
        assert values[0] == "icegres" and values[504] == '"' and values[529] == "schema"
        assert "abs" in values[509] and "upper" in values[510]
        everything = pyarrow_command(client, sql.CommandGetSqlInfo())
        assert set(metadata.SQL_CAPABILITIES) <= set(everything["info_name"].to_pylist())
    finally:
        client.close()
    with adbc.connect(plain, autocommit=True) as conn:
        assert conn.adbc_get_info()["vendor_name"] == "icegres"
        # GetSessionOptions / SetSessionOptions: the keys the driver reads and sets.
        assert (conn.adbc_current_catalog, conn.adbc_current_db_schema) == ("icegres", "public")
        conn.adbc_connection.set_options(**{"adbc.connection.db_schema": "demo"})
        assert conn.adbc_current_db_schema == "demo"
        with pytest.raises(adbc_driver_manager.Error):
            conn.adbc_connection.set_options(**{"adbc.connection.db_schema": "no_such_schema"})
        assert conn.adbc_current_db_schema == "demo"
        conn.adbc_connection.set_options(**{"adbc.connection.catalog": "icegres"})
        with pytest.raises(adbc_driver_manager.Error):
            conn.adbc_connection.set_options(**{"adbc.connection.catalog": "elsewhere"})
        assert (conn.adbc_current_catalog, conn.adbc_current_db_schema) == ("icegres", "demo")
