"""TLS for the Flight SQL port (grpc+tls://): a server SSLContext from the same PEM files as
pgwire's TLS (--tls-cert/--tls-key; icegres/tls.py), offering HTTP/2."""

from __future__ import annotations

import ssl

from icegres.tls import TlsConfigError
from icegres.tls import server_context as _server_context

__all__ = ["TlsConfigError", "server_context"]


def server_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    """An SSLContext serving HTTP/2 over TLS 1.2+ with the certificate chain and key in PEM files.

    gRPC clients negotiate HTTP/2 by ALPN ("h2") and refuse a server that does not offer it, so
    the context offers exactly that."""
    return _server_context(cert_path, key_path, alpn=("h2",))
