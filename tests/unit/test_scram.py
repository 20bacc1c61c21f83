"""SCRAM-SHA-256 (icegres/pg/scram.py): RFC 7677's test vector, PostgreSQL's verifier format, the
GS2 header rules of PostgreSQL's auth-scram.c, channel binding, and the mock exchange of unknown
users. The client side of each exchange is scramp (pg8000's SCRAM library), an implementation
independent of ours."""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Iterator

import pytest
from scramp import ScramClient, ScramException

from icegres.pg import scram
from icegres.pg.errors import PgError

pytestmark = pytest.mark.unit

# RFC 7677 section 3.
RFC_USER, RFC_PASSWORD = "user", "pencil"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

CERT_HASH = bytes(range(32))  # tls-server-end-point data: the certificate's SHA-256


@contextlib.contextmanager
def pg_raises(match: str, sqlstate: str | None = None) -> Iterator[None]:
    """A PgError whose message or detail matches `match` (and whose SQLSTATE is `sqlstate`)."""
    with pytest.raises(PgError) as exc:
        yield
    text = f"{exc.value.message} {exc.value.detail or ''}"
    assert re.search(match, text), text
    if sqlstate is not None:
        assert exc.value.sqlstate == sqlstate


def rfc_exchange() -> scram.ServerExchange:
    verifier = scram.make_verifier(RFC_PASSWORD, salt=RFC_SALT, iterations=4096)
    return scram.ServerExchange(scram.MECHANISM, verifier, nonce=RFC_SERVER_NONCE)


def test_rfc7677_vector_server_side():
    ex = rfc_exchange()
    assert ex.client_first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert ex.client_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert ex.step is scram.Step.DONE


def test_rfc7677_vector_wrong_proof_is_none_not_an_error():
    ex = rfc_exchange()
    ex.client_first(RFC_CLIENT_FIRST)
    forged = RFC_CLIENT_FINAL[:-5] + b"AAAA="
    assert ex.client_final(forged) is None


def test_verifier_round_trip_and_plain_check():
    v = scram.make_verifier("s3cret")
    text = v.format()
    assert text.startswith("SCRAM-SHA-256$4096:")
    assert scram.parse_verifier(text) == v
    assert scram.verify_plain(v, "s3cret") and not scram.verify_plain(v, "s3cret ")
    assert "s3cret" not in repr(v) and base64.b64encode(v.stored_key).decode() not in repr(v)


@pytest.mark.parametrize("text", [
    "s3cret", "SCRAM-SHA-256$", "SCRAM-SHA-256$4096:c2FsdA==$xx:yy", "SCRAM-SHA-256$x:c2FsdA==$" + "A" * 44 + ":" + "A" * 44,
    "SCRAM-SHA-256$4096:c2FsdA==$" + base64.b64encode(b"k" * 31).decode() + ":" + base64.b64encode(b"k" * 32).decode(),
    "md5" + "0" * 32,
])
def test_parse_verifier_refuses_what_is_not_one(text):
    assert scram.parse_verifier(text) is None


def test_rfc7677_user_as_a_verifier_line():
    # docs/security.md's example: RFC 7677's user (password "pencil") in PostgreSQL's format. A
    # verifier made by a real PostgreSQL 15 is checked in tests/e2e/test_scram.py.
    text = ("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY="
            ":wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=")
    parsed = scram.parse_verifier(text)
    assert parsed is not None and scram.verify_plain(parsed, "pencil") and parsed.format() == text
    v = scram.make_verifier("x", salt=b"0123456789abcdef")
    again = scram.parse_verifier(v.format())
    assert again is not None and scram.verify_plain(again, "x")


def drive(ex: scram.ServerExchange, client: ScramClient) -> bytes | None:
    server_first = ex.client_first(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    final = ex.client_final(client.get_client_final().encode())
    if final is not None:
        client.set_server_final(final.decode())  # raises unless the server signature is right
    return final


def test_scramp_client_logs_in_and_checks_the_server_signature():
    v = scram.make_verifier("pässwörd")  # SASLprep'd identically on both sides
    assert drive(scram.ServerExchange(scram.MECHANISM, v), ScramClient([scram.MECHANISM], "u", "pässwörd"))


def test_user_name_in_the_scram_message_is_ignored():
    v = scram.make_verifier("pw")
    # pgjdbc sends "*", libpq an empty name, scramp the user: the startup user is the one that counts.
    for name in ("*", "someone-else"):
        assert drive(scram.ServerExchange(scram.MECHANISM, v), ScramClient([scram.MECHANISM], name, "pw"))
    # libpq's empty n= (scramp refuses to send one): the RFC vector's messages with the name cut.
    ex = scram.ServerExchange(scram.MECHANISM, scram.make_verifier(RFC_PASSWORD, salt=RFC_SALT), nonce="S")
    assert ex.client_first(b"n,,n=,r=abc").startswith(b"r=abcS,")


def test_wrong_password_fails_at_the_end():
    v = scram.make_verifier("pw")
    assert drive(scram.ServerExchange(scram.MECHANISM, v), ScramClient([scram.MECHANISM], "u", "nope")) is None


def test_mock_exchange_for_an_unknown_user_looks_real_and_fails():
    salts = set()
    for _ in range(2):
        mock = scram.mock_verifier("mallory", b"server-secret")
        ex = scram.ServerExchange(scram.MECHANISM, mock, doomed=True)
        first = ex.client_first(b"n,,n=,r=abcdef").decode()
        salts.add(first.split(",")[1])
        assert first.endswith(",i=4096")
    assert len(salts) == 1  # the same salt on every attempt, as a real user's would be
    assert scram.mock_verifier("eve", b"server-secret").salt != scram.mock_verifier("mallory", b"server-secret").salt
    # Even the right proof for the mock keys is refused: a doomed exchange never succeeds.
    salted = scram.salted_password("guess", mock.salt, mock.iterations)
    doomed = scram.ServerExchange(scram.MECHANISM, scram.make_verifier("guess", salt=mock.salt), doomed=True)
    client = ScramClient([scram.MECHANISM], "u", "guess")
    assert salted and drive(doomed, client) is None


# --- channel binding and the GS2 header (PostgreSQL's read_client_first_message) ------------------


def plus_client(password: str = "pw", data: bytes = CERT_HASH) -> ScramClient:
    return ScramClient([scram.MECHANISM_PLUS], "u", password, channel_binding=("tls-server-end-point", data))


def test_plus_with_matching_binding_logs_in():
    v = scram.make_verifier("pw")
    ex = scram.ServerExchange(scram.MECHANISM_PLUS, v, channel_binding=CERT_HASH)
    assert drive(ex, plus_client())


def test_plus_with_another_certificate_hash_is_refused():
    v = scram.make_verifier("pw")
    ex = scram.ServerExchange(scram.MECHANISM_PLUS, v, channel_binding=CERT_HASH)
    with pg_raises("SCRAM channel binding check failed", "08P01"):
        drive(ex, plus_client(data=bytes(32)))  # a man in the middle presents its own certificate


def test_plus_without_tls_is_an_invalid_mechanism():
    with pg_raises("invalid SASL authentication mechanism"):
        scram.ServerExchange(scram.MECHANISM_PLUS, scram.make_verifier("pw"), channel_binding=None)


def test_y_flag_when_the_server_offered_plus_is_a_downgrade():
    ex = scram.ServerExchange(scram.MECHANISM, scram.make_verifier("pw"), channel_binding=CERT_HASH)
    with pg_raises("SCRAM channel binding negotiation error", "08P01"):
        ex.client_first(b"y,,n=,r=abc")


def test_y_flag_on_plaintext_is_fine_and_c_must_repeat_it():
    v = scram.make_verifier("pw")
    ex = scram.ServerExchange(scram.MECHANISM, v)
    first = ex.client_first(b"y,,n=,r=abc").decode()
    assert first.startswith("r=abc")
    with pg_raises("unexpected SCRAM channel-binding attribute"):
        ex.client_final(b"c=biws,r=" + first.split(",")[0][2:].encode() + b",p=" + base64.b64encode(bytes(32)))


@pytest.mark.parametrize("mechanism, binding, message, match", [
    (scram.MECHANISM_PLUS, CERT_HASH, b"n,,n=,r=abc", "does not include channel binding data"),
    (scram.MECHANISM_PLUS, CERT_HASH, b"y,,n=,r=abc", "does not include channel binding data"),
    (scram.MECHANISM, None, b"p=tls-server-end-point,,n=,r=abc", "includes channel binding data"),
    (scram.MECHANISM_PLUS, CERT_HASH, b"p=tls-unique,,n=,r=abc", 'unsupported SCRAM channel-binding type "tls-unique"'),
    (scram.MECHANISM, None, b"x,,n=,r=abc", "Unexpected channel-binding flag"),
    (scram.MECHANISM, None, b"n,a=bob,n=,r=abc", "authorization identity"),
    (scram.MECHANISM, None, b"n,,m=ext,n=,r=abc", "unsupported SCRAM extension"),
    (scram.MECHANISM, None, b"n,,r=abc", 'Expected attribute "n"'),
    (scram.MECHANISM, None, b"n,,n=,r=", "nonce"),
    (scram.MECHANISM, None, b"n,,n=,r=" + b"a" * 2000, "too long"),
    (scram.MECHANISM, None, b"n,,n=\xff,r=abc", "UTF-8"),
])
def test_client_first_refusals_follow_postgres(mechanism, binding, message, match):
    ex = scram.ServerExchange(mechanism, scram.make_verifier("pw"), channel_binding=binding)
    with pg_raises(match):
        ex.client_first(message)


def test_client_final_refusals():
    v = scram.make_verifier("pw")
    ex = scram.ServerExchange(scram.MECHANISM, v)
    ex.client_first(b"n,,n=,r=abc")
    with pg_raises("Nonce does not match"):
        ex.client_final(b"c=biws,r=abcX,p=" + base64.b64encode(bytes(32)))
    ex = scram.ServerExchange(scram.MECHANISM, v, nonce="S")
    ex.client_first(b"n,,n=,r=abc")
    with pg_raises("Garbage found"):
        ex.client_final(b"c=biws,r=abcS,p=" + base64.b64encode(bytes(32)) + b",x=1")
    ex = scram.ServerExchange(scram.MECHANISM, v, nonce="S")
    ex.client_first(b"n,,n=,r=abc")
    with pg_raises("Malformed proof"):
        ex.client_final(b"c=biws,r=abcS,p=AAAA")
    with pg_raises("out of order"):
        ex.client_final(b"c=biws,r=abcS,p=AAAA")


def test_saslprep_matches_scramp():
    from scramp.utils import saslprep as scramp_saslprep

    for password in ("I\u00adX", "\u2168", "a\u00a0b", "ｐａｓｓ", "plain ascii"):
        assert scram.saslprep(password) == scramp_saslprep(password).encode()
    # Prohibited characters: PostgreSQL (and libpq) fall back to the raw bytes.
    assert scram.saslprep("a\u0007é") == "a\u0007é".encode()
    with pytest.raises(ScramException):
        scramp_saslprep("a\u0007é")
