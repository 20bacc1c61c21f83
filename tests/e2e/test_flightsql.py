"""Arrow Flight SQL with the real ADBC driver (adbc_driver_flightsql.dbapi, Go inside).

Every call here is one FLIGHT.md records the driver making; the servers are real `icegres
flight-serve` / `icegres serve --flight-port` processes over the seeded demo lakehouse.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import adbc_driver_flightsql as flightsql
import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tests.e2e import expected
from tests.support.icegres_server import start_icegres, stop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

USERS = "alice:wonder land"


class FlightProcess(NamedTuple):
    uri: str
    pid: int
    log_path: Path
    pg_port: int | None  # `serve` only: its Postgres wire port


@contextlib.contextmanager
def flight_server(data_dir: Path, *args: str, env: dict[str, str] | None = None,
                  command: str = "flight-serve") -> Iterator[FlightProcess]:
    """A running `icegres <command>` on loopback ports of the kernel's choice (`serve`: its
    Postgres wire port too); SIGTERM on exit."""
    port_args = ("--port", "0") if command == "flight-serve" else ("--port", "0", "--flight-port", "0")
    started = start_icegres([command, "--data-dir", str(data_dir), "--host", "127.0.0.1", *port_args, *args],
                            log_dir=data_dir.parent, stem="flight", env=env)
    try:
        yield FlightProcess(f"grpc://127.0.0.1:{started.ports['flight_port']}", started.proc.pid, started.log_path,
                            started.ports.get("port"))
    finally:
        stop(started.proc)


@pytest.fixture(scope="module")
def trust(seeded_dir: Path) -> Iterator[FlightProcess]:
    with flight_server(seeded_dir) as srv:
        yield srv


@pytest.fixture(scope="module")
def password(seeded_dir: Path) -> Iterator[str]:
    # Logins are refused here on purpose: the failed-login back-off (test_flight_auth_backoff.py
    # tests it) is kept to milliseconds so that it does not set the tests' pace.
    env = {"ICEGRES_USERS": USERS, "ICEGRES_AUTH_FAILURE_DELAY_MS": "10", "ICEGRES_AUTH_FAILURE_DELAY_MAX_MS": "40"}
    with flight_server(seeded_dir, env=env) as (uri, _, _, _):
        yield uri


@pytest.fixture
def conn(trust: tuple[str, int, Path]) -> Iterator[adbc.Connection]:
    with adbc.connect(trust[0], autocommit=True) as c:
        yield c


# --- connecting --------------------------------------------------------------------------------

def test_connect_without_credentials_opens_a_transaction(trust):
    # The server reports FLIGHT_SQL_SERVER_TRANSACTION = 2: the driver keeps autocommit off and
    # sends BeginTransaction, without the "falling back to autocommit" warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with adbc.connect(trust[0]) as c, c.cursor() as cur:
            cur.execute("select 1 as one")
            assert cur.fetchall() == [(1,)]
            c.rollback()
    assert not any("autocommit" in str(w.message) for w in caught)


def test_password_handshake_and_current_user(password):
    kwargs = {"username": "alice", "password": "wonder land"}
    with adbc.connect(password, db_kwargs=kwargs, autocommit=True) as c, c.cursor() as cur:
        cur.execute("select current_user, count(*) from demo.cities")
        assert cur.fetchall() == [("alice", 20)]


def test_bad_password_and_missing_credentials_are_unauthenticated(password):
    with pytest.raises(adbc_driver_manager.ProgrammingError) as exc:
        adbc.connect(password, db_kwargs={"username": "alice", "password": "nope"}, autocommit=True)
    assert "UNAUTHENTICATED" in str(exc.value) and "28P01" in str(exc.value)
    with adbc.connect(password, autocommit=True) as c, c.cursor() as cur:
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="UNAUTHENTICATED"):
            cur.execute("select 1")


def test_header_only_bearer_token(password):
    # A token from a Basic -> Bearer handshake (pyarrow's C++ Flight client, zero
    # HandshakeRequest messages), then used verbatim by ADBC without any handshake of its own.
    import pyarrow.flight

    client = pyarrow.flight.FlightClient(password)
    name, value = client.authenticate_basic_token("alice", "wonder land")
    assert name == b"authorization" and value.startswith(b"Bearer ")
    client.close()
    header = flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value
    with adbc.connect(password, db_kwargs={header: value.decode()}, autocommit=True) as c, c.cursor() as cur:
        cur.execute("select current_user")
        assert cur.fetchall() == [("alice",)]
    with adbc.connect(password, db_kwargs={header: "Bearer forged"}, autocommit=True) as c, c.cursor() as cur:
        with pytest.raises(adbc_driver_manager.ProgrammingError, match="UNAUTHENTICATED"):
            cur.execute("select 1")


# --- queries -----------------------------------------------------------------------------------

def test_select_values_types_and_rowcount(conn):
    with conn.cursor() as cur:
        cur.execute("select id, city, fare, pickup_ts, passengers, paid from demo.trips where id <= 3 order by id")
        table = cur.fetch_arrow_table()
        assert cur.rowcount == 3  # FlightInfo.total_records of a small result
    assert table.schema.types == [pa.int64(), pa.string(), pa.float64(), pa.timestamp("us", tz="UTC"),
                                  pa.int32(), pa.bool_()]
    for row in table.to_pylist():
        want = expected.trip(row["id"])
        assert row == {k: want[k] for k in row}


def test_parameters_by_doput(conn):
    with conn.cursor() as cur:
        cur.execute("select id, city from demo.trips where id = $1", parameters=(42,))
        assert cur.fetchall() == [(42, expected.trip(42)["city"])]
        # The same prepared statement with new bindings: the handle round trip of DoPut.
        cur.execute("select id, city from demo.trips where id = $1", parameters=(43,))
        assert cur.fetchall() == [(43, expected.trip(43)["city"])]
        trips = expected.trips()
        city = trips["city"][7].as_py()
        want = trips.filter(pc.and_(pc.equal(trips["city"], city), pc.greater_equal(trips["passengers"], 2)))
        cur.execute("select count(*) from demo.trips where city = $1 and passengers >= $2", parameters=(city, 2))
        assert cur.fetchall() == [(want.num_rows,)]


def test_one_million_rows(conn):
    with conn.cursor() as cur:
        cur.execute("select * from demo.trips")
        table = cur.fetch_arrow_table()
    assert table.num_rows == 1_000_000
    assert pc.sum(table["id"]).as_py() == 1_000_000 * 1_000_001 // 2
    assert table.schema.field("city").type == pa.string()


def test_errors_carry_sqlstate(conn):
    with conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.ProgrammingError) as exc:
            cur.execute("select * from demo.nope")
        assert "NOT_FOUND" in str(exc.value) and "42P01" in str(exc.value)
        with pytest.raises(adbc_driver_manager.Error) as exc:
            cur.execute("selec 1")
        assert "42601" in str(exc.value)
        with pytest.raises(adbc_driver_manager.NotSupportedError) as exc:
            # Savepoints are actions (test_flightsql_savepoints.py), not SQL text.
            cur.execute("savepoint a")
        assert "0A000" in str(exc.value)
        cur.execute("select 1")  # the connection is fine afterwards
        assert cur.fetchall() == [(1,)]


def test_cancel_stops_the_stream(trust):
    uri, _, log_path, _ = trust
    with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
        # 10^12 rows: only backpressure keeps the server from computing them all.
        cur.execute("select a.id, b.id as other from demo.trips a cross join demo.trips b")
        reader = cur.fetch_record_batch()
        assert reader.read_next_batch().num_rows > 0
        cur.adbc_cancel()
        with pytest.raises(Exception, match="(?i)cancel"):
            for _ in reader:
                pass
        cur.execute("select 42")
        assert cur.fetchall() == [(42,)]
    deadline = time.monotonic() + 10
    while "DoGet cancelled by the client" not in log_path.read_text(errors="replace"):
        assert time.monotonic() < deadline, "the server did not stop the cancelled query"
        time.sleep(0.1)


def test_a_batch_whose_string_offsets_point_past_its_data_is_refused_not_a_crash(trust):
    # Arrow's IPC reader checks that a batch's buffers fit in the message body, not what the
    # offsets in them say: such a batch read back "fine" and the first kernel to touch it read out
    # of bounds (SIGSEGV). pyarrow builds and sends it unvalidated, as any client could.
    import pyarrow.flight

    from icegres.protocol.flightsql import icegres_flight_sql_writes_pb2 as fsql
    from icegres.protocol.flightsql import messages as M

    data = pa.py_buffer(b"abcdef")
    offsets = pa.array([0, 1 << 30, 4, 6], pa.int32()).buffers()[1]  # slot 1 ends 1 GiB past 6 bytes
    bad = pa.record_batch([pa.Array.from_buffers(pa.string(), 3, [None, offsets, data])], names=["name"])
    with pytest.raises(pa.ArrowInvalid):
        bad.validate(full=True)
    client = pyarrow.flight.FlightClient(trust[0])
    ingest = fsql.CommandStatementIngest(
        table="offsets_attack", schema="demo",
        table_definition_options=fsql.CommandStatementIngest.TableDefinitionOptions(
            if_not_exist=fsql.CommandStatementIngest.TableDefinitionOptions.TABLE_NOT_EXIST_OPTION_CREATE,
            if_exists=fsql.CommandStatementIngest.TableDefinitionOptions.TABLE_EXISTS_OPTION_APPEND))
    descriptor = pyarrow.flight.FlightDescriptor.for_command(M.pack_any(ingest))
    writer, _ = client.do_put(descriptor, bad.schema)
    with pytest.raises(pa.ArrowInvalid, match="(?i)invalid argument.*offset"):
        writer.write_batch(bad)
        writer.done_writing()
        writer.close()
    client.close()
    with adbc.connect(trust[0], autocommit=True) as c, c.cursor() as cur:
        cur.execute("select 8")
        assert cur.fetchall() == [(8,)]
        cur.execute("select count(*) from information_schema.tables where table_name = 'offsets_attack'")
        assert cur.fetchall() == [(0,)]  # nothing was created from the refused stream
    assert "Traceback" not in trust[2].read_text(errors="replace")


# --- metadata ----------------------------------------------------------------------------------

def test_get_info_and_table_types(conn):
    info = conn.adbc_get_info()
    assert info["vendor_name"] == "icegres"
    assert info["vendor_arrow_version"] == pa.__version__
    assert conn.adbc_get_table_types() == ["TABLE", "VIEW"]


def test_get_objects_at_every_depth(conn):
    catalogs = conn.adbc_get_objects(depth="catalogs").read_all().to_pylist()
    assert [c["catalog_name"] for c in catalogs] == ["icegres"]
    schemas = conn.adbc_get_objects(depth="db_schemas").read_all().to_pylist()
    names = [s["db_schema_name"] for s in schemas[0]["catalog_db_schemas"]]
    assert "demo" in names and "pg_catalog" not in names
    tables = conn.adbc_get_objects(depth="tables", db_schema_filter="demo").read_all().to_pylist()
    demo = tables[0]["catalog_db_schemas"][0]
    assert sorted(t["table_name"] for t in demo["db_schema_tables"]) == ["cities", "trips"]
    columns = conn.adbc_get_objects(depth="all", db_schema_filter="demo", table_name_filter="tri%").read_all()
    trips = columns.to_pylist()[0]["catalog_db_schemas"][0]["db_schema_tables"]
    assert [t["table_name"] for t in trips] == ["trips"]
    cols = [(c["column_name"], c["ordinal_position"]) for c in trips[0]["table_columns"]]
    assert cols[:3] == [("id", 1), ("city", 2), ("fare", 3)]
    assert conn.adbc_get_objects(depth="tables", catalog_filter="other").read_all().to_pylist() == []


def test_get_table_schema(conn):
    schema = conn.adbc_get_table_schema("trips", db_schema_filter="demo")
    assert schema.names == ["id", "city", "fare", "distance", "pickup_ts", "passengers", "vendor", "paid"]
    assert schema.field("city").type == pa.string()
    assert not schema.field("id").nullable


def test_session_options_catalog_and_schema(conn):
    assert conn.adbc_current_catalog == "icegres"
    assert conn.adbc_current_db_schema == "public"
    conn.adbc_connection.set_options(**{"adbc.connection.db_schema": "demo"})
    assert conn.adbc_current_db_schema == "demo"
    with conn.cursor() as cur:
        cur.execute("select count(*) from cities")
        assert cur.fetchall() == [(20,)]


# --- one process, both protocols ---------------------------------------------------------------

def test_serve_with_flight_port_serves_both_protocols(seeded_dir):
    with flight_server(seeded_dir, command="serve") as (uri, _, _, pg_port):
        with adbc.connect(uri, autocommit=True) as c, c.cursor() as cur:
            cur.execute("select count(*) from demo.cities")
            assert cur.fetchall() == [(20,)]
        with psycopg.connect(f"host=127.0.0.1 port={pg_port} dbname=icegres user=icegres") as pg:
            assert pg.execute("select count(*) from demo.cities").fetchone() == (20,)


def test_malformed_commands_are_invalid_argument_and_harmless(trust):
    # Random bytes where Flight SQL expects Any-wrapped commands, through pyarrow's C++ client.
    import random

    import pyarrow.flight

    rng = random.Random(7)
    client = pyarrow.flight.FlightClient(trust[0])
    calls = (
        lambda b: client.get_flight_info(pyarrow.flight.FlightDescriptor.for_command(b)),
        lambda b: client.do_get(pyarrow.flight.Ticket(b)).read_all(),
        lambda b: list(client.do_action(pyarrow.flight.Action("CreatePreparedStatement", b))),
    )
    for _ in range(60):
        garbage = rng.randbytes(rng.randrange(1, 200))
        for call in calls:
            with pytest.raises(pa.ArrowInvalid, match="invalid argument"):
                call(garbage)
    client.close()
    with adbc.connect(trust[0], autocommit=True) as c, c.cursor() as cur:
        cur.execute("select 7")
        assert cur.fetchall() == [(7,)]
    assert "Traceback" not in trust[2].read_text(errors="replace")
