"""Savepoints over Arrow Flight SQL: BeginSavepoint / EndSavepoint (release, rollback).

The ADBC driver has no savepoint API, so these tests speak raw Flight SQL through pyarrow's C++
Flight client, with the Any-wrapped actions and commands built from our protobuf modules — the
messages any Flight SQL client (JDBC, Go's flightsql package) sends. Statements run inside the
transaction with its id (DoPut CommandStatementUpdate, GetFlightInfo CommandStatementQuery), and
what was committed is read back over pgwire (psycopg) from the same `icegres serve` process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.flight as paflight
import pytest
from google.protobuf import any_pb2

from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
from icegres.protocol.flightsql import icegres_flight_sql_writes_pb2 as wr
from icegres.protocol.flightsql import messages as M
from tests.e2e.test_flightsql import flight_server

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# pyarrow raises a Flight error status as FlightError or as the Arrow error of its code
# (NOT_FOUND -> ArrowKeyError, INVALID_ARGUMENT -> ArrowInvalid, ...); the SQLSTATE is in the text.
FAILED = (paflight.FlightError, pa.ArrowException)
RELEASE = wr.ActionEndSavepointRequest.END_SAVEPOINT_RELEASE
ROLLBACK = wr.ActionEndSavepointRequest.END_SAVEPOINT_ROLLBACK


class Server:
    def __init__(self, uri: str, pg_port: int) -> None:
        self.uri, self.pg_port = uri, pg_port

    def pg(self) -> psycopg.Connection:
        return psycopg.connect(f"host=127.0.0.1 port={self.pg_port} dbname=icegres user=icegres",
                               autocommit=True, connect_timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir: Path = tmp_path_factory.mktemp("flightsavepoints") / "data"
    data_dir.mkdir()
    with flight_server(data_dir, command="serve") as (uri, _, _, pg_port):
        srv = Server(uri, pg_port)
        with srv.pg() as pg:
            pg.execute("create schema sp")
        yield srv


class Client:
    """Raw Flight SQL over one pyarrow.flight connection (one server-side session)."""

    def __init__(self, uri: str) -> None:
        self.flight = paflight.FlightClient(uri)

    def close(self) -> None:
        self.flight.close()

    def action(self, kind: str, body: bytes) -> list[bytes]:
        return [r.body.to_pybytes() for r in self.flight.do_action(paflight.Action(kind, body))]

    @staticmethod
    def unpack(data: bytes, cls: type) -> object:
        envelope = any_pb2.Any.FromString(data)
        assert envelope.type_url == M.TYPE_URL_PREFIX + M.SQL_PACKAGE + cls.DESCRIPTOR.name
        return cls.FromString(envelope.value)

    def begin(self) -> bytes:
        (reply,) = self.action("BeginTransaction", M.pack_any(sql.ActionBeginTransactionRequest()))
        return self.unpack(reply, wr.ActionBeginTransactionResult).transaction_id

    def end(self, txn: bytes, commit: bool) -> None:
        action = (sql.ActionEndTransactionRequest.END_TRANSACTION_COMMIT if commit
                  else sql.ActionEndTransactionRequest.END_TRANSACTION_ROLLBACK)
        self.action("EndTransaction", M.pack_any(sql.ActionEndTransactionRequest(transaction_id=txn, action=action)))

    def savepoint(self, txn: bytes, name: str) -> bytes:
        (reply,) = self.action("BeginSavepoint",
                               M.pack_any(wr.ActionBeginSavepointRequest(transaction_id=txn, name=name)))
        ident = self.unpack(reply, wr.ActionBeginSavepointResult).savepoint_id
        assert ident
        return ident

    def end_savepoint(self, ident: bytes, action: int) -> list[bytes]:
        return self.action("EndSavepoint", M.pack_any(wr.ActionEndSavepointRequest(savepoint_id=ident, action=action)))

    def update(self, text: str, txn: bytes) -> int:
        """DoPut CommandStatementUpdate, descriptor only (what ADBC's execute_update sends)."""
        command = M.pack_any(sql.CommandStatementUpdate(query=text, transaction_id=txn))
        writer, reader = self.flight.do_put(paflight.FlightDescriptor.for_command(command), pa.schema([]))
        writer.done_writing()
        result = reader.read()
        writer.close()
        return sql.DoPutUpdateResult.FromString(result.to_pybytes()).record_count

    def query(self, text: str, txn: bytes) -> list[int]:
        command = M.pack_any(sql.CommandStatementQuery(query=text, transaction_id=txn))
        info = self.flight.get_flight_info(paflight.FlightDescriptor.for_command(command))
        table = pa.concat_tables([self.flight.do_get(e.ticket).read_all() for e in info.endpoints])
        return sorted(table.column(0).to_pylist())


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    c = Client(server.uri)
    yield c
    c.close()


def _table(server: Server, name: str) -> str:
    with server.pg() as pg:
        pg.execute(f"create table sp.{name} (id bigint)")
    return f"sp.{name}"


def _committed(server: Server, table: str) -> list[int]:
    with server.pg() as pg:
        return sorted(r[0] for r in pg.execute(f"select id from {table}").fetchall())


def test_sql_info_reports_savepoints(client):
    command = M.pack_any(sql.CommandGetSqlInfo(info=[8, 573]))
    info = client.flight.get_flight_info(paflight.FlightDescriptor.for_command(command))
    table = client.flight.do_get(info.endpoints[0].ticket).read_all()
    # FLIGHT_SQL_SERVER_TRANSACTION = SQL_SUPPORTED_TRANSACTION_SAVEPOINT (2); SQL_SAVEPOINTS_SUPPORTED.
    assert {r["info_name"]: r["value"] for r in table.to_pylist()} == {8: 2, 573: True}
    actions = {a.type for a in client.flight.list_actions()}
    assert {"BeginSavepoint", "EndSavepoint"} <= actions


def test_rollback_to_and_release_keep_exactly_the_right_writes(server, client):
    table = _table(server, "nested")
    txn = client.begin()
    assert client.update(f"insert into {table} values (1)", txn) == 1
    a = client.savepoint(txn, "a")
    client.update(f"insert into {table} values (2)", txn)
    b = client.savepoint(txn, "b")
    client.update(f"insert into {table} values (3)", txn)
    assert client.query(f"select id from {table}", txn) == [1, 2, 3]
    # ROLLBACK TO b: the write since b is gone, b stays (it can be rolled back to again).
    assert client.end_savepoint(b, ROLLBACK) == []
    assert client.query(f"select id from {table}", txn) == [1, 2]
    client.update(f"insert into {table} values (4)", txn)
    client.end_savepoint(b, ROLLBACK)
    assert client.query(f"select id from {table}", txn) == [1, 2]
    client.update(f"insert into {table} values (5)", txn)
    # RELEASE a: it and b (made after it) end; the writes made since stay in the transaction.
    client.end_savepoint(a, RELEASE)
    for gone in (a, b):
        with pytest.raises(FAILED, match="not found.*3B001"):
            client.end_savepoint(gone, ROLLBACK)
    assert _committed(server, table) == []  # nothing is visible before the commit
    client.end(txn, commit=True)
    assert _committed(server, table) == [1, 2, 5]


def test_rollback_to_a_savepoint_revives_a_failed_transaction(server, client):
    table = _table(server, "revive")
    txn = client.begin()
    client.update(f"insert into {table} values (1)", txn)
    a = client.savepoint(txn, "a")
    client.update(f"insert into {table} values (2)", txn)
    with pytest.raises(FAILED, match="42P01"):
        client.update("insert into sp.no_such_table values (1)", txn)
    # As in PostgreSQL: the transaction is aborted until it rolls back (here, to a savepoint).
    with pytest.raises(FAILED, match="25P02"):
        client.query(f"select id from {table}", txn)
    with pytest.raises(FAILED, match="25P02"):
        client.savepoint(txn, "b")
    with pytest.raises(FAILED, match="25P02"):
        client.end_savepoint(a, RELEASE)
    client.end_savepoint(a, ROLLBACK)
    assert client.query(f"select id from {table}", txn) == [1]
    client.update(f"insert into {table} values (3)", txn)
    client.end(txn, commit=True)
    assert _committed(server, table) == [1, 3]


def test_savepoints_end_with_their_transaction(server, client):
    table = _table(server, "ended")
    txn = client.begin()
    a = client.savepoint(txn, "a")
    client.update(f"insert into {table} values (1)", txn)
    client.end(txn, commit=False)
    with pytest.raises(FAILED, match="3B001"):
        client.end_savepoint(a, ROLLBACK)
    with pytest.raises(FAILED, match="25P01"):
        client.savepoint(txn, "b")
    with pytest.raises(FAILED, match="25P01"):
        client.savepoint(b"no such transaction", "c")
    assert _committed(server, table) == []
    # A savepoint of another session's transaction is not this session's to end.
    other = Client(server.uri)
    try:
        theirs = other.begin()
        sp = other.savepoint(theirs, "x")
        with pytest.raises(FAILED, match="3B001"):
            client.end_savepoint(sp, ROLLBACK)
        other.end(theirs, commit=False)
    finally:
        other.close()


def test_savepoint_as_sql_text_points_to_the_actions(client):
    txn = client.begin()
    with pytest.raises(FAILED, match="BeginSavepoint"):
        client.update("savepoint a", txn)
    client.end(txn, commit=False)
