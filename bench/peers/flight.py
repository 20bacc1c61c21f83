"""Flight peers: ADBC clients of icegres, a pyarrow.flight (C++) server as the ceiling, and the
same table sent by grpclib alone (icegres's transport without its engine).

The ceiling serves one Arrow table from memory through Arrow's C++ Flight server, speaking just
enough Flight SQL for the ADBC driver (GetSqlInfo at connect, CreatePreparedStatement,
GetFlightInfo, DoGet, ClosePreparedStatement, CloseSession): every query text answers the same
table, so the ADBC client code path is the same as against icegres. Run it in its own process
(`python -m bench.peers.flight --file T.arrow --port P`) so that client and server do not share
a GIL, as icegres's server does not.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.harness import Peer

BATCH_ROWS = 65_536  # icegres's DoGet message size, so both servers send the same frames


def checksum(table: pa.Table) -> list[tuple]:
    """What the cross-peer check compares for a bulk read: row count and the sum of ids."""
    import pyarrow.compute as pc

    ids = table.column("id") if "id" in table.column_names else None
    return [(table.num_rows, pc.sum(ids).as_py() if ids is not None else None)]


class AdbcPeer(Peer):
    """The ADBC Flight SQL driver (Go), one autocommit connection and one cursor, as an
    application holds them: `cursor.execute` closes the previous prepared statement, prepares
    (CreatePreparedStatement), gets the FlightInfo and starts the DoGet; `fetch_arrow_table`
    reads the whole stream."""

    def __init__(self, uri: str, name: str, bulk: bool = False) -> None:
        import adbc_driver_flightsql.dbapi as adbc

        self.name = name
        self.bulk = bulk
        self.conn = adbc.connect(uri, autocommit=True)
        self.cursor = self.conn.cursor()
        self.bytes_last = 0
        self.rows_last = 0

    def run(self, sql: str) -> list[tuple]:
        self.cursor.execute(sql)
        table = self.cursor.fetch_arrow_table()
        self.bytes_last, self.rows_last = table.nbytes, table.num_rows
        if self.bulk:
            return checksum(table)
        return [tuple(r.values()) for r in table.to_pylist()]

    def close(self) -> None:
        self.cursor.close()
        self.conn.close()


# --- the pyarrow.flight ceiling server ------------------------------------------------------------

def _report_port(ports_file: Path | None, port: int) -> None:
    if ports_file is not None:
        from icegres.listeners import write_ports_file

        write_ports_file(ports_file, "127.0.0.1", {"port": port})


def _serve(path: Path, port: int, ports_file: Path | None = None) -> None:
    import pyarrow.flight as flight

    from icegres.protocol.flightsql import icegres_flight_pb2 as fl
    from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
    from icegres.protocol.flightsql import messages as M

    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all().combine_chunks()
    batches = table.to_batches(max_chunksize=BATCH_ROWS)
    schema = table.schema
    sql_info = M.sql_info_batch({0: "pyarrow.flight ceiling", 1: pa.__version__, 2: pa.__version__,
                                 8: M.Int32(0)}, [])

    class Ceiling(flight.FlightServerBase):
        def get_flight_info(self, context: Any, descriptor: Any) -> Any:
            command = M.decode_command(descriptor.command)
            if isinstance(command, sql.CommandGetSqlInfo):
                return flight.FlightInfo(M.SQL_INFO_SCHEMA, descriptor,
                                         [flight.FlightEndpoint(b"sqlinfo", [])], -1, -1)
            return flight.FlightInfo(schema, descriptor, [flight.FlightEndpoint(b"table", [])],
                                     table.num_rows, table.nbytes)

        def do_get(self, context: Any, ticket: Any) -> Any:
            if ticket.ticket == b"sqlinfo":
                return flight.RecordBatchStream(pa.Table.from_batches([sql_info]))
            return flight.GeneratorStream(schema, iter(batches))

        def do_action(self, context: Any, action: Any) -> Any:
            kind = action.type
            if kind == "CreatePreparedStatement":
                reply = sql.ActionCreatePreparedStatementResult(
                    prepared_statement_handle=b"h", dataset_schema=M.schema_bytes(schema),
                    parameter_schema=M.schema_bytes(pa.schema([])))
                return [flight.Result(M.pack_any(reply))]
            if kind == "CloseSession":
                reply = fl.CloseSessionResult(status=fl.CloseSessionResult.CLOSED)
                return [flight.Result(reply.SerializeToString())]
            return []

    server = Ceiling(f"grpc://127.0.0.1:{port}")
    print(f"ceiling serving {table.num_rows} rows on {server.port}", flush=True)
    _report_port(ports_file, server.port)
    signal.signal(signal.SIGTERM, lambda *_: server.shutdown())
    server.serve()


def _serve_grpclib(path: Path, port: int, ports_file: Path | None = None) -> None:
    """The same table, pre-encoded once, sent by grpclib under trio-asyncio exactly as icegres
    sends a result (same codec, same FlightData encoding, the same pre-built HTTP/2 DATA frames
    written by h2send.send_framed, the same corked writes): the transport alone, without the
    engine, so a miss can be split between the engine and the transport."""
    import trio
    import trio_asyncio
    from grpclib.const import Cardinality, Handler
    from grpclib.server import Server

    from icegres.protocol.flightsql import h2send
    from icegres.protocol.flightsql import icegres_flight_pb2 as fl
    from icegres.protocol.flightsql import icegres_flight_sql_pb2 as sql
    from icegres.protocol.flightsql import messages as M
    from icegres.protocol.flightsql.service import CODEC, SERVICE

    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all().combine_chunks()
    schema = table.schema
    frames = [M.batch_flight_data(b) for b in table.to_batches(max_chunksize=BATCH_ROWS)]
    sql_info = M.batch_flight_data(M.sql_info_batch({0: "grpclib transport", 8: M.Int32(0)}, []))

    class Transport:
        def __mapping__(self) -> dict[str, Handler]:
            return {
                SERVICE + "GetFlightInfo": Handler(self.info, Cardinality.UNARY_UNARY, fl.FlightDescriptor,
                                                   fl.FlightInfo),
                SERVICE + "DoGet": Handler(self.get, Cardinality.UNARY_STREAM, fl.Ticket, fl.FlightData),
                SERVICE + "DoAction": Handler(self.action, Cardinality.UNARY_STREAM, fl.Action, fl.Result),
            }

        async def info(self, stream: Any) -> None:
            descriptor = await stream.recv_message()
            is_info = isinstance(M.decode_command(descriptor.cmd), sql.CommandGetSqlInfo)
            await stream.send_message(fl.FlightInfo(
                schema=M.schema_bytes(M.SQL_INFO_SCHEMA if is_info else schema), flight_descriptor=descriptor,
                endpoint=[fl.FlightEndpoint(ticket=fl.Ticket(ticket=b"sqlinfo" if is_info else b"table"))],
                total_records=-1 if is_info else table.num_rows, total_bytes=-1))

        async def get(self, stream: Any) -> None:
            ticket = await stream.recv_message()
            if ticket.ticket == b"sqlinfo":
                await stream.send_message(M.schema_flight_data(M.SQL_INFO_SCHEMA))
                await stream.send_message(sql_info)
                return
            if not h2send.framed_ok():
                await stream.send_message(M.schema_flight_data(schema))
                for frame in frames:
                    await stream.send_message(frame)
                return
            # As icegres sends a result: each message laid out as this stream's HTTP/2 DATA
            # frames (pieces, nothing copied; icegres makes them in its worker thread), written
            # by a gathering sendmsg.
            await stream.send_initial_metadata()
            h2_stream = stream._stream
            head = M.http2_data_frames([[M.schema_flight_data(schema)]], h2_stream.id)
            await h2send.send_framed(h2_stream, head, M.FRAME_PAYLOAD_BYTES)
            for frame in frames:
                framed = M.http2_data_frames([[frame]], h2_stream.id)
                await h2send.send_framed(h2_stream, framed, M.FRAME_PAYLOAD_BYTES)

        async def action(self, stream: Any) -> None:
            action = await stream.recv_message()
            if action.type == "CreatePreparedStatement":
                reply = sql.ActionCreatePreparedStatementResult(
                    prepared_statement_handle=b"h", dataset_schema=M.schema_bytes(schema),
                    parameter_schema=M.schema_bytes(pa.schema([])))
                await stream.send_message(fl.Result(body=M.pack_any(reply)))
            elif action.type == "CloseSession":
                reply = fl.CloseSessionResult(status=fl.CloseSessionResult.CLOSED)
                await stream.send_message(fl.Result(body=reply.SerializeToString()))

    async def main() -> None:
        h2send.install()
        async with trio_asyncio.open_loop():
            server = Server([Transport()], codec=CODEC)
            await trio_asyncio.aio_as_trio(server.start)("127.0.0.1", port)
            bound = server._server.sockets[0].getsockname()[1]  # grpclib has no public accessor
            print(f"grpclib transport serving {table.num_rows} rows on {bound}", flush=True)
            _report_port(ports_file, bound)
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    server.close()
                    return

    trio.run(main)


class CeilingServer:
    """The ceiling in a subprocess, stopped by its PID."""

    def __init__(self, table_file: Path, log_path: Path, grpclib: bool = False) -> None:
        self.grpclib = grpclib
        self.port = 0  # the kernel's choice, known once started (its --ports-file)
        self.log_path = log_path
        self.ports_file = log_path.with_name(log_path.name + ".ports.json")
        self.proc = None
        self.table_file = table_file

    @property
    def uri(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.peers.flight", "--file", str(self.table_file), "--port", "0",
                 "--ports-file", str(self.ports_file), *(["--grpclib"] if self.grpclib else [])],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        from bench.pgwire_read import icegres_ports

        self.port = icegres_ports(self.proc, self.ports_file, self.log_path, timeout_s)["port"]
        wait_port(self.port, self.proc, timeout_s, self.log_path)

    def stop(self) -> None:
        stop_process(self.proc)


def wait_port(port: int, proc: Any, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log_path.read_text(errors='replace')[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no listener on {port} within {timeout_s:.0f} s")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)


def stop_process(proc: Any) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="pyarrow.flight ceiling server for the flight bench")
    ap.add_argument("--file", type=Path, required=True, help="Arrow IPC file holding the table")
    ap.add_argument("--port", type=int, required=True, help="0: any free port, reported in --ports-file")
    ap.add_argument("--ports-file", type=Path, default=None, help="write {\"pid\": ..., \"port\": ...} here once bound")
    ap.add_argument("--grpclib", action="store_true", help="serve with grpclib under trio-asyncio instead")
    args = ap.parse_args()
    (_serve_grpclib if args.grpclib else _serve)(args.file, args.port, args.ports_file)
