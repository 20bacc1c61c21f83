"""pgwire's TLS negotiation: the pure machine (negotiation.py) by its table, the handshake driven
in-process over memory streams with a real TLS client (Python's ssl through trio.SSLStream), the
edges a hostile client can reach (stuffed bytes, a second request, a stalled or truncated
handshake: virtual time, so the 10 s deadline costs nothing), and tls-server-end-point against
openssl's own fingerprints."""

from __future__ import annotations

import contextlib
import ssl
import struct
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icegres.config import Settings, refuse_plaintext, resolve
from icegres.pg.channel_binding import signature_algorithm, tls_server_end_point
from icegres.pg.errors import PgError
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire import negotiation as n
from icegres.protocol.pgwire import startup, tls
from icegres.protocol.pgwire.framing import FrameDecoder
from icegres.tls import certificate_der
from tests.support.tls import Pki, ca_signed

pytestmark = pytest.mark.unit

ON = n.Config(tls=True, tls_required=False)
OFF = n.Config(tls=False, tls_required=False)
REQUIRED = n.Config(tls=True, tls_required=True)


# --- the machine ---------------------------------------------------------------------------------


def test_ssl_request_is_answered_s_with_tls_and_n_without():
    state, effects = n.step(n.State(), n.SSLRequested(pipelined=False), ON)
    assert effects == (n.Answer(b"S"), n.StartTls(direct=False))
    assert state.encrypted and state.tls_done and state.gss_done
    state, effects = n.step(n.State(), n.SSLRequested(pipelined=False), OFF)
    assert effects == (n.Answer(b"N"),) and not state.encrypted and state.tls_done and not state.gss_done


def test_gssenc_is_always_declined_and_then_ssl_may_follow():
    state, effects = n.step(n.State(), n.GSSENCRequested(pipelined=False), ON)
    assert effects == (n.Answer(b"N"),)
    state, effects = n.step(state, n.SSLRequested(pipelined=False), ON)
    assert effects == (n.Answer(b"S"), n.StartTls(direct=False))


def test_a_second_request_is_an_unsupported_protocol_as_in_postgresql():
    for config in (ON, OFF):
        state, _ = n.step(n.State(), n.SSLRequested(pipelined=False), config)
        _, effects = n.step(state, n.SSLRequested(pipelined=False), config)
        (refuse,) = effects
        assert isinstance(refuse, n.Refuse) and refuse.error.sqlstate == "0A000"
        assert refuse.error.message == "unsupported frontend protocol 1234.5679: server supports 3.0 to 3.0"
    state, _ = n.step(n.State(), n.GSSENCRequested(pipelined=False), ON)
    _, (refuse,) = n.step(state, n.GSSENCRequested(pipelined=False), ON)
    assert "1234.5680" in refuse.error.message
    # On top of TLS no GSSAPI negotiation either (PostgreSQL sets gss_done with ssl_done).
    state, _ = n.step(n.State(), n.SSLRequested(pipelined=False), ON)
    _, (refuse,) = n.step(state, n.GSSENCRequested(pipelined=False), ON)
    assert refuse.error.sqlstate == "0A000"


def test_bytes_behind_a_request_are_refused_after_the_handshake():
    state, effects = n.step(n.State(), n.SSLRequested(pipelined=True), ON)
    assert effects == (n.Answer(b"S"), n.StartTls(direct=False))
    _, (refuse,) = n.step(state, n.HandshakeDone(alpn="postgresql"), ON)
    assert refuse.error.sqlstate == "08P01" and refuse.error.message == "received unencrypted data after SSL request"
    _, effects = n.step(n.State(), n.SSLRequested(pipelined=True), OFF)
    assert effects[0] == n.Answer(b"N") and effects[1].error.message == "received unencrypted data after SSL request"
    _, effects = n.step(n.State(), n.GSSENCRequested(pipelined=True), ON)
    assert effects[1].error.message == "received unencrypted data after GSSAPI encryption request"


def test_direct_tls_needs_configured_tls_and_alpn_postgresql():
    _, effects = n.step(n.State(), n.ClientHelloArrived(), OFF)
    assert effects == (n.HangUp(),)
    state, effects = n.step(n.State(), n.ClientHelloArrived(), ON)
    assert effects == (n.StartTls(direct=True),) and state.direct
    assert n.step(state, n.HandshakeDone(alpn="postgresql"), ON)[1] == ()
    assert n.step(state, n.HandshakeDone(alpn=None), ON)[1] == (n.HangUp(),)
    # Through an SSLRequest, ALPN is optional (libpq before 17 sends none).
    state, _ = n.step(n.State(), n.SSLRequested(pipelined=False), ON)
    assert n.step(state, n.HandshakeDone(alpn=None), ON)[1] == ()


def test_tls_required_refuses_a_plaintext_startup_with_postgresqls_words():
    startup_event = n.StartupReceived("127.0.0.1", "alice", "icegres")
    _, (refuse,) = n.step(n.State(), startup_event, REQUIRED)
    assert refuse.error.sqlstate == "28000"
    assert refuse.error.message == (
        'no pg_hba.conf entry for host "127.0.0.1", user "alice", database "icegres", no encryption')
    state, _ = n.step(n.State(), n.SSLRequested(pipelined=False), REQUIRED)
    assert n.step(state, startup_event, REQUIRED)[1] == (n.Authenticate(),)
    assert n.step(n.State(), startup_event, ON)[1] == (n.Authenticate(),)
    # No user name: the session's own FATAL comes first, as in PostgreSQL.
    assert n.step(n.State(), n.StartupReceived("127.0.0.1", "", ""), REQUIRED)[1] == (n.Authenticate(),)


# --- configuration -------------------------------------------------------------------------------


def test_tls_options_resolve_from_flags_env_and_file(tmp_path):
    assert resolve({}, {"ICEGRES_TLS_CERT": "c", "ICEGRES_TLS_KEY": "k", "ICEGRES_TLS_REQUIRED": "on"}).tls_required
    cfg = tmp_path / "icegres.toml"
    cfg.write_text('allow_plaintext = true\n')
    assert resolve({"config": str(cfg)}, {}).allow_plaintext
    with pytest.raises(ValueError, match="--tls-required needs TLS"):
        resolve({"tls_required": True}, {})


def test_non_loopback_without_tls_is_refused_unless_allow_plaintext():
    exposed = Settings(host="0.0.0.0", users={"a": "b"})
    with pytest.raises(SystemExit, match="refusing to serve 0.0.0.0 without TLS"):
        refuse_plaintext(exposed, "")
    with pytest.raises(SystemExit, match="refusing to serve Flight SQL on 10.1.2.3 without TLS"):
        refuse_plaintext(Settings(host="10.1.2.3"), "Flight SQL on ")
    refuse_plaintext(Settings(host="0.0.0.0", allow_plaintext=True), "")
    refuse_plaintext(Settings(host="0.0.0.0", tls_cert="c.pem", tls_key="k.pem"), "")
    for loopback in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        refuse_plaintext(Settings(host=loopback), "")


# --- the handshake, in-process ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return ca_signed(tmp_path_factory.mktemp("pki"))


def server_tls(pki: Pki) -> tls.ServerTls:
    return tls.ServerTls.load(Settings(tls_cert=str(pki.cert), tls_key=str(pki.key)))


class Conn:
    """The ConnectionPort a session offers startup.py, over a memory stream."""

    def __init__(self, stream, server_tls: tls.ServerTls | None, *, tls_required: bool = False) -> None:
        self.server = SimpleNamespace(tls=server_tls, settings=Settings(tls_required=tls_required),
                                      cancel=lambda pid, secret: None)
        self.stream = stream
        self.decoder = FrameDecoder()
        self.peer = "test"
        self.user = ""
        self.tls: tls.TlsInfo | None = None
        self._out = bytearray()

    def send(self, data: bytes) -> None:
        self._out += data

    async def flush(self) -> None:
        data, self._out = bytes(self._out), bytearray()
        await self.stream.send_all(data)

    async def recv_more(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise EOFError
        self.decoder.feed(data)


SSL_REQUEST = struct.pack("!ii", 8, m.SSL_REQUEST_CODE)


def startup_packet(user: str = "alice") -> bytes:
    body = struct.pack("!i", m.PROTOCOL_3_0) + f"user\0{user}\0database\0icegres\0\0".encode()
    return struct.pack("!i", len(body) + 4) + body


def client_context(pki: Pki, alpn: list[str] | None = ("postgresql",)) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


async def negotiate(conn: Conn, client) -> tuple[m.StartupMessage | None, BaseException | None]:
    """Run receive_startup against `client(stream)` (an async function playing the client)."""
    client_end, server_end = trio.testing.memory_stream_pair()
    conn.stream = server_end
    out: list = [None, None]

    async def serve() -> None:
        try:
            out[0] = await startup.receive_startup(conn)
        except (PgError, EOFError) as exc:
            out[1] = exc
        await conn.stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        await client(client_end)
    return out[0], out[1]


def test_ssl_request_then_tls_then_the_startup_packet_inside_it(pki):
    conn = Conn(None, server_tls(pki))
    seen = {}

    async def client(stream):
        await stream.send_all(SSL_REQUEST)
        assert await stream.receive_some(1) == b"S"
        wrapped = trio.SSLStream(stream, client_context(pki), server_hostname="localhost")
        await wrapped.do_handshake()
        seen["alpn"] = wrapped.selected_alpn_protocol()
        await wrapped.send_all(startup_packet())

    msg, err = trio.run(negotiate, conn, client)
    assert err is None and msg is not None and msg.params["user"] == "alice"
    assert seen["alpn"] == "postgresql" and conn.tls is not None and conn.tls.alpn == "postgresql"
    assert not conn.tls.direct and conn.tls.version.startswith("TLSv1.")
    assert conn.tls.channel_binding() == tls_server_end_point(certificate_der(str(pki.cert)))
    assert isinstance(conn.stream, tls.TlsConnection)


def test_direct_tls_with_alpn_is_accepted(pki):
    conn = Conn(None, server_tls(pki))

    async def client(stream):
        wrapped = trio.SSLStream(stream, client_context(pki), server_hostname="127.0.0.1")
        await wrapped.do_handshake()
        await wrapped.send_all(startup_packet("bob"))

    msg, err = trio.run(negotiate, conn, client)
    assert err is None and msg is not None and msg.params["user"] == "bob"
    assert conn.tls is not None and conn.tls.direct and conn.tls.alpn == "postgresql"


@pytest.mark.parametrize("alpn", [None, ["h2"]])
def test_direct_tls_without_alpn_postgresql_is_hung_up_on(pki, alpn):
    conn = Conn(None, server_tls(pki))

    async def client(stream):
        wrapped = trio.SSLStream(stream, client_context(pki, alpn), server_hostname="127.0.0.1")
        await wrapped.do_handshake()
        await wrapped.send_all(startup_packet())
        assert await wrapped.receive_some(100) == b""  # closed (close_notify) without a word

    msg, err = trio.run(negotiate, conn, client)
    assert msg is None and err is None


def test_direct_tls_without_configured_tls_is_hung_up_on(pki):
    conn = Conn(None, None)

    async def client(stream):
        wrapped = trio.SSLStream(stream, client_context(pki), server_hostname="127.0.0.1")
        with pytest.raises(trio.BrokenResourceError):
            await wrapped.do_handshake()

    assert trio.run(negotiate, conn, client) == (None, None)


def test_stuffed_bytes_after_ssl_request_are_refused_inside_tls(pki):
    conn = Conn(None, server_tls(pki))
    got = {}

    async def client(stream):
        # A man in the middle appends a plaintext startup packet to the client's SSLRequest.
        await stream.send_all(SSL_REQUEST + startup_packet("mallory"))
        assert await stream.receive_some(1) == b"S"
        wrapped = trio.SSLStream(stream, client_context(pki), server_hostname="localhost")
        await wrapped.do_handshake()
        got["handshake"] = True

    msg, err = trio.run(negotiate, conn, client)
    assert msg is None and isinstance(err, PgError) and err.sqlstate == "08P01"
    assert err.message == "received unencrypted data after SSL request" and got["handshake"]


def test_stuffed_bytes_after_a_declined_request_are_refused(pki):
    conn = Conn(None, None)

    async def client(stream):
        await stream.send_all(SSL_REQUEST + startup_packet())
        assert await stream.receive_some(1) == b"N"

    msg, err = trio.run(negotiate, conn, client)
    assert msg is None and isinstance(err, PgError) and err.sqlstate == "08P01"


def test_a_second_ssl_request_inside_tls_is_refused(pki):
    conn = Conn(None, server_tls(pki))

    async def client(stream):
        await stream.send_all(SSL_REQUEST)
        assert await stream.receive_some(1) == b"S"
        wrapped = trio.SSLStream(stream, client_context(pki), server_hostname="localhost")
        await wrapped.do_handshake()
        await wrapped.send_all(SSL_REQUEST)

    msg, err = trio.run(negotiate, conn, client)
    assert isinstance(err, PgError) and err.sqlstate == "0A000"


def test_tls_required_refuses_plaintext_and_admits_tls(pki):
    async def plain(stream):
        await stream.send_all(startup_packet())

    msg, err = trio.run(negotiate, Conn(None, server_tls(pki), tls_required=True), plain)
    assert isinstance(err, PgError) and err.sqlstate == "28000" and err.message.endswith(", no encryption")

    async def encrypted(stream):
        await stream.send_all(SSL_REQUEST)
        assert await stream.receive_some(1) == b"S"
        wrapped = trio.SSLStream(stream, client_context(pki), server_hostname="localhost")
        await wrapped.do_handshake()
        await wrapped.send_all(startup_packet())

    msg, err = trio.run(negotiate, Conn(None, server_tls(pki), tls_required=True), encrypted)
    assert err is None and msg is not None


def test_a_stalled_handshake_ends_at_its_deadline_in_virtual_time(pki):
    conn = Conn(None, server_tls(pki))
    ended = {}

    async def client(stream):
        await stream.send_all(SSL_REQUEST)
        assert await stream.receive_some(1) == b"S"
        await stream.send_all(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then silence
        start = trio.current_time()
        while await stream.receive_some(100):
            pass
        ended["after_s"] = trio.current_time() - start

    clock = trio.testing.MockClock(autojump_threshold=0)
    msg, err = trio.run(negotiate, conn, client, clock=clock)
    assert msg is None and err is None
    assert ended["after_s"] == pytest.approx(tls.HANDSHAKE_TIMEOUT_S, abs=0.01)


@pytest.mark.parametrize("garbage", [b"\x16", b"\x16\x03\x01\x00\x05hello", b"\x16" + b"\xff" * 64,
                                     b"\x16\x03\x03\x40\x00" + b"\x01" * 100])
def test_truncated_or_garbage_client_hellos_end_quietly(pki, garbage):
    conn = Conn(None, server_tls(pki))

    async def client(stream):
        await stream.send_all(garbage)
        await stream.send_stream.aclose()
        while await stream.receive_some(100):
            pass

    msg, err = trio.run(negotiate, conn, client)
    assert msg is None and err is None


GSSENC_REQUEST = struct.pack("!ii", 8, m.GSSENC_REQUEST_CODE)
CANCEL = struct.pack("!iiii", 16, m.CANCEL_REQUEST_CODE, 4242, 7)
chunks = st.one_of(
    st.sampled_from([SSL_REQUEST, GSSENC_REQUEST, CANCEL, startup_packet(), startup_packet("")]),
    st.sampled_from([b"\x16", b"\x16\x03\x01", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"\x15\x03\x03\x00\x02\x02\x28"]),
    st.binary(max_size=40),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(chunks, min_size=1, max_size=6), st.booleans(), st.booleans(), st.booleans())
def test_arbitrary_negotiation_bytes_end_in_an_answer_a_refusal_or_a_close(pki, sent, with_tls, required, wait):
    """Whatever arrives before the StartupMessage, the startup phase ends (virtual time: a stalled
    handshake costs nothing here) with a StartupMessage, a PgError for the client, or a quiet
    close, and nothing else escapes."""
    conn = Conn(None, server_tls(pki) if with_tls else None, tls_required=required and with_tls)

    async def client(stream):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):  # the server hung up
            for chunk in sent:
                await stream.send_all(chunk)
                if wait:  # an honest client reads the one-byte answer before going on
                    with trio.move_on_after(0.01):
                        await stream.receive_some(1)
            await stream.send_stream.aclose()
            while await stream.receive_some(4096):
                pass

    clock = trio.testing.MockClock(autojump_threshold=0)
    msg, err = trio.run(negotiate, conn, client, clock=clock)
    assert msg is None or isinstance(msg, m.StartupMessage)
    assert err is None or isinstance(err, PgError | EOFError)
    if isinstance(err, PgError):
        assert err.sqlstate in ("08P01", "0A000", "28000"), err


def test_the_socket_under_tls_is_found_for_the_hang_up_watch(pki):
    """hangup.py polls a running session's socket: under TLS it is the one below the TLS layers
    (and the direct reply from worker threads, which writes plaintext to it, is off)."""
    sock = SimpleNamespace(fileno=lambda: 42)
    transport = SimpleNamespace(socket=sock)
    wrapped = tls._Replaying(transport, b"already")
    ssl_stream = trio.SSLStream(wrapped, server_tls(pki).context, server_side=True)
    assert tls.raw_socket(tls.TlsConnection(ssl_stream)) is sock
    assert tls.raw_socket(transport) is sock
    assert tls.raw_socket(SimpleNamespace()) is None


# --- channel binding -----------------------------------------------------------------------------


@pytest.mark.parametrize(("digest", "key_type", "binding_hash"), [
    ("sha256", "rsa:2048", "sha256"),
    ("sha384", "rsa:2048", "sha384"),
    ("sha512", "rsa:2048", "sha512"),
    ("sha1", "rsa:2048", "sha256"),  # RFC 5929: SHA-1 (and MD5) signatures bind with SHA-256
    ("sha384", "ec:secp384r1", "sha384"),
    ("sha256", "ec:prime256v1", "sha256"),
])
def test_tls_server_end_point_hashes_with_the_signature_hash(tmp_path, digest, key_type, binding_hash):
    pki = ca_signed(tmp_path / f"{digest}-{key_type.replace(':', '-')}", digest=digest, key_type=key_type)
    fingerprint = subprocess.run(["openssl", "x509", "-in", str(pki.cert), "-noout", "-fingerprint",
                                  f"-{binding_hash}"], capture_output=True, text=True, check=True).stdout
    expected = bytes.fromhex(fingerprint.strip().split("=", 1)[1].replace(":", ""))
    assert tls_server_end_point(certificate_der(str(pki.cert))) == expected


def test_tls_server_end_point_refuses_what_names_no_hash(tmp_path):
    key, cert = tmp_path / "ed.key", tmp_path / "ed.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ed25519", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=ed"], check=True, capture_output=True)
    der = certificate_der(str(cert))
    assert signature_algorithm(der) == "1.3.101.112"
    with pytest.raises(ValueError, match="1.3.101.112"):
        tls_server_end_point(der)
    for broken in (b"", b"\x30\x03\x02\x01", der[:-10], b"\x04\x00"):
        with pytest.raises(ValueError, match="not a DER certificate"):
            tls_server_end_point(broken)


def test_certificate_der_reads_the_first_certificate_of_a_chain(pki: Pki, tmp_path: Path):
    chain = tmp_path / "chain.pem"
    chain.write_text(pki.cert.read_text() + pki.ca_cert.read_text())
    assert certificate_der(str(chain)) == certificate_der(str(pki.cert))
    assert ssl.DER_cert_to_PEM_cert(certificate_der(str(pki.cert))).strip() == pki.cert.read_text().strip()
