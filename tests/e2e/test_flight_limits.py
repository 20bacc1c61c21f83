"""Connection limits and the authentication timeout on Arrow Flight SQL (docs/security.md, "Limits
and abuse"), against `icegres serve` with both front ends and real clients: the ADBC Flight SQL
driver, pyarrow.flight and psycopg; raw sockets (and a bare h2 client) where the point is a client
that never authenticates.

One server, one `--max-connections`: a pgwire connection and a Flight SQL connection take slots
from the same count, and both see PostgreSQL's 53300 beyond it.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import struct
import time
from contextlib import ExitStack
from urllib.parse import unquote

import adbc_driver_flightsql.dbapi as adbc
import adbc_driver_manager
import h2.config
import h2.connection
import h2.events
import psutil
import psycopg
import pyarrow.flight
import pytest

from icegres.protocol.flightsql.connections import LINGER_S
from tests.support.icegres_server import running_icegres
from tests.support.tls import self_signed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ROOT, ALICE = ("root", "root-secret-1"), ("alice", "alice-secret-2")
TIMEOUT_S = 1.0  # --authentication-timeout
TOO_MANY = "sorry, too many clients already (SQLSTATE 53300)"
RESERVED = "remaining connection slots are reserved for non-replication superuser connections (SQLSTATE 53300)"
GOAWAY = 0x7  # HTTP/2 frame type


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """Both front ends, 3 slots between them, one reserved for the superuser `root`, a 1 s
    authentication timeout, a back-off too short to matter here."""
    base = tmp_path_factory.mktemp("flight-limits")
    pwfile = base / "users"
    pwfile.write_text(f"{ROOT[0]}:{ROOT[1]}\n{ALICE[0]}:{ALICE[1]}\n")
    args = ("--password-file", str(pwfile), "--flight-port", "0", "--max-connections", "3",
            "--superuser-reserved-connections", "1", "--authentication-timeout", str(TIMEOUT_S),
            "--auth-failure-delay-ms", "10", "--auth-failure-delay-max-ms", "20")
    with running_icegres(base / "data", args=args, user=ALICE[0], password=ALICE[1]) as srv:
        yield srv


def flight(srv, who: tuple[str, str]):
    """An ADBC connection (its Handshake made: it holds a slot)."""
    return adbc.connect(f"grpc://127.0.0.1:{srv.flight_port}", db_kwargs={"username": who[0], "password": who[1]},
                        autocommit=True)


def pgwire(srv, who: tuple[str, str]):
    return psycopg.connect(srv.dsn(user=who[0], password=who[1]), autocommit=True)


def flight_select(conn) -> tuple:
    with conn.cursor() as cur:
        cur.execute("select 1")
        return cur.fetchone()


def adbc_refusal(srv, who: tuple[str, str]) -> str:
    try:
        flight(srv, who).close()
    except adbc_driver_manager.Error as exc:
        return str(exc)
    return "connected"


def pyarrow_refusal(srv, who: tuple[str, str]) -> str:
    client = pyarrow.flight.FlightClient(f"grpc://127.0.0.1:{srv.flight_port}")
    try:
        client.authenticate_basic_token(*who)
    except pyarrow.flight.FlightError as exc:
        return str(exc)
    except pyarrow.ArrowInvalid as exc:  # pyarrow's word for RESOURCE_EXHAUSTED
        return str(exc)
    finally:
        client.close()
    return "connected"


def pgwire_refusal(srv, who: tuple[str, str]) -> str:
    try:
        pgwire(srv, who).close()
    except psycopg.OperationalError as exc:
        return str(exc)
    return "connected"


def test_beyond_max_connections_a_flight_client_gets_53300_while_the_others_go_on(limited):
    with flight(limited, ALICE) as a, pgwire(limited, ALICE) as b:
        # Two slots taken, one pgwire and one Flight: the last is root's.
        text = adbc_refusal(limited, ALICE)
        assert RESERVED in text and "ResourceExhausted" in text, text
        # The refusal's statement record names the user it was refused to.
        log = limited.wait_log('error="remaining connection slots')
        line = next(x for x in log.splitlines() if 'error="remaining connection slots' in x)
        assert re.search(r'rpc=Handshake user=alice .* sqlstate=53300 ', line), line
        with flight(limited, ROOT) as r:
            text = adbc_refusal(limited, ROOT)
            assert TOO_MANY in text and "ResourceExhausted" in text, text
            text = pyarrow_refusal(limited, ROOT)
            assert text == f"gRPC returned resource exhausted error, with message: {TOO_MANY}", text
            assert "FATAL:  sorry, too many clients already" in pgwire_refusal(limited, ROOT)
            # The ones in go on, over both protocols.
            assert flight_select(a) == (1,) and flight_select(r) == (1,)
            assert b.execute("select 1").fetchone() == (1,)
    with flight(limited, ALICE) as a:  # every slot came back
        assert flight_select(a) == (1,)


def test_a_refused_client_closes_on_the_goaway_before_the_linger_ends(limited):
    with flight(limited, ALICE) as a, pgwire(limited, ALICE) as b, flight(limited, ROOT) as r:
        held = flight_peers(limited)
        for refusal in (adbc_refusal, pyarrow_refusal):
            assert TOO_MANY in refusal(limited, ROOT)
        deadline = time.monotonic() + LINGER_S / 2
        while flight_peers(limited) != held and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flight_peers(limited) == held
        assert flight_select(a) == (1,) and flight_select(r) == (1,) and b.execute("select 1").fetchone() == (1,)


def test_beyond_the_limit_each_call_is_answered_53300_then_the_server_says_goaway(limited):
    """On the wire (a bare h2 client): the refusal is a gRPC status with its message, a GOAWAY
    follows, and the server then waits for the client to close rather than resetting it."""
    with flight(limited, ALICE), pgwire(limited, ALICE), flight(limited, ROOT), \
            socket.create_connection(("127.0.0.1", limited.flight_port)) as sock:
        sock.settimeout(10)
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send() + grpc_call(conn, "/arrow.flight.protocol.FlightService/ListActions"))
        trailers: dict[bytes, bytes] = {}
        goaway = None
        while goaway is None:
            data = sock.recv(65536)
            assert data, "closed before its GOAWAY"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                    trailers.update(dict(event.headers))
                elif isinstance(event, h2.events.ConnectionTerminated):
                    goaway = event
        assert trailers[b"grpc-status"] == b"8"  # RESOURCE_EXHAUSTED
        assert unquote(trailers[b"grpc-message"].decode()) == TOO_MANY  # percent-encoded on the wire
        assert goaway.error_code == 0 and goaway.last_stream_id == 1
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):  # lingering: open, until the client closes
            sock.recv(65536)


@pytest.mark.parametrize("holders", [("flight", "flight", "pgwire"), ("pgwire", "pgwire", "flight")])
def test_pgwire_and_flight_connections_share_one_budget(limited, holders):
    """Three slots filled with a mix (alice twice, root last); the next client is refused over
    either protocol."""
    opener = {"flight": flight, "pgwire": pgwire}
    with ExitStack() as held:
        for kind, who in zip(holders, (ALICE, ALICE, ROOT), strict=True):
            held.enter_context(opener[kind](limited, who))
        assert TOO_MANY in adbc_refusal(limited, ROOT)
        assert "FATAL:  sorry, too many clients already" in pgwire_refusal(limited, ROOT)
    with pgwire(limited, ROOT) as c, flight(limited, ROOT) as f:
        assert c.execute("select 1").fetchone() == (1,) and flight_select(f) == (1,)


def frames(data: bytes) -> list[int]:
    """The types of the HTTP/2 frames in `data` (a server's side: no preface)."""
    types, at = [], 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at:at + 3], "big")
        types.append(data[at + 3])
        at += 9 + length
    return types


def read_to_close(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def grpc_call(conn: h2.connection.H2Connection, path: str) -> bytes:
    """A unary gRPC call without credentials, an empty message as its request, as h2 sends it."""
    stream_id = conn.get_next_available_stream_id()
    conn.send_headers(stream_id, [(":method", "POST"), (":scheme", "http"), (":path", path),
                                  (":authority", "127.0.0.1"), ("content-type", "application/grpc"),
                                  ("te", "trailers")])
    conn.send_data(stream_id, b"\0" + struct.pack("!I", 0), end_stream=True)
    return conn.data_to_send()


@pytest.mark.parametrize("sent", ["nothing", "preface", "unauthenticated call"])
def test_a_flight_connection_that_does_not_authenticate_is_closed_after_the_timeout(limited, sent):
    with socket.create_connection(("127.0.0.1", limited.flight_port)) as sock:
        sock.settimeout(10)
        started = time.monotonic()
        status = None
        if sent != "nothing":
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            sock.sendall(conn.data_to_send())
            if sent == "unauthenticated call":
                sock.sendall(grpc_call(conn, "/arrow.flight.protocol.FlightService/ListActions"))
                while status is None:
                    for event in conn.receive_data(sock.recv(65536)):
                        if isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                            status = dict(event.headers).get(b"grpc-status", status)
                    sock.sendall(conn.data_to_send())
        data = read_to_close(sock)
        waited = time.monotonic() - started
    assert TIMEOUT_S * 0.8 < waited < TIMEOUT_S + 4, waited
    assert status in (None, b"16"), status  # UNAUTHENTICATED: no credentials
    assert GOAWAY in frames(data), frames(data)


def test_idle_flight_sockets_hold_no_slot(limited):
    idle = [socket.create_connection(("127.0.0.1", limited.flight_port)) for _ in range(10)]
    try:
        with flight(limited, ALICE) as a, pgwire(limited, ALICE) as b, flight(limited, ROOT) as r:
            assert flight_select(a) == (1,) and flight_select(r) == (1,)
            assert b.execute("select 1").fetchone() == (1,)
    finally:
        for s in idle:
            s.close()


def flight_peers(srv) -> set[int]:
    """The client ports of the server's established Flight SQL connections."""
    return {c.raddr.port for c in psutil.Process(srv.pid).net_connections("tcp")
            if c.laddr.port == srv.flight_port and c.status == psutil.CONN_ESTABLISHED and c.raddr}


def test_an_authenticated_idle_flight_connection_outlives_the_timeout(limited):
    with flight(limited, ALICE) as a:
        assert flight_select(a) == (1,)
        before = flight_peers(limited)
        assert before
        time.sleep(TIMEOUT_S * 2.5)
        # The same TCP connection (the driver would reconnect unseen if it had been closed).
        assert flight_peers(limited) == before
        assert flight_select(a) == (1,)
        assert flight_peers(limited) == before


@pytest.fixture(scope="module")
def trusting(tmp_path_factory):
    """Trust (no users): 2 slots, one "reserved" — but under trust every user is a superuser."""
    args = ("--flight-port", "0", "--max-connections", "2", "--superuser-reserved-connections", "1",
            "--authentication-timeout", str(TIMEOUT_S))
    with running_icegres(tmp_path_factory.mktemp("flight-trust") / "data", args=args) as srv:
        yield srv


def test_under_trust_a_first_call_authenticates_and_the_limit_holds(trusting):
    client = pyarrow.flight.FlightClient(f"grpc://127.0.0.1:{trusting.flight_port}")
    try:
        assert list(client.list_actions()) is not None
        before = flight_peers(trusting)
        time.sleep(TIMEOUT_S * 2.5)
        assert flight_peers(trusting) == before  # a call made: never timed out
        with psycopg.connect(trusting.dsn()) as c:  # the second and last slot
            assert c.execute("select 1").fetchone() == (1,)
            other = pyarrow.flight.FlightClient(f"grpc://127.0.0.1:{trusting.flight_port}")
            with pytest.raises(pyarrow.ArrowInvalid, match=r"sorry, too many clients already \(SQLSTATE 53300\)"):
                list(other.list_actions())
            other.close()
        assert list(client.list_actions()) is not None
    finally:
        client.close()
    # A silent socket is still closed: under trust too, a connection must make its call in time.
    with socket.create_connection(("127.0.0.1", trusting.flight_port)) as sock:
        sock.settimeout(10)
        started = time.monotonic()
        read_to_close(sock)
        assert TIMEOUT_S * 0.8 < time.monotonic() - started < TIMEOUT_S + 4


TLS_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def tls_trusting(tmp_path_factory):
    base = tmp_path_factory.mktemp("flight-tls")
    cert, key = self_signed(base)
    args = ("--flight-port", "0", "--tls-cert", str(cert), "--tls-key", str(key),
            "--authentication-timeout", str(TLS_TIMEOUT_S))
    with running_icegres(base / "data", args=args) as srv:
        yield srv, cert


def test_under_tls_the_handshake_counts_against_the_authentication_timeout(tls_trusting):
    srv, cert = tls_trusting
    # Silent before its TLS handshake: asyncio's handshake timeout is ours, not its 60 s.
    with socket.create_connection(("127.0.0.1", srv.flight_port)) as sock:
        sock.settimeout(10)
        started = time.monotonic()
        read_to_close(sock)
        assert TLS_TIMEOUT_S * 0.8 < time.monotonic() - started < TLS_TIMEOUT_S + 4
    # A slow handshake, then nothing: closed one timeout after connecting, not after the handshake.
    context = ssl.create_default_context(cafile=str(cert))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", srv.flight_port)) as raw:
        started = time.monotonic()
        time.sleep(TLS_TIMEOUT_S * 0.75)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.settimeout(10)
            with contextlib.suppress(ssl.SSLError, ConnectionError):  # closed under TLS, maybe without close_notify
                read_to_close(sock)
        waited = time.monotonic() - started
    assert TLS_TIMEOUT_S * 0.8 < waited < TLS_TIMEOUT_S * 1.5, waited
    # A client that calls in time is served.
    client = pyarrow.flight.FlightClient(f"grpc+tls://127.0.0.1:{srv.flight_port}", tls_root_certs=cert.read_bytes())
    try:
        assert list(client.list_actions()) is not None
    finally:
        client.close()
