"""Self-signed certificates for TLS tests, made with the openssl binary (no extra Python package)."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Pki:
    """A throwaway certificate authority and a server certificate it signed."""

    ca_cert: Path  # what a verify-full client trusts (sslrootcert)
    cert: Path  # the server's certificate (--tls-cert)
    key: Path  # its private key (--tls-key)


def ca_signed(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), *, digest: str = "sha256",
              key_type: str = "rsa:2048") -> Pki:
    """A CA and a server certificate for `hosts` (IP or DNS SANs) signed by it with `digest`,
    valid for a day: what `sslmode=verify-full` checks (chain to sslrootcert, name in the SAN)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl binary is needed to make a test certificate")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)

    ca_key, ca_cert = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.pem"
    key_args = ["-newkey", key_type] if not key_type.startswith("ec:") else [
        "-newkey", "ec", "-pkeyopt", f"ec_paramgen_curve:{key_type[3:]}"]
    run("req", "-x509", *key_args, "-nodes", "-keyout", str(ca_key), "-out", str(ca_cert), "-days", "1",
        f"-{digest}", "-subj", f"/CN=icegres test CA {directory.name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", *key_args, "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={hosts[0]}")
    sans = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in hosts)
    ext = directory / "server.ext"
    ext.write_text(f"subjectAltName={sans}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(cert), "-days", "1", f"-{digest}", "-extfile", str(ext))
    return Pki(ca_cert, cert, key)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
