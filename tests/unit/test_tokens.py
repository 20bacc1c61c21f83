"""JWT validation (icegres/protocol/tokens.py) with a fake clock and a fake JWKS location, and the
OAUTHBEARER message rules (icegres/pg/oauthbearer.py)."""

from __future__ import annotations

import json

import pytest
import trio

from icegres.pg import oauthbearer
from icegres.pg.errors import PgError
from icegres.protocol import tokens
from icegres.protocol.tokens import (
    KeysUnavailable,
    TokenConfig,
    TokenRejected,
    TokenValidator,
    looks_like_jwt,
)
from tests.support import idp

pytestmark = pytest.mark.unit

OLD = idp.SigningKey.ec("old")
NEW = idp.SigningKey.rsa("new")


class Provider:
    """A JWKS location whose document the test changes, and a clock the test moves."""

    def __init__(self, *keys: idp.SigningKey) -> None:
        self.document: dict | None = idp.jwks(*keys)
        self.now = 1000.0
        self.fetches = 0

    def fetch(self, location: str) -> bytes:
        self.fetches += 1
        if self.document is None:
            raise OSError("connection refused")
        return json.dumps(self.document).encode()

    def validator(self) -> TokenValidator:
        config = TokenConfig("https://idp/jwks", idp.ISSUER, idp.AUDIENCE)
        return TokenValidator(config, clock=lambda: self.now, fetch=self.fetch)


async def inline(fn) -> None:
    fn()


async def test_rotation_is_picked_up_on_an_unknown_kid_at_most_every_interval():
    provider = Provider(OLD)
    v = provider.validator()
    assert await v.role(idp.mint(OLD, idp.claims("carol")), inline) == "carol"
    assert provider.fetches == 1
    provider.document = idp.jwks(OLD, NEW)  # the provider rotates in a new key
    fresh = idp.mint(NEW, idp.claims("carol"))
    with pytest.raises(TokenRejected, match="kid"):
        await v.role(fresh, inline)  # too soon after the last read: not fetched again
    assert provider.fetches == 1
    provider.now += tokens.REFRESH_INTERVAL_S
    assert await v.role(fresh, inline) == "carol"
    assert provider.fetches == 2
    for _ in range(50):  # a flood of forged kids costs no fetch within the interval
        with pytest.raises(TokenRejected):
            await v.role(idp.mint(idp.SigningKey.rsa("forged"), idp.claims("carol"), kid="forged"), inline)
    assert provider.fetches == 2


async def test_an_unreachable_provider_is_keys_unavailable_then_old_keys_stay():
    provider = Provider(OLD)
    provider.document = None
    v = provider.validator()
    with pytest.raises(KeysUnavailable):
        await v.role(idp.mint(OLD, idp.claims("carol")), inline)
    provider.document = idp.jwks(OLD)
    provider.now += tokens.REFRESH_INTERVAL_S
    assert await v.role(idp.mint(OLD, idp.claims("carol")), inline) == "carol"
    provider.document = None  # down again: the keys already read keep working
    provider.now += tokens.REFRESH_INTERVAL_S
    with pytest.raises(TokenRejected):
        await v.role(idp.mint(NEW, idp.claims("carol")), inline)
    assert await v.role(idp.mint(OLD, idp.claims("carol")), inline) == "carol"


async def test_concurrent_logins_with_an_unknown_kid_fetch_once():
    provider = Provider(OLD)
    v = provider.validator()
    token = idp.mint(OLD, idp.claims("carol"))

    async def in_thread(fn) -> None:
        await trio.to_thread.run_sync(fn)

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(v.role, token, in_thread)
    assert provider.fetches == 1


def test_claims_and_algorithms():
    provider = Provider(OLD, NEW)
    v = provider.validator()
    v.jwks.refresh(v.jwks.generation)
    assert v.check(idp.mint(NEW, idp.claims("carol"))) == "carol"
    cases = {
        "expired": idp.mint(NEW, idp.claims("carol", lifetime_s=-60)),
        "wrong audience": idp.mint(NEW, idp.claims("carol", aud="x")),
        "wrong issuer": idp.mint(NEW, idp.claims("carol", iss="https://evil")),
        "not yet valid": idp.mint(NEW, idp.claims("carol", not_before_s=600)),
        "bad signature": idp.mint(idp.SigningKey.rsa("new"), idp.claims("carol")),
        "is not accepted": idp.mint_unsigned(idp.claims("carol"), "new"),
    }
    cases["is not accepted "] = idp.mint_hs256_with_public_key(NEW, idp.claims("carol"))
    for reason, token in cases.items():
        with pytest.raises(TokenRejected, match=reason.strip()):
            v.check(token)
    # The leeway forgives a little clock skew, no more.
    assert v.check(idp.mint(NEW, idp.claims("carol", lifetime_s=-2))) == "carol"
    # A token signed by the EC key but claiming RS256 (kid of the EC key) finds no fitting key.
    with pytest.raises(TokenRejected):
        v.check(idp.mint(NEW, idp.claims("carol"), kid="old"))
    no_sub = idp.claims("carol")
    del no_sub["sub"]
    with pytest.raises(TokenRejected, match="role claim"):
        v.check(idp.mint(NEW, no_sub))


def test_a_password_is_not_taken_for_a_token():
    assert looks_like_jwt(idp.mint(NEW, idp.claims("carol")))
    for password in ("a.b.c", "hunter2", "x" * 20000, "e30.e30", "..", "eyJhbGciOiJSUzI1NiJ9.x"):
        assert not looks_like_jwt(password)


# --- OAUTHBEARER messages ---------------------------------------------------------------------


def test_initial_response_and_bearer_token():
    r = oauthbearer.parse_initial_response(b"n,,\x01host=db\x01auth=Bearer abc.DEF-_~+/==\x01port=5432\x01\x01")
    assert r.bearer_token() == "abc.DEF-_~+/==" and not r.discovery
    assert oauthbearer.parse_initial_response(b"y,,\x01auth=bEaReR   tok\x01\x01").bearer_token() == "tok"
    assert oauthbearer.parse_initial_response(b"n,,\x01auth=\x01\x01").discovery
    for auth in ("Basic abc", "Bearer", "Bearer a b", "Bearer a=b"):
        assert oauthbearer.parse_initial_response(f"n,,\x01auth={auth}\x01\x01".encode()).bearer_token() is None


@pytest.mark.parametrize("message, detail", [
    (b"", "empty"),
    (b"p=tls-server-end-point,,\x01auth=Bearer x\x01\x01", "channel binding"),
    (b"x,,\x01auth=Bearer x\x01\x01", "Unexpected channel-binding flag"),
    (b"n,,auth=Bearer x\x01\x01", "Key-value separator expected"),
    (b"n,,\x01auth=Bearer x\x01", "final terminator"),
    (b"n,,\x01auth=Bearer x", "unterminated"),
    (b"n,,\x01auth=a\x01auth=b\x01\x01", "multiple auth values"),
    (b"n,,\x01host=x\x01\x01", "does not contain an auth value"),
    (b"n,,\x01auth=x\x01\x01extra", "additional data"),
    (b"n,,\x01k3y=x\x01auth=x\x01\x01", "invalid key name"),
    (b"n,,\x01auth=\x02\x01\x01", "invalid value"),
    (b"n,,\x01novalue\x01\x01", "key without a value"),
    (b"n,,\x01auth=x\x00\x01\x01", "length"),
])
def test_malformed_initial_responses_are_08p01(message, detail):
    with pytest.raises(PgError) as exc:
        oauthbearer.parse_initial_response(message)
    assert exc.value.sqlstate == "08P01" and exc.value.message == "malformed OAUTHBEARER message"
    assert detail in (exc.value.detail or ""), exc.value.detail


def test_authzid_is_0a000_and_the_error_answer():
    with pytest.raises(PgError) as exc:
        oauthbearer.parse_initial_response(b"n,a=bob,\x01auth=Bearer x\x01\x01")
    assert exc.value.sqlstate == "0A000"
    answer = json.loads(oauthbearer.error_response("https://idp.example/realm", "openid db"))
    assert answer == {"status": "invalid_token", "scope": "openid db",
                      "openid-configuration": "https://idp.example/realm/.well-known/openid-configuration"}
    oauthbearer.check_error_ack(b"\x01")
    with pytest.raises(PgError, match="malformed"):
        oauthbearer.check_error_ack(b"\x01\x01")
