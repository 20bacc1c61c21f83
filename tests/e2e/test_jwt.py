"""JWT logins: a token in the password field (psycopg), PostgreSQL 18's OAUTHBEARER (libpq 18 with
a custom flow through its auth-data hook, and the exchange byte by byte over a raw socket), a role
from a configured claim (--jwt-role-claim) rather than `sub`, and
Flight SQL bearer tokens (the ADBC driver's authorization header). Expired, wrong-audience,
wrong-issuer, badly signed, unknown-kid, `alg: none` and HS256-with-the-public-key tokens are each
refused; an identity provider that does not answer fails token logins with 28000 without holding
up anyone else; the logs never show a token.

The provider is tests/support/idp.py: RSA and EC keys, their JWKS served over HTTP on port 0 (or
written to a file), tokens minted with them.
"""

from __future__ import annotations

import json
import threading
import time

import adbc_driver_flightsql.dbapi as adbc
import psycopg
import pytest

from tests.support import idp
from tests.support.icegres_server import refused_port, running_icegres
from tests.support.libpq_oauth import bearer_tokens
from tests.support.pgwire_raw import RawConnection, mechanisms

pytestmark = pytest.mark.e2e

RSA = idp.SigningKey.rsa("rsa-1")
EC = idp.SigningKey.ec("ec-1")
FORGER = idp.SigningKey.rsa("rsa-1")  # same kid, another key: what an attacker signs with
STRANGER = idp.SigningKey.rsa("rsa-unknown")  # a kid the provider never published
ALICE_PASSWORD = "alice-password"
MINTED: list[str] = []  # every token this module made: none may reach a log


def token(key: idp.SigningKey = RSA, sub: str = "carol", **kw) -> str:
    out = idp.mint(key, idp.claims(sub, **kw))
    MINTED.append(out)
    return out


def jwt_args(jwks: str) -> tuple[str, ...]:
    # These tests refuse many tokens from one address on purpose: the failed-login back-off
    # (test_limits.py tests it) is kept to milliseconds so that it does not set their pace.
    return ("--jwt-jwks", jwks, "--jwt-issuer", idp.ISSUER, "--jwt-audience", idp.AUDIENCE,
            "--auth-failure-delay-ms", "10", "--auth-failure-delay-max-ms", "40")


@pytest.fixture(scope="module")
def provider():
    with idp.serving_jwks(idp.jwks(RSA, EC)) as served:
        yield served


@pytest.fixture(scope="module")
def pwfile(tmp_path_factory):
    path = tmp_path_factory.mktemp("jwt") / "users"
    path.write_text(f"alice:{ALICE_PASSWORD}\n")
    return path


@pytest.fixture(scope="module")
def token_server(seeded_dir, provider, pwfile):
    """--auth-method password: a JWT in the password field; Flight SQL on too."""
    args = ("--password-file", str(pwfile), "--auth-method", "password", "--flight-port", "0", *jwt_args(provider.url))
    with running_icegres(seeded_dir, args=args) as srv:
        yield srv


@pytest.fixture(scope="module")
def oauth_server(seeded_dir, tmp_path_factory, pwfile):
    """The default method: SCRAM for users with a verifier, OAUTHBEARER for the others; the
    JWKS read from a file."""
    jwks_file = tmp_path_factory.mktemp("jwks") / "jwks.json"
    jwks_file.write_text(json.dumps(idp.jwks(RSA, EC)))
    with running_icegres(seeded_dir, args=("--password-file", str(pwfile), *jwt_args(str(jwks_file)))) as srv:
        yield srv


@pytest.fixture(scope="module")
def claim_server(seeded_dir, provider, pwfile):
    """--jwt-role-claim preferred_username: the role is that claim, `sub` plays no part. The
    default method (OAUTHBEARER for users without a password); Flight SQL on too."""
    args = ("--password-file", str(pwfile), "--flight-port", "0", "--jwt-role-claim", "preferred_username",
            *jwt_args(provider.url))
    with running_icegres(seeded_dir, args=args) as srv:
        yield srv


def refused(exc: BaseException, user: str = "carol") -> bool:
    return f'password authentication failed for user "{user}"' in str(exc)


# --- a token in the password field -----------------------------------------------------------------


def test_psycopg_token_as_password(token_server):
    for key in (RSA, EC):
        with psycopg.connect(token_server.dsn(user="carol", password=token(key))) as c:
            assert c.execute("select current_user, count(*) from demo.cities").fetchone() == ("carol", 20)
    # Password users of the same server still log in with their passwords.
    with psycopg.connect(token_server.dsn(user="alice", password=ALICE_PASSWORD)) as c:
        assert c.execute("select current_user").fetchone() == ("alice",)


def bad_tokens() -> dict[str, str]:
    good = idp.claims("carol")
    unsigned = idp.mint_unsigned(good, RSA.kid)
    confused = idp.mint_hs256_with_public_key(RSA, good)
    MINTED.extend((unsigned, confused))
    return {
        "expired": token(lifetime_s=-60),
        "wrong audience": token(aud="another-service"),
        "wrong issuer": token(iss="https://evil.example"),
        "bad signature": token(FORGER),
        "unknown kid": token(STRANGER),
        "not yet valid": token(not_before_s=3600),
        "alg none": unsigned,
        "HS256 with the public key": confused,
        "another role": token(sub="dave"),
    }


@pytest.mark.parametrize("case", list(bad_tokens()))
def test_bad_tokens_are_refused(token_server, case):
    with pytest.raises(psycopg.OperationalError) as exc:
        psycopg.connect(token_server.dsn(user="carol", password=bad_tokens()[case]))
    assert refused(exc.value), exc.value


def test_adbc_flight_sql_bearer_token(token_server):
    uri = f"grpc://127.0.0.1:{token_server.flight_port}"
    header = "adbc.flight.sql.authorization_header"
    with adbc.connect(uri, db_kwargs={header: f"Bearer {token(EC, sub='erin')}"}, autocommit=True) as c, \
            c.cursor() as cur:
        cur.execute("select current_user, count(*) from demo.cities")
        assert cur.fetchone() == ("erin", 20)
    for bad in (token(lifetime_s=-60), token(aud="another-service"), token(FORGER), token(STRANGER)):
        with pytest.raises(adbc.Error, match="UNAUTHENTICATED|invalid or expired bearer token"):
            with adbc.connect(uri, db_kwargs={header: f"Bearer {bad}"}, autocommit=True) as c, c.cursor() as cur:
                cur.execute("select 1")
                cur.fetchone()
    # Basic credentials are checked against the same verifiers as pgwire's.
    with adbc.connect(uri, db_kwargs={"username": "alice", "password": ALICE_PASSWORD}, autocommit=True) as c, \
            c.cursor() as cur:
        cur.execute("select current_user")
        assert cur.fetchone() == ("alice",)


# --- OAUTHBEARER ---------------------------------------------------------------------------------


def oauth_dsn(srv, user: str = "carol") -> str:
    return srv.dsn(user=user, oauth_issuer=idp.ISSUER, oauth_client_id="icegres-tests")


def test_libpq18_oauthbearer_with_discovery(oauth_server):
    """libpq asks the server for its issuer first (an empty auth=), checks the discovery URI it is
    given names its oauth_issuer, then reconnects with the token its flow produced."""
    seen: list[tuple[str, str]] = []
    with bearer_tokens(token(), seen), psycopg.connect(oauth_dsn(oauth_server)) as c:
        assert c.execute("select current_user").fetchone() == ("carol",)
    assert seen == [(idp.ISSUER + "/.well-known/openid-configuration", "openid")]


def test_libpq18_oauthbearer_refusals_are_28000(oauth_server):
    for bad in (token(lifetime_s=-60), token(aud="another-service"), token(STRANGER), token(sub="dave")):
        with bearer_tokens(bad), pytest.raises(psycopg.OperationalError) as exc:
            psycopg.connect(oauth_dsn(oauth_server))
        assert 'OAuth bearer authentication failed for user "carol"' in str(exc.value), exc.value


def test_password_users_keep_scram_beside_oauth(oauth_server):
    dsn = oauth_server.dsn(user="alice", password=ALICE_PASSWORD, require_auth="scram-sha-256")
    with psycopg.connect(dsn) as c:
        assert c.execute("select current_user").fetchone() == ("alice",)


def test_oauthbearer_exchange_on_the_wire(oauth_server):
    """RFC 7628 by hand: success, a refused token (JSON status, the client's \\x01, then 28000),
    discovery, and PostgreSQL's refusals of a malformed message."""
    def start(raw: RawConnection) -> None:
        assert mechanisms(raw.startup("carol", oauth_server.database)) == ["OAUTHBEARER"]

    with RawConnection(oauth_server.host, oauth_server.port) as raw:
        start(raw)
        raw.sasl_initial("OAUTHBEARER", f"n,,\x01auth=Bearer {token()}\x01\x01".encode())
        replies = raw.read_until_ready()
        assert replies[0].kind == b"R" and replies[0].auth_code == 0 and replies[-1].kind == b"Z"

    for auth in (f"Bearer {token(lifetime_s=-60)}", ""):
        with RawConnection(oauth_server.host, oauth_server.port) as raw:
            start(raw)
            raw.sasl_initial("OAUTHBEARER", f"n,,\x01auth={auth}\x01\x01".encode())
            challenge = raw.read()
            assert challenge.auth_code == 11
            assert json.loads(challenge.auth_data) == {
                "status": "invalid_token", "scope": "openid",
                "openid-configuration": idp.ISSUER + "/.well-known/openid-configuration"}
            raw.sasl_response(b"\x01")
            error = raw.read().error_fields()
            assert (error["C"], error["M"]) == ("28000", 'OAuth bearer authentication failed for user "carol"')

    for message, code, text in (
        (b"p=tls-server-end-point,,\x01auth=Bearer x\x01\x01", "08P01", "malformed OAUTHBEARER message"),
        (b"n,a=carol,\x01auth=Bearer x\x01\x01", "0A000", "authorization identity"),
        (b"n,,\x01auth=Bearer x\x01", "08P01", "malformed OAUTHBEARER message"),
    ):
        with RawConnection(oauth_server.host, oauth_server.port) as raw:
            start(raw)
            raw.sasl_initial("OAUTHBEARER", message)
            error = raw.read().error_fields()
            assert error["C"] == code and text in error["M"], error


def test_role_from_a_configured_claim(claim_server):
    """The role is the configured claim's value: `sub` (an opaque id here, as most providers
    issue) neither names the role nor stands in for a missing claim."""
    subject = "0b6f4e2a-5c1d-4f7e-9a3b-2d8c7e1f6a90"
    with bearer_tokens(token(sub=subject, preferred_username="frank")), \
            psycopg.connect(oauth_dsn(claim_server, "frank")) as c:
        assert c.execute("select current_user, session_user").fetchone() == ("frank", "frank")
    for user, bad in (
        ("frank", token(sub="frank")),  # no preferred_username: `sub` is not a fallback
        ("frank", token(sub="frank", preferred_username="gina")),  # names another role
        (subject, token(sub=subject, preferred_username="frank")),  # logging in as the `sub`
        ("frank", token(sub=subject, preferred_username=["frank"])),  # not a string
    ):
        with bearer_tokens(bad), pytest.raises(psycopg.OperationalError) as exc:
            psycopg.connect(oauth_dsn(claim_server, user))
        assert f'OAuth bearer authentication failed for user "{user}"' in str(exc.value), exc.value
    # A token without the claim, on the wire: PostgreSQL's 28000.
    with RawConnection(claim_server.host, claim_server.port) as raw:
        assert mechanisms(raw.startup("frank", claim_server.database)) == ["OAUTHBEARER"]
        raw.sasl_initial("OAUTHBEARER", f"n,,\x01auth=Bearer {token(sub='frank')}\x01\x01".encode())
        assert json.loads(raw.read().auth_data)["status"] == "invalid_token"
        raw.sasl_response(b"\x01")
        error = raw.read().error_fields()
        assert (error["C"], error["M"]) == ("28000", 'OAuth bearer authentication failed for user "frank"'), error
    # Flight SQL has no login user: the claim is the user.
    uri = f"grpc://127.0.0.1:{claim_server.flight_port}"
    header = "adbc.flight.sql.authorization_header"
    with adbc.connect(uri, db_kwargs={header: f"Bearer {token(EC, sub=subject, preferred_username='gina')}"},
                      autocommit=True) as c, c.cursor() as cur:
        cur.execute("select current_user")
        assert cur.fetchone() == ("gina",)
    with pytest.raises(adbc.Error, match="UNAUTHENTICATED|invalid or expired bearer token"):
        with adbc.connect(uri, db_kwargs={header: f"Bearer {token(EC, sub='gina')}"}, autocommit=True) as c, \
                c.cursor() as cur:
            cur.execute("select 1")
            cur.fetchone()


# --- a provider that cannot be reached -------------------------------------------------------------


def test_unreachable_provider_fails_token_logins_and_stalls_nobody(seeded_dir, pwfile):
    with idp.silent_jwks_url() as silent, refused_port() as closed:
        for url in (silent, f"http://127.0.0.1:{closed}/jwks.json"):
            args = ("--password-file", str(pwfile), "--auth-method", "password", *jwt_args(url))
            with running_icegres(seeded_dir, args=args) as srv:
                outcome: dict[str, object] = {}

                def token_login(srv=srv, outcome=outcome) -> None:
                    started = time.monotonic()
                    try:
                        psycopg.connect(srv.dsn(user="carol", password=token()), connect_timeout=30)
                    except psycopg.OperationalError as exc:
                        outcome["error"] = str(exc)
                    outcome["seconds"] = time.monotonic() - started

                waiting = threading.Thread(target=token_login)
                waiting.start()
                time.sleep(0.3)  # the token login is now waiting on the provider (the silent one)
                started = time.monotonic()
                with psycopg.connect(srv.dsn(user="alice", password=ALICE_PASSWORD)) as c:
                    assert c.execute("select 1").fetchone() == (1,)
                bystander_s = time.monotonic() - started
                waiting.join(30)
                assert 'authentication failed for user "carol": the token could not be checked' in str(
                    outcome.get("error")), outcome
                assert bystander_s < 2.0, f"a password login took {bystander_s:.2f}s while the provider hung"
                assert outcome["seconds"] < 15, outcome


def test_logs_hold_no_token(token_server, oauth_server, claim_server):
    """Runs last in this module: every token minted above stays out of the server logs."""
    for srv in (token_server, oauth_server, claim_server):
        log = srv.log_path.read_text(errors="replace")
        assert "authentication failed" in log
        for minted in MINTED:
            signature = minted.rsplit(".", 1)[-1]
            assert minted not in log and (not signature or signature not in log), f"a token is in {srv.log_path}"
        assert ALICE_PASSWORD not in log
