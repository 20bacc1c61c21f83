"""A small Flight SQL client on grpclib (asyncio): ad-hoc and prepared queries to Arrow tables.

Built from the same protobuf modules as the server, it is the third client the tests read results
with (beside the ADBC driver and pyarrow.flight), and a reference for what a minimal Flight SQL
client sends: GetFlightInfo(CommandStatementQuery) then DoGet of each endpoint's ticket, the
stream decoded as Arrow IPC (compressed bodies included).
"""

from __future__ import annotations

import base64
import ssl
from typing import Any

import pyarrow as pa
from google.protobuf import any_pb2
from grpclib.client import Channel
from grpclib.const import Cardinality

from icegres.protocol.flightsql import icegres_flight_pb2 as fl
from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
from icegres.protocol.flightsql import messages as M

SERVICE = "/arrow.flight.protocol.FlightService/"


def client_ssl_context(root_certs_pem: str | None = None) -> ssl.SSLContext:
    """TLS for grpc+tls://: verify the server against `root_certs_pem` (else the system roots)."""
    context = ssl.create_default_context(cadata=root_certs_pem) if root_certs_pem else ssl.create_default_context()
    context.set_alpn_protocols(["h2"])
    return context


class FlightSqlClient:
    """One grpclib channel. Use as `async with FlightSqlClient(host, port) as c: await c.query(...)`."""

    def __init__(self, host: str, port: int, *, tls_root_certs: str | None = None,
                 username: str | None = None, password: str | None = None) -> None:
        context = client_ssl_context(tls_root_certs) if tls_root_certs is not None else None
        self.channel = Channel(host, port, ssl=context)
        self.metadata: dict[str, str] = {}
        if username is not None:
            raw = f"{username}:{password or ''}".encode()
            self.metadata["authorization"] = "Basic " + base64.b64encode(raw).decode()

    async def __aenter__(self) -> FlightSqlClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    async def _unary(self, method: str, request: Any, reply_type: Any) -> Any:
        async with self.channel.request(SERVICE + method, Cardinality.UNARY_UNARY, type(request), reply_type,
                                        metadata=self.metadata) as stream:
            await stream.send_message(request, end=True)
            reply = await stream.recv_message()
            await stream.recv_trailing_metadata()
            return reply

    async def _stream(self, method: str, request: Any, reply_type: Any) -> list[Any]:
        async with self.channel.request(SERVICE + method, Cardinality.UNARY_STREAM, type(request), reply_type,
                                        metadata=self.metadata) as stream:
            await stream.send_message(request, end=True)
            replies = [message async for message in stream]
            return replies

    async def flight_info(self, command: Any) -> fl.FlightInfo:
        descriptor = fl.FlightDescriptor(type=fl.FlightDescriptor.CMD, cmd=M.pack_any(command))
        return await self._unary("GetFlightInfo", descriptor, fl.FlightInfo)

    async def do_get(self, ticket: bytes) -> pa.Table:
        """The stream of one ticket as a table (its schema from the stream's first message)."""
        reader = M.IpcStreamReader()
        batches = []
        for data in await self._stream("DoGet", fl.Ticket(ticket=ticket), fl.FlightData):
            batch = reader.feed(data)
            if batch is not None:
                batches.append(batch)
        if reader.schema is None:
            raise M.BadCommand("DoGet stream without a schema")
        return pa.Table.from_batches(batches, schema=reader.schema)

    async def command(self, command: Any) -> pa.Table:
        """Any Flight SQL command that GetFlightInfo takes (queries, metadata), read in full."""
        info = await self.flight_info(command)
        schema = M.read_ipc_schema(info.schema)
        tables = [await self.do_get(endpoint.ticket.ticket) for endpoint in info.endpoint]
        for table in tables:
            if not table.schema.equals(schema):
                raise M.BadCommand(f"stream schema {table.schema} differs from FlightInfo's {schema}")
        return pa.concat_tables(tables) if tables else schema.empty_table()

    async def query(self, text: str) -> pa.Table:
        return await self.command(sql.CommandStatementQuery(query=text))

    async def prepared_query(self, text: str) -> pa.Table:
        """Prepare, execute and close: the sequence ADBC's cursor.execute sends."""
        request = sql.ActionCreatePreparedStatementRequest(query=text)
        results = await self._stream("DoAction", fl.Action(type="CreatePreparedStatement", body=M.pack_any(request)),
                                     fl.Result)
        envelope = any_pb2.Any.FromString(results[0].body)
        if not envelope.type_url.endswith(".ActionCreatePreparedStatementResult"):
            raise M.BadCommand(f"unexpected reply {envelope.type_url[:200]!r} to CreatePreparedStatement")
        prepared = sql.ActionCreatePreparedStatementResult.FromString(envelope.value)
        handle = prepared.prepared_statement_handle
        try:
            return await self.command(sql.CommandPreparedStatementQuery(prepared_statement_handle=handle))
        finally:
            close = sql.ActionClosePreparedStatementRequest(prepared_statement_handle=handle)
            await self._stream("DoAction", fl.Action(type="ClosePreparedStatement", body=M.pack_any(close)),
                               fl.Result)
