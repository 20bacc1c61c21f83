"""Bearer tokens (JWTs) checked against an identity provider's keys (a JWKS file or URL).

Both front ends use this: pgwire for a JWT in the password field and for OAUTHBEARER, Flight SQL
for `authorization: Bearer <JWT>`. A token is accepted when its signature verifies with a key of
the JWKS (RS*/PS*/ES* only: `none` and the HS* family are refused outright, so a public key can
never be used as an HMAC secret), its `iss` and `aud` are the configured ones, it has not expired
and is already valid (`exp`, `nbf`, `iat`, with a few seconds of leeway), and its role claim names
the user. The role rule is PostgreSQL 18's for an OAuth validator without a user map: the
validator's authenticated identity (here the role claim, `sub` by default) must equal the user name
of the login, byte for byte. Flight SQL has no login user: the role claim is the user.

Keys are fetched off the event loop (the caller passes a runner: a worker thread) and cached; an
unknown `kid` fetches them again, at most once per REFRESH_INTERVAL_S, so a flood of forged kids
cannot make us hammer the provider. A provider that cannot be reached fails the login (28000)
after FETCH_TIMEOUT_S at worst, in that login's own worker thread: other sessions never wait.

Nothing here logs or returns a token: errors carry a reason fit for the server log.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jwt

if TYPE_CHECKING:
    from icegres.config import Settings

log = logging.getLogger("icegres.auth")

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
REFRESH_INTERVAL_S = 10.0  # at most one JWKS fetch (or file read) per this many seconds
FETCH_TIMEOUT_S = 5.0
JWKS_BYTES_MAX = 1 << 20
TOKEN_BYTES_MAX = 16 * 1024  # far beyond any real JWT; a bigger "token" is not parsed at all


class TokenRejected(Exception):
    """The token is not acceptable. `reason` is for the server log (it never quotes the token)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class KeysUnavailable(Exception):
    """The identity provider's keys could not be read: the login fails, but not as a bad token."""


@dataclass(frozen=True)
class TokenConfig:
    jwks: str  # a path, or an http(s):// URL
    issuer: str
    audience: str
    role_claim: str = "sub"
    leeway_s: float = 5.0


def looks_like_jwt(text: str) -> bool:
    """Whether a password is a JWT to validate rather than a password to check: three base64url
    segments whose first decodes to a JSON header with `alg` (a password that happens to have two
    dots is still a password)."""
    if len(text) > TOKEN_BYTES_MAX or text.count(".") != 2:
        return False
    try:
        header = jwt.get_unverified_header(text)
    except jwt.PyJWTError:
        return False
    return isinstance(header.get("alg"), str)


class JwksCache:
    """The provider's signing keys as last read, and when they may be read again."""

    def __init__(self, location: str, *, clock: Callable[[], float] = time.monotonic,
                 fetch: Callable[[str], bytes] | None = None) -> None:
        self.location = location
        self._clock = clock
        self._fetch = fetch or _read_location
        self._keys: dict[str | None, list[dict[str, Any]]] = {}
        self._loaded = False
        self._last_attempt: float | None = None
        self._generation = 0
        self._lock = threading.Lock()

    def keys_for(self, kid: str | None) -> list[dict[str, Any]] | None:
        """The JWKs a token with this `kid` may be checked with; None when there are none (an
        unknown kid, or nothing read yet)."""
        if kid is None:
            everything = [k for keys in self._keys.values() for k in keys]
            return everything if len(everything) == 1 else None  # no kid: only an unambiguous key
        return self._keys.get(kid)

    def may_refresh(self) -> bool:
        return self._last_attempt is None or self._clock() - self._last_attempt >= REFRESH_INTERVAL_S

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def loaded(self) -> bool:
        """Whether the keys were ever read: without them no token can be judged either way."""
        return self._loaded

    def refresh(self, seen_generation: int) -> None:
        """Read the keys again (blocking: call in a worker thread) unless another caller already
        did since `seen_generation`, or the last attempt was too recent. KeysUnavailable when the
        read fails and no keys were ever read."""
        with self._lock:
            if self._generation != seen_generation or not self.may_refresh():
                return
            self._last_attempt = self._clock()
            try:
                self._keys = _parse_jwks(self._fetch(self.location))
                self._loaded = True
            except (OSError, ValueError) as err:
                log.warning("could not read the JWKS at %s: %s", self.location, err)
                if not self._loaded:
                    raise KeysUnavailable(str(err)) from None
            finally:
                self._generation += 1


def _read_location(location: str) -> bytes:
    if location.startswith(("http://", "https://")):
        with urllib.request.urlopen(location, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310 (http(s) only)
            body = response.read(JWKS_BYTES_MAX + 1)
    else:
        with open(Path(location), "rb") as f:
            body = f.read(JWKS_BYTES_MAX + 1)
    if len(body) > JWKS_BYTES_MAX:
        raise ValueError(f"JWKS larger than {JWKS_BYTES_MAX} bytes")
    return body


def _parse_jwks(body: bytes) -> dict[str | None, list[dict[str, Any]]]:
    doc = json.loads(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise ValueError('a JWKS is a JSON object with a "keys" array')
    keys: dict[str | None, list[dict[str, Any]]] = {}
    for jwk in doc["keys"]:
        if not isinstance(jwk, dict) or jwk.get("kty") not in ("RSA", "EC"):
            continue  # symmetric ("oct") and unknown keys are never used
        if jwk.get("use", "sig") != "sig":
            continue
        kid = jwk.get("kid")
        keys.setdefault(kid if isinstance(kid, str) else None, []).append(jwk)
    return keys


class TokenValidator:
    """Checks tokens against one provider (TokenConfig); shared by all sessions of a front end."""

    def __init__(self, config: TokenConfig, *, clock: Callable[[], float] = time.monotonic,
                 fetch: Callable[[str], bytes] | None = None) -> None:
        self.config = config
        self.jwks = JwksCache(config.jwks, clock=clock, fetch=fetch)

    async def role(self, token: str, run_blocking: Callable[[Callable[[], None]], Awaitable[None]]) -> str:
        """The role a valid token names; TokenRejected or KeysUnavailable otherwise.
        `run_blocking(fn)` runs `fn()` in a worker thread (how the caller's event loop does it)."""
        header = _header(token)
        kid = header.get("kid")
        kid = kid if isinstance(kid, str) else None
        if self.jwks.keys_for(kid) is None and self.jwks.may_refresh():
            seen = self.jwks.generation
            await run_blocking(lambda: self.jwks.refresh(seen))
        return self.check(token, header)

    def check(self, token: str, header: dict[str, Any] | None = None) -> str:
        """The role of `token` against the keys as they are now (no fetch)."""
        header = _header(token) if header is None else header
        alg = header["alg"]
        kid = header.get("kid")
        candidates = self.jwks.keys_for(kid if isinstance(kid, str) else None)
        if not candidates and not self.jwks.loaded:
            raise KeysUnavailable("the JWKS has not been read")
        if not candidates:
            raise TokenRejected("no key of the JWKS has the token's kid" if kid is not None
                                else "the token has no kid and the JWKS has more than one key")
        failure = "no key of the JWKS fits the token's algorithm"
        for jwk in candidates:
            key = _key_for(jwk, alg)
            if key is None:
                continue
            try:
                claims = jwt.decode(
                    token, key, algorithms=[alg], audience=self.config.audience, issuer=self.config.issuer,
                    leeway=self.config.leeway_s, options={"require": ["exp", "iss", "aud"]},
                )
            except jwt.InvalidSignatureError:
                failure = "bad signature"
                continue
            except jwt.ExpiredSignatureError:
                raise TokenRejected("expired") from None
            except jwt.ImmatureSignatureError:
                raise TokenRejected("not yet valid (nbf or iat in the future)") from None
            except jwt.InvalidAudienceError:
                raise TokenRejected("wrong audience") from None
            except jwt.InvalidIssuerError:
                raise TokenRejected("wrong issuer") from None
            except jwt.MissingRequiredClaimError as err:
                raise TokenRejected(f"missing claim {err.claim!r}") from None
            except jwt.PyJWTError as err:
                raise TokenRejected(f"invalid token ({type(err).__name__})") from None
            role = claims.get(self.config.role_claim)
            if not isinstance(role, str) or not role:
                raise TokenRejected(f"the role claim {self.config.role_claim!r} is missing or not a string")
            return role
        raise TokenRejected(failure)


def _header(token: str) -> dict[str, Any]:
    if len(token) > TOKEN_BYTES_MAX:
        raise TokenRejected("token too long")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise TokenRejected("not a JWT") from None
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        # `none` would need no signature and HS* would take a public key as a shared secret.
        raise TokenRejected(f"algorithm {str(alg)[:16]!r} is not accepted")
    return header


def _key_for(jwk: dict[str, Any], alg: str) -> Any | None:
    """The public key of `jwk` for `alg`, or None when the two do not belong together."""
    declared = jwk.get("alg")
    if declared is not None and declared != alg:
        return None
    if alg.startswith(("RS", "PS")) and jwk.get("kty") != "RSA":
        return None
    if alg.startswith("ES") and (jwk.get("kty") != "EC" or jwk.get("crv") != _EC_CURVES[alg]):
        return None
    try:
        return jwt.PyJWK(jwk, algorithm=alg).key
    except jwt.PyJWTError:
        return None


def validator_for(settings: Settings) -> TokenValidator | None:
    """The validator of the settings' JWT options (None: JWT logins off). One per front end."""
    if not settings.jwt_jwks:
        return None
    assert settings.jwt_issuer and settings.jwt_audience  # config.check_auth
    return TokenValidator(TokenConfig(settings.jwt_jwks, settings.jwt_issuer, settings.jwt_audience,
                                      settings.jwt_role_claim, settings.jwt_leeway_s))
