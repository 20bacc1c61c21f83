"""TLS for the Flight SQL port (grpc+tls://): a server SSLContext from PEM files given by flags."""

from __future__ import annotations

import ssl


class TlsConfigError(ValueError):
    """The certificate or key cannot be used; the message names the file and the cause."""


def server_context(cert_path: str, key_path: str) -> ssl.SSLContext:
    """An SSLContext serving HTTP/2 over TLS 1.2+ with the certificate chain and key in PEM files.

    gRPC clients negotiate HTTP/2 by ALPN ("h2") and refuse a server that does not offer it, so
    the context offers exactly that. Loaded once at start-up: a bad file stops the server with a
    one-line reason instead of failing every handshake later."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=cert_path, keyfile=key_path)
    except FileNotFoundError as exc:
        raise TlsConfigError(f"TLS: no such file {exc.filename!r}") from None
    except ssl.SSLError as exc:
        raise TlsConfigError(f"TLS: cannot use certificate {cert_path!r} with key {key_path!r}: "
                             f"{exc.reason or exc}") from None
    except OSError as exc:
        raise TlsConfigError(f"TLS: cannot read {cert_path!r} / {key_path!r}: {exc}") from None
    context.set_alpn_protocols(["h2"])
    return context
