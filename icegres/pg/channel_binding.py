"""SCRAM channel binding data: `tls-server-end-point` (RFC 5929, section 4.1), as PostgreSQL
computes it for SCRAM-SHA-256-PLUS (be-secure-openssl.c, `be_tls_get_certificate_hash`).

The binding is a hash of the server's certificate (its DER bytes) with the hash function of the
certificate's own signature algorithm, except that MD5 and SHA-1 are replaced by SHA-256. A
signature algorithm that names no single hash (RSASSA-PSS, whose hash is in its parameters;
Ed25519, Ed448) has no tls-server-end-point value: PostgreSQL refuses such a certificate for
channel binding ("could not find digest for NID"), and so does this module (ValueError).

Pure: the DER is read here (only as far as the outer signatureAlgorithm), nothing is imported
beyond hashlib.
"""

from __future__ import annotations

import hashlib

# signatureAlgorithm OID -> the hash RFC 5929 says to use (MD5 and SHA-1 upgraded to SHA-256).
_HASH_OF_SIGNATURE: dict[str, str] = {
    "1.2.840.113549.1.1.4": "sha256",  # md5WithRSAEncryption
    "1.2.840.113549.1.1.5": "sha256",  # sha1WithRSAEncryption
    "1.3.14.3.2.29": "sha256",  # sha1WithRSASignature (OIW)
    "1.2.840.113549.1.1.14": "sha224",  # sha224WithRSAEncryption
    "1.2.840.113549.1.1.11": "sha256",  # sha256WithRSAEncryption
    "1.2.840.113549.1.1.12": "sha384",  # sha384WithRSAEncryption
    "1.2.840.113549.1.1.13": "sha512",  # sha512WithRSAEncryption
    "1.2.840.10045.4.1": "sha256",  # ecdsa-with-SHA1
    "1.2.840.10045.4.3.1": "sha224",  # ecdsa-with-SHA224
    "1.2.840.10045.4.3.2": "sha256",  # ecdsa-with-SHA256
    "1.2.840.10045.4.3.3": "sha384",  # ecdsa-with-SHA384
    "1.2.840.10045.4.3.4": "sha512",  # ecdsa-with-SHA512
    "1.2.840.10040.4.3": "sha256",  # dsa-with-sha1
    "2.16.840.1.101.3.4.3.1": "sha224",  # dsa-with-sha224
    "2.16.840.1.101.3.4.3.2": "sha256",  # dsa-with-sha256
}
_SEQUENCE, _OID = 0x30, 0x06


def tls_server_end_point(cert_der: bytes) -> bytes:
    """The tls-server-end-point channel binding data of a server certificate given as DER: the
    hash of `cert_der` with its signature's hash (SHA-256 for MD5 and SHA-1). ValueError for a
    certificate that is not DER or whose signature algorithm names no single hash."""
    oid = signature_algorithm(cert_der)
    name = _HASH_OF_SIGNATURE.get(oid)
    if name is None:
        raise ValueError(f"no tls-server-end-point hash for the certificate's signature algorithm {oid}")
    return hashlib.new(name, cert_der).digest()


def signature_algorithm(cert_der: bytes) -> str:
    """The dotted OID of a DER certificate's signatureAlgorithm (the outer one, after
    tbsCertificate: Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature })."""
    tag, start, end = _header(cert_der, 0)
    if tag != _SEQUENCE or end != len(cert_der):
        raise ValueError("not a DER certificate: expected one SEQUENCE")
    _, _, tbs_end = _header(cert_der, start)  # tbsCertificate, skipped whole
    tag, alg_start, _ = _header(cert_der, tbs_end)
    if tag != _SEQUENCE:
        raise ValueError("not a DER certificate: no signatureAlgorithm SEQUENCE")
    tag, oid_start, oid_end = _header(cert_der, alg_start)
    if tag != _OID:
        raise ValueError("not a DER certificate: signatureAlgorithm holds no OID")
    return _dotted(cert_der[oid_start:oid_end])


def _header(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER element at `at`; ValueError past the end."""
    if at + 2 > len(der):
        raise ValueError("not a DER certificate: truncated")
    tag, first = der[at], der[at + 1]
    at += 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or at + count > len(der):
            raise ValueError("not a DER certificate: bad length")
        length = int.from_bytes(der[at : at + count], "big")
        at += count
    if at + length > len(der):
        raise ValueError("not a DER certificate: truncated")
    return tag, at, at + length


def _dotted(body: bytes) -> str:
    if not body:
        raise ValueError("not a DER certificate: empty OID")
    arcs: list[int] = []
    value = 0
    for byte in body:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in (first, arcs[0] - 40 * first, *arcs[1:]))
