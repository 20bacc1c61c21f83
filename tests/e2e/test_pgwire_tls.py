"""TLS for pgwire with real clients, each used as its documentation says: psql (the on-disk
PostgreSQL 15 binary), psycopg (its bundled libpq 18, which also speaks PostgreSQL 17's direct TLS),
asyncpg (an ssl context, and its direct_tls), pgjdbc 42.7 (`ssl=true&sslmode=...&sslrootcert=`) and
psqlODBC (`SSLmode=` + `pqopt={sslrootcert=...}`), with `sslmode=verify-full` against a CA made
here and with `sslmode=require`.

Encryption is proven on the server's side: the clients connect to a `--tls-required` server,
which refuses any plaintext StartupMessage (28000, PostgreSQL's words), so every answer they get
came over TLS; where a client reports its own TLS (psql's \\conninfo, psycopg's ssl_in_use,
asyncpg's transport) that is checked too. Then the negotiation's edges over raw sockets: bytes
stuffed behind an SSLRequest, a second request, truncated and garbage ClientHellos, direct TLS
without ALPN, and handshakes that never finish while a bystander keeps querying. Last, the start-up
refusal of a non-loopback address without TLS, checked through the command line (tests bind
loopback only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psycopg
import pyodbc
import pytest

from icegres.protocol.pgwire import messages as m
from tests.e2e.test_pgjdbc import _jar
from tests.e2e.test_psqlodbc import _driver
from tests.support.icegres_server import IcegresServer, running_icegres, seed_data_dir
from tests.support.tls import Pki, ca_signed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CITIES = 20  # rows of demo.cities
NO_HBA = 'no pg_hba.conf entry for host "127.0.0.1", user "icegres", database "icegres", no encryption'
SSL_REQUEST = struct.pack("!ii", 8, m.SSL_REQUEST_CODE)
JAVA_SOURCE = Path(__file__).parent / "java" / "IcegresTlsCheck.java"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return ca_signed(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def wrong_ca(tmp_path_factory) -> Pki:
    return ca_signed(tmp_path_factory.mktemp("other-pki"))


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory) -> Path:
    data_dir = tmp_path_factory.mktemp("tls-lake") / "data"
    seed_data_dir(data_dir, rows=1000)
    return data_dir


@pytest.fixture(scope="module")
def required(small_lake, pki) -> Iterator[IcegresServer]:
    """TLS only: a plaintext StartupMessage is refused. Flight SQL on the same certificate."""
    args = ("--tls-cert", str(pki.cert), "--tls-key", str(pki.key), "--tls-required", "--flight-port", "0",
            "--log-level", "DEBUG")  # each handshake logged: which negotiation a client used
    with running_icegres(small_lake, args=args) as srv:
        yield srv


@pytest.fixture(scope="module")
def optional(small_lake, pki) -> Iterator[IcegresServer]:
    """TLS offered, plaintext allowed (PostgreSQL's `host` lines with ssl=on)."""
    env = {"ICEGRES_TLS_CERT": str(pki.cert), "ICEGRES_TLS_KEY": str(pki.key)}  # the environment twins
    with running_icegres(small_lake, env=env) as srv:
        yield srv


def libpq_dsn(server: IcegresServer, host: str = "localhost", **extra: str) -> str:
    return server.dsn(host=host, **extra)


# --- psql -------------------------------------------------------------------------------------------


def psql(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["psql", "-X", "-At", dsn, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "PGTZ": "UTC"})


@pytest.mark.parametrize("sslmode", ["verify-full", "require"])
def test_psql(required, pki, sslmode):
    done = psql(libpq_dsn(required, sslmode=sslmode, sslrootcert=str(pki.ca_cert)), "-c", r"\conninfo",
                "-c", "select count(*) from demo.cities")
    assert done.returncode == 0, done.stderr + required.log_tail()
    assert "SSL connection (protocol: TLSv1.3" in done.stdout
    assert done.stdout.strip().endswith(str(CITIES))


def test_psql_verify_full_refuses_a_server_its_ca_did_not_sign(required, wrong_ca):
    done = psql(libpq_dsn(required, sslmode="verify-full", sslrootcert=str(wrong_ca.ca_cert)), "-c", "select 1")
    assert done.returncode != 0 and "certificate verify failed" in done.stderr, done.stderr


def test_psql_plaintext_is_refused_with_postgresqls_message(required):
    done = psql(libpq_dsn(required, host="127.0.0.1", sslmode="disable"), "-c", "select 1")
    assert done.returncode != 0
    assert f"FATAL:  {NO_HBA}" in done.stderr, done.stderr


# --- psycopg (libpq 18) -------------------------------------------------------------------------------


@pytest.mark.parametrize("sslmode", ["verify-full", "require"])
def test_psycopg(required, pki, sslmode):
    with psycopg.connect(libpq_dsn(required, sslmode=sslmode, sslrootcert=str(pki.ca_cert))) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("select count(*) from demo.cities").fetchone() == (CITIES,)
        assert conn.execute("show ssl").fetchone() == ("on",)


def test_psycopg_direct_tls_negotiation(required, pki):
    assert psycopg.pq.version() >= 170000, "psycopg's libpq has no sslnegotiation=direct"
    dsn = libpq_dsn(required, sslmode="verify-full", sslrootcert=str(pki.ca_cert), sslnegotiation="direct")
    log_size = required.log_path.stat().st_size
    with psycopg.connect(dsn) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("select count(*) from demo.cities").fetchone() == (CITIES,)
    assert "ALPN postgresql, direct" in required.log_path.read_bytes()[log_size:].decode(errors="replace")


def test_psycopg_verify_full_fails_with_a_wrong_ca_or_name(required, pki, wrong_ca):
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(libpq_dsn(required, sslmode="verify-full", sslrootcert=str(wrong_ca.ca_cert)))
    with pytest.raises(psycopg.OperationalError, match='does not match host name "icegres.invalid"'):
        psycopg.connect(libpq_dsn(required, host="icegres.invalid", hostaddr="127.0.0.1", sslmode="verify-full",
                                  sslrootcert=str(pki.ca_cert)))


def test_psycopg_plaintext_is_refused_and_prefer_gets_tls(required, optional, pki):
    with pytest.raises(psycopg.OperationalError) as refused:
        psycopg.connect(libpq_dsn(required, host="127.0.0.1", sslmode="disable"))
    assert NO_HBA in str(refused.value)
    # Without --tls-required both work; `ssl` is server-wide in PostgreSQL: on either way.
    with psycopg.connect(libpq_dsn(optional, sslmode="disable")) as conn:
        assert not conn.pgconn.ssl_in_use and conn.execute("show ssl").fetchone() == ("on",)
    with psycopg.connect(libpq_dsn(optional, sslmode="prefer")) as conn:
        assert conn.pgconn.ssl_in_use


@pytest.mark.parametrize("cancel", ["cancel", "cancel_safe"])
def test_a_cancel_reaches_a_session_on_tls(required, cancel):
    # cancel: libpq's PQcancel, a plaintext CancelRequest (admitted with --tls-required, as in
    # PostgreSQL: a cancel is not a login); cancel_safe: libpq 17+'s PQcancelCreate, which
    # negotiates TLS for the cancel connection as the main one did.
    with psycopg.connect(libpq_dsn(required, sslmode="require"), autocommit=True) as conn:
        threading.Timer(0.5, getattr(conn, cancel)).start()
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("select a.id, b.id from demo.trips a cross join demo.trips b cross join demo.cities c")
        assert time.monotonic() - started < 20
        assert conn.execute("select 1").fetchone() == (1,)


# --- asyncpg -----------------------------------------------------------------------------------------


def asyncpg_run(coro):
    async def bounded():
        return await asyncio.wait_for(coro, 60)
    return asyncio.run(bounded())


def verify_full_context(pki: Pki, alpn: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))  # hostname checked: verify-full
    if alpn:
        context.set_alpn_protocols(["postgresql"])
    return context


@pytest.mark.parametrize("mode", ["verify-full", "require", "direct"])
def test_asyncpg(required, pki, mode):
    async def body():
        kwargs: dict = {"ssl": "require"} if mode == "require" else {"ssl": verify_full_context(pki, mode == "direct")}
        conn = await asyncpg.connect(host="localhost", port=required.port, user=required.user,
                                     database=required.database, direct_tls=mode == "direct", **kwargs)
        try:
            assert conn._transport.get_extra_info("ssl_object") is not None
            assert await conn.fetchval("select count(*) from demo.cities") == CITIES
        finally:
            await conn.close()

    asyncpg_run(body())


def test_asyncpg_direct_tls_without_alpn_is_hung_up_on(required, pki):
    async def body():
        with pytest.raises((ConnectionError, asyncpg.exceptions.ConnectionDoesNotExistError, OSError)):
            await asyncpg.connect(host="localhost", port=required.port, user=required.user,
                                  database=required.database, ssl=verify_full_context(pki), direct_tls=True)

    asyncpg_run(body())


# --- pgjdbc ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jdbc_classes(tmp_path_factory) -> tuple[Path, Path]:
    assert shutil.which("javac") and shutil.which("java"), "JDK missing; run infra/system-deps.sh"
    jar, out = _jar(), tmp_path_factory.mktemp("jdbc_tls_classes")
    subprocess.run(["javac", "-cp", str(jar), "-d", str(out), str(JAVA_SOURCE)], check=True, timeout=120,
                   capture_output=True)
    return jar, out


def jdbc(server: IcegresServer, classes: tuple[Path, Path], host: str, options: str) -> dict[str, str]:
    jar, out = classes
    url = f"jdbc:postgresql://{host}:{server.port}/{server.database}?{options}"
    proc = subprocess.run(["java", "-cp", f"{jar}:{out}", "IcegresTlsCheck", url, server.user],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    facts = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert facts.get("done") == "true"
    return facts


@pytest.mark.parametrize("options", [
    "ssl=true&sslmode=verify-full&sslrootcert={ca}",
    "sslmode=require",
    "ssl=true&sslmode=verify-full&sslrootcert={ca}&sslNegotiation=direct",
])
def test_pgjdbc(required, pki, jdbc_classes, options):
    log_size = required.log_path.stat().st_size
    facts = jdbc(required, jdbc_classes, "localhost", options.format(ca=pki.ca_cert))
    assert facts.get("cities") == str(CITIES), facts
    assert facts.get("ssl") == "on"
    negotiated = required.log_path.read_bytes()[log_size:].decode(errors="replace")
    # pgjdbc offers ALPN only on a direct connection (PostgreSQL 17 requires it only there).
    how = "ALPN postgresql, direct" if "sslNegotiation=direct" in options else "ALPN None, after SSLRequest"
    assert how in negotiated, negotiated[-2000:]


def test_pgjdbc_wrong_ca_and_plaintext_are_refused(required, wrong_ca, jdbc_classes):
    facts = jdbc(required, jdbc_classes, "localhost", f"ssl=true&sslmode=verify-full&sslrootcert={wrong_ca.ca_cert}")
    assert facts.get("sqlstate") == "08006" and "cities" not in facts, facts  # SSL error: connection failure
    facts = jdbc(required, jdbc_classes, "127.0.0.1", "sslmode=disable")
    assert facts.get("sqlstate") == "28000" and NO_HBA in facts.get("message", ""), facts


# --- psqlODBC ------------------------------------------------------------------------------------------


def odbc(server: IcegresServer, **extra: str) -> pyodbc.Connection:
    parts = {"DRIVER": _driver(), "SERVER": "localhost", "PORT": str(server.port), "DATABASE": server.database,
             "UID": server.user, **extra}
    return pyodbc.connect(";".join(f"{k}={v}" for k, v in parts.items()) + ";", autocommit=True, timeout=30)


@pytest.mark.parametrize("sslmode", ["verify-full", "require"])
def test_psqlodbc(required, pki, sslmode):
    conn = odbc(required, SSLmode=sslmode, pqopt=f"{{sslrootcert={pki.ca_cert}}}")
    try:
        cur = conn.cursor()
        assert cur.execute("select count(*) from demo.cities").fetchone()[0] == CITIES
        assert cur.execute("show ssl").fetchone()[0] == "on"
    finally:
        conn.close()


def test_psqlodbc_wrong_ca_and_plaintext_are_refused(required, wrong_ca):
    with pytest.raises(pyodbc.Error, match="certificate verify failed"):
        odbc(required, SSLmode="verify-full", pqopt=f"{{sslrootcert={wrong_ca.ca_cert}}}")
    with pytest.raises(pyodbc.Error, match="no pg_hba.conf entry"):
        odbc(required, SERVER="127.0.0.1", SSLmode="disable")


# --- Flight SQL on the same certificate -------------------------------------------------------------


def test_flight_sql_serves_the_same_certificate(required, pki):
    from tests.e2e.test_flightsql_transport import grpclib_read

    table = grpclib_read(f"grpc+tls://localhost:{required.flight_port}", "select count(*) as n from demo.cities",
                         tls_root_certs=pki.ca_cert.read_text())
    assert table.column("n").to_pylist() == [CITIES]


# --- the negotiation's edges, over raw sockets --------------------------------------------------------


def raw(server: IcegresServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.settimeout(10)
    return sock


def read_all(sock: socket.socket) -> bytes:
    out = bytearray()
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            out += chunk
    return bytes(out)


def startup_packet(user: str = "icegres") -> bytes:
    body = struct.pack("!i", m.PROTOCOL_3_0) + f"user\0{user}\0database\0icegres\0\0".encode()
    return struct.pack("!i", len(body) + 4) + body


def error_fields(data: bytes) -> dict[str, str]:
    assert data[:1] == b"E", data[:40]
    (length,) = struct.unpack("!i", data[1:5])
    fields = {}
    for part in data[5 : 1 + length].split(b"\0"):
        if part:
            fields[chr(part[0])] = part[1:].decode()
    return fields


def test_bytes_stuffed_behind_an_ssl_request_are_refused_inside_tls(optional, pki):
    with raw(optional) as sock:
        sock.sendall(SSL_REQUEST + startup_packet())  # a man in the middle's plaintext, pipelined
        assert sock.recv(1) == b"S"
        with verify_full_context(pki).wrap_socket(sock, server_hostname="localhost") as tls_sock:
            fields = error_fields(read_all(tls_sock))
    assert (fields["S"], fields["C"], fields["M"]) == ("FATAL", "08P01", "received unencrypted data after SSL request")


def test_a_second_ssl_request_is_refused(optional, pki):
    with raw(optional) as sock:
        sock.sendall(SSL_REQUEST)
        assert sock.recv(1) == b"S"
        with verify_full_context(pki).wrap_socket(sock, server_hostname="localhost") as tls_sock:
            tls_sock.sendall(SSL_REQUEST)
            fields = error_fields(read_all(tls_sock))
    assert fields["C"] == "0A000" and "1234.5679" in fields["M"]


def test_gssenc_is_declined_then_tls_follows(optional, pki):
    with raw(optional) as sock:
        sock.sendall(struct.pack("!ii", 8, m.GSSENC_REQUEST_CODE))
        assert sock.recv(1) == b"N"
        sock.sendall(SSL_REQUEST)
        assert sock.recv(1) == b"S"
        with verify_full_context(pki).wrap_socket(sock, server_hostname="localhost") as tls_sock:
            tls_sock.sendall(startup_packet())
            assert tls_sock.recv(1) == b"R"


def test_direct_tls_from_pythons_ssl_module_needs_alpn(optional, pki):
    with raw(optional) as sock, verify_full_context(pki, alpn=True).wrap_socket(sock, server_hostname="localhost") as s:
        assert s.selected_alpn_protocol() == "postgresql"
        s.sendall(startup_packet())
        assert s.recv(1) == b"R"
    with raw(optional) as sock, verify_full_context(pki).wrap_socket(sock, server_hostname="localhost") as s:
        s.sendall(startup_packet())
        assert read_all(s) == b""  # hung up on without a word, as PostgreSQL 17 does


@pytest.mark.parametrize("garbage", [
    b"\x16",  # one byte of a ClientHello
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a ClientHello cut short
    b"\x16\x03\x01\x00\x04\xff\xff\xff\xff",  # a malformed handshake record
    b"\x16" + bytes(range(256)) * 4,
])
def test_truncated_and_garbage_client_hellos_are_closed(optional, garbage):
    for prefix in (b"", SSL_REQUEST):
        with raw(optional) as sock:
            sock.sendall(prefix)
            if prefix:
                assert sock.recv(1) == b"S"
            sock.sendall(garbage)
            sock.shutdown(socket.SHUT_WR)
            read_all(sock)  # the server closes; an alert at most
    with psycopg.connect(libpq_dsn(optional, sslmode="require")) as conn:  # and keeps serving
        assert conn.execute("select 1").fetchone() == (1,)


def test_stalled_handshakes_do_not_delay_another_session(optional, pki):
    """50 clients that ask for TLS and then stall (half a ClientHello, or nothing) while a
    bystander on TLS runs select 1: its slowest answer stays far under a handshake deadline."""
    stalled = []
    try:
        with psycopg.connect(libpq_dsn(optional, sslmode="require")) as conn:
            conn.execute("select 1")
            for i in range(50):
                sock = raw(optional)
                sock.sendall(SSL_REQUEST)
                assert sock.recv(1) == b"S"
                if i % 2:
                    sock.sendall(b"\x16\x03\x01\x02\x00\x01")
                stalled.append(sock)
            worst = 0.0
            for _ in range(50):
                t0 = time.perf_counter()
                assert conn.execute("select 1").fetchone() == (1,)
                worst = max(worst, time.perf_counter() - t0)
        assert worst < 0.5, worst
        # Each stalled handshake is dropped at its deadline (10 s), not held for ever.
        deadline = time.monotonic() + 20
        for sock in stalled:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            assert read_all(sock) == b""
    finally:
        for sock in stalled:
            sock.close()


# --- refusing plaintext beyond loopback ------------------------------------------------------------------


def icegres_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "icegres", *argv], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={**os.environ, "ICEGRES_USERS": "alice:secret", **(env or {})})


@pytest.mark.parametrize("command", ["serve", "flight-serve"])
def test_non_loopback_without_tls_is_refused_before_anything_is_created(tmp_path, command):
    done = icegres_cli(command, "--host", "0.0.0.0", "--port", "0", "--data-dir", str(tmp_path / "d"))
    assert done.returncode != 0
    what = "" if command == "serve" else "Flight SQL on "
    assert done.stderr.strip().startswith(f"refusing to serve {what}0.0.0.0 without TLS"), done.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("flags", [("--allow-plaintext",), ("--tls-cert", "{cert}", "--tls-key", "{key}")])
def test_allow_plaintext_or_tls_passes_the_check(tmp_path, pki, flags):
    # An address that cannot be resolved: start-up gets past both refusals to the bind, and no
    # public interface is ever bound by a test.
    args = [f.format(cert=pki.cert, key=pki.key) for f in flags]
    done = icegres_cli("serve", "--host", "no-such-host.invalid", "--port", "0", "--data-dir", str(tmp_path / "d"),
                       *args)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("icegres: cannot listen on no-such-host.invalid:0"), done.stderr


def test_tls_required_without_a_certificate_is_a_configuration_error(tmp_path):
    done = icegres_cli("serve", "--port", "0", "--tls-required", "--data-dir", str(tmp_path / "d"))
    assert done.returncode != 0 and "--tls-required needs TLS" in done.stderr, done.stderr
