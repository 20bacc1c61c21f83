"""Self-signed certificates for TLS tests, made with the openssl binary (no extra Python package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def self_signed(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """(certificate, key) PEM files for `host` (an IP SAN), valid for a day."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl binary is needed to make a test certificate")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=icegres-test", "-addext", f"subjectAltName=IP:{host},DNS:localhost"],
        check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    return cert, key
