"""Codec round trips and the framing decoder, byte by byte."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from icegres.pg.errors import PgError
from icegres.protocol.pgwire import messages as m
from icegres.protocol.pgwire.framing import FrameDecoder

pytestmark = pytest.mark.unit


def frame(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def encode_parse(p: m.Parse) -> bytes:
    body = cstr(p.name) + cstr(p.sql) + struct.pack("!h", len(p.param_oids))
    body += b"".join(struct.pack("!I", o) for o in p.param_oids)
    return frame(b"P", body)


def encode_bind(b: m.Bind) -> bytes:
    body = cstr(b.portal) + cstr(b.statement)
    body += struct.pack("!h", len(b.param_formats)) + b"".join(struct.pack("!h", f) for f in b.param_formats)
    body += struct.pack("!h", len(b.params))
    for p in b.params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
    body += struct.pack("!h", len(b.result_formats)) + b"".join(struct.pack("!h", f) for f in b.result_formats)
    return frame(b"B", body)


names = st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20)


@given(name=names, sql=names, oids=st.lists(st.integers(0, 2**32 - 1), max_size=5))
def test_parse_round_trip(name, sql, oids):
    msg = m.Parse(name, sql, tuple(oids))
    dec = FrameDecoder()
    dec.feed(encode_parse(msg))
    assert dec.next_message() == msg
    assert dec.next_message() is None


@given(
    portal=names, stmt=names,
    params=st.lists(st.one_of(st.none(), st.binary(max_size=30)), max_size=5),
    fmts=st.lists(st.sampled_from([0, 1]), max_size=3),
)
def test_bind_round_trip(portal, stmt, params, fmts):
    msg = m.Bind(portal, stmt, tuple(fmts), tuple(params), tuple(fmts))
    dec = FrameDecoder()
    dec.feed(encode_bind(msg))
    assert dec.next_message() == msg


def test_byte_by_byte_framing():
    stream = frame(b"Q", cstr("select 1")) + frame(b"S", b"") + frame(b"X", b"")
    dec = FrameDecoder()
    out = []
    for i in range(len(stream)):
        dec.feed(stream[i : i + 1])
        msg = dec.next_message()
        if msg is not None:
            out.append(msg)
    assert out == [m.Query("select 1"), m.Sync(), m.Terminate()]


def test_startup_variants():
    dec = FrameDecoder()
    body = struct.pack("!i", m.PROTOCOL_3_0) + cstr("user") + cstr("bob") + cstr("database") + cstr("icegres") + b"\0"
    dec.feed(struct.pack("!i", len(body) + 4) + body)
    assert dec.next_startup() == m.StartupMessage(m.PROTOCOL_3_0, {"user": "bob", "database": "icegres"})
    dec.feed(struct.pack("!ii", 8, m.SSL_REQUEST_CODE))
    assert dec.next_startup() == m.SSLRequest()
    dec.feed(struct.pack("!iiii", 16, m.CANCEL_REQUEST_CODE, 42, 7))
    assert dec.next_startup() == m.CancelRequest(42, 7)


@pytest.mark.parametrize(
    "data",
    [
        frame(b"P", b"no-terminator"),
        frame(b"B", cstr("") + cstr("") + struct.pack("!h", -1)),
        frame(b"B", cstr("") + cstr("") + struct.pack("!hh", 0, 1) + struct.pack("!i", 100) + b"short"),
        frame(b"D", b"Z" + cstr("x")),
        frame(b"Q", cstr("select 1") + b"extra"),
        frame(b"?", b""),
        b"Q" + struct.pack("!i", 2),
        b"Q" + struct.pack("!i", 2**31 - 1),
    ],
)
def test_malformed_messages_are_protocol_errors(data):
    dec = FrameDecoder()
    dec.feed(data)
    with pytest.raises(PgError) as exc:
        dec.next_message()
    assert exc.value.sqlstate in ("08P01", "22021")


@given(st.binary(max_size=200))
def test_decoder_never_raises_anything_but_pgerror(data):
    dec = FrameDecoder()
    dec.feed(data)
    try:
        while dec.next_message() is not None:
            pass
    except PgError:
        pass


@given(st.binary(max_size=200))
def test_startup_decoder_never_raises_anything_but_pgerror(data):
    dec = FrameDecoder()
    dec.feed(data)
    try:
        dec.next_startup()
    except PgError:
        pass


def test_backend_encoders():
    assert m.ready_for_query("I") == b"Z\x00\x00\x00\x05I"
    assert m.command_complete("SELECT 1") == b"C\x00\x00\x00\x0dSELECT 1\x00"
    err = m.error_response(PgError("42P01", 'relation "x" does not exist', position=15))
    assert err.startswith(b"E") and b"C42P01\0" in err and b"P15\0" in err and err.endswith(b"\0\0")
    rd = m.row_description([m.FieldDescription("id", 20, 8)])
    assert rd == b"T" + struct.pack("!i", 4 + 2 + 3 + 18) + struct.pack("!h", 1) + b"id\0" + struct.pack("!IhIhih", 0, 0, 20, 8, -1, 0)


def test_p_messages_decode_by_the_authentication_state():
    """'p' is a PasswordMessage, SASLInitialResponse or SASLResponse: framing keeps the body, the
    exchange in auth.py reads it as what it expects."""

    def framed(body: bytes) -> m.PasswordMessage:
        decoder = FrameDecoder()
        decoder.feed(b"p" + struct.pack("!i", len(body) + 4) + body)
        msg = decoder.next_message()
        assert isinstance(msg, m.PasswordMessage)
        return msg

    assert m.decode_password(framed(b"s3cret \xc3\xbc\0")) == "s3cret ü"
    assert m.decode_password(framed(b"\xff\0")).encode("utf-8", "surrogateescape") == b"\xff"
    for bad in (b"no-nul", b"a\0b\0"):
        with pytest.raises(PgError, match="invalid password packet size"):
            m.decode_password(framed(bad))
    first = m.decode_sasl_initial(framed(b"SCRAM-SHA-256\0" + struct.pack("!i", 5) + b"n,,n="))
    assert first == m.SASLInitialResponse("SCRAM-SHA-256", b"n,,n=")
    assert m.decode_sasl_initial(framed(b"OAUTHBEARER\0" + struct.pack("!i", -1))).data is None
    for bad in (b"SCRAM-SHA-256\0" + struct.pack("!i", 9) + b"short", b"SCRAM-SHA-256\0" + struct.pack("!i", -2),
                b"SCRAM-SHA-256\0" + struct.pack("!i", 1) + b"ab"):
        with pytest.raises(PgError) as exc:
            m.decode_sasl_initial(framed(bad))
        assert exc.value.sqlstate == "08P01"
    assert m.decode_sasl_response(framed(b"c=biws,r=x,p=y")).data == b"c=biws,r=x,p=y"
    decoder = FrameDecoder()
    decoder.max_message_bytes = 65539  # what auth.py allows before a client has logged in
    decoder.feed(b"p" + struct.pack("!i", 1 << 20))
    with pytest.raises(PgError, match="invalid message length"):
        decoder.next_message()
