"""A small identity provider for token tests: signing keys, their JWKS (as a file, or served over
HTTP on a port of the kernel's choice), and JWTs minted with them. It plays the provider's part
only; the clients in the tests are the real ones."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

ISSUER = "https://idp.icegres.test"
AUDIENCE = "icegres"


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    @classmethod
    def rsa(cls, kid: str) -> SigningKey:
        return cls(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str) -> SigningKey:
        return cls(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        out = json.loads(algorithm.to_jwk(self.private.public_key()))
        out.update(kid=self.kid, use="sig", alg=self.alg)
        return out

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo)


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [k.jwk() for k in keys]}


def claims(sub: str, *, iss: str = ISSUER, aud: str = AUDIENCE, lifetime_s: float = 300,
           not_before_s: float = 0, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    out = {"iss": iss, "aud": aud, "sub": sub, "iat": now, "exp": now + int(lifetime_s)}
    if not_before_s:
        out["nbf"] = now + int(not_before_s)
    out.update(extra)
    return out


def mint(key: SigningKey, payload: dict[str, Any], *, kid: str | None = None) -> str:
    return jwt.encode(payload, key.private, algorithm=key.alg, headers={"kid": kid or key.kid})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint_unsigned(payload: dict[str, Any], kid: str) -> str:
    """alg "none": no signature at all."""
    head = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
    return f"{head}.{_b64(json.dumps(payload).encode())}."


def mint_hs256_with_public_key(key: SigningKey, payload: dict[str, Any]) -> str:
    """The key-confusion attack: HS256 "signed" with the provider's public key as the secret."""
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    body = _b64(json.dumps(payload).encode())
    mac = hmac.new(key.public_pem(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(mac)}"


@dataclass
class JwksServer:
    """Serves `document` at /jwks.json; counts the fetches."""

    document: dict[str, Any]
    fetches: int = 0
    url: str = ""
    _server: Any = field(default=None, repr=False)


@contextlib.contextmanager
def serving_jwks(document: dict[str, Any]) -> Iterator[JwksServer]:
    state = JwksServer(document)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.fetches += 1
            body = json.dumps(state.document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def silent_jwks_url() -> Iterator[str]:
    """A JWKS URL whose server accepts the connection and never answers: the provider hangs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)  # connections complete in the backlog; nothing is ever read or written
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/jwks.json"
