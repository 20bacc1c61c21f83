"""The server's certificate and key (--tls-cert/--tls-key), loaded once for both front ends.

One configuration serves both ports: pgwire speaks TLS after an SSLRequest or a direct
ClientHello (ALPN `postgresql`), Flight SQL serves grpc+tls:// (ALPN `h2`). Each front end asks
for a context with its own ALPN; the files, the TLS floor and the errors are the same.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence


class TlsConfigError(ValueError):
    """The certificate or key cannot be used; the message names the file and the cause."""


def server_context(cert_path: str, key_path: str, alpn: Sequence[str]) -> ssl.SSLContext:
    """A server SSLContext, TLS 1.2 or newer (PostgreSQL's default ssl_min_protocol_version),
    holding the certificate chain and key in PEM files and offering the protocols `alpn`.
    Loaded at start-up: a bad file stops the server with a one-line reason instead of failing
    every handshake later."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for flag, path in (("--tls-cert", cert_path), ("--tls-key", key_path)):
        if not os.path.exists(path):  # OpenSSL's FileNotFoundError does not say which file
            raise TlsConfigError(f"TLS: no such file {path!r} ({flag})")
    try:
        context.load_cert_chain(certfile=cert_path, keyfile=key_path)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"TLS: cannot use certificate {cert_path!r} with key {key_path!r}: "
                             f"{exc.reason or exc}") from None
    except OSError as exc:
        raise TlsConfigError(f"TLS: cannot read {cert_path!r} / {key_path!r}: {exc}") from None
    context.set_alpn_protocols(list(alpn))
    return context


def certificate_der(cert_path: str) -> bytes:
    """The DER bytes of the first certificate in a PEM file: the server's own (a chain file
    lists it first), which SCRAM's tls-server-end-point channel binding hashes. Python's ssl
    module cannot hand back the certificate a context serves, so it is read from the file."""
    try:
        with open(cert_path) as f:
            pem = f.read()
    except OSError as exc:
        raise TlsConfigError(f"TLS: cannot read {cert_path!r}: {exc}") from None
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    start = pem.find(begin)
    stop = pem.find(end, start)
    if start < 0 or stop < 0:
        raise TlsConfigError(f"TLS: no PEM certificate in {cert_path!r}")
    return ssl.PEM_cert_to_DER_cert(pem[start : stop + len(end)])
