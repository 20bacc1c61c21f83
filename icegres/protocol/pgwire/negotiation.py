"""A connection's encryption negotiation, before its StartupMessage, as a pure machine.

What PostgreSQL 17 does (backend_startup.c: ProcessSSLStartup, ProcessStartupPacket; hba.c for
hostssl), event by event. `step` is the only thing that makes a new State; the driver
(startup.py) performs the effects in order and feeds back what happened.

| event              | when                               | effects                                  |
|--------------------|------------------------------------|------------------------------------------|
| ClientHelloArrived | first byte 0x16, TLS configured    | StartTls(direct)                         |
|                    | first byte 0x16, no TLS            | HangUp (nothing is sent: PG's "reject")  |
| SSLRequested       | not tls_done, TLS configured       | Answer(S), StartTls; bytes the client    |
|                    |                                    | sent behind the request: Refuse(08P01)   |
|                    |                                    | once the handshake is done               |
|                    | not tls_done, no TLS               | Answer(N) (+ Refuse(08P01) if pipelined) |
|                    | tls_done                           | Refuse(0A000: protocol 1234.5679)        |
| GSSENCRequested    | not gss_done                       | Answer(N) (+ Refuse(08P01) if pipelined) |
|                    | gss_done                           | Refuse(0A000: protocol 1234.5680)        |
| HandshakeDone      | bytes were stuffed before it       | Refuse(08P01)                            |
|                    | direct without ALPN `postgresql`   | HangUp                                   |
|                    | otherwise                          | (none: the next packet is read)          |
| StartupReceived    | --tls-required, plaintext, a user  | Refuse(28000 no pg_hba.conf entry ...)   |
|                    | otherwise                          | Authenticate                             |
| CancelReceived     | always                             | Cancel                                   |

Bytes the client sent after an SSLRequest or GSSENCRequest, before reading our answer, were not
encrypted and may have been injected by a man in the middle (CVE-2021-23214): the connection is
refused with 08P01 "received unencrypted data after SSL request", after the handshake as
PostgreSQL does, so that an honest client reads the error inside TLS. A successful TLS
negotiation sets both tls_done and gss_done (no second negotiation on top of TLS); a refused one
sets only its own flag, since a client may try the other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from icegres.pg import errors as E
from icegres.pg.errors import PgError

TLS_HANDSHAKE_RECORD = 0x16  # a TLS record of type handshake: a ClientHello's first byte
ALPN_POSTGRESQL = "postgresql"


@dataclass(frozen=True)
class Config:
    tls: bool  # --tls-cert/--tls-key given: SSLRequest is answered 'S'
    tls_required: bool  # --tls-required: a plaintext StartupMessage is refused


@dataclass(frozen=True)
class State:
    tls_done: bool = False  # PostgreSQL's ssl_done: an SSLRequest was answered, or TLS is on
    gss_done: bool = False
    encrypted: bool = False  # the connection speaks TLS
    direct: bool = False  # TLS started with the connection's first byte (PostgreSQL 17)
    stuffed: bool = False  # bytes arrived behind an SSLRequest before its handshake


# --- events (what happened) ---------------------------------------------------------------------


@dataclass(frozen=True)
class ClientHelloArrived:
    """The connection's first byte is a TLS handshake record: PostgreSQL 17's direct TLS."""


@dataclass(frozen=True)
class SSLRequested:
    pipelined: bool  # bytes were already buffered behind the request


@dataclass(frozen=True)
class GSSENCRequested:
    pipelined: bool


@dataclass(frozen=True)
class HandshakeDone:
    alpn: str | None  # the protocol ALPN selected, None when the client offered none we speak


@dataclass(frozen=True)
class StartupReceived:
    host: str  # the client's address, as PostgreSQL names it in hba errors
    user: str
    database: str


@dataclass(frozen=True)
class CancelReceived:
    backend_pid: int
    secret_key: int


Event = ClientHelloArrived | SSLRequested | GSSENCRequested | HandshakeDone | StartupReceived | CancelReceived


# --- effects (what to do, in order) -------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    byte: bytes  # b"S" or b"N": the one-byte answer to an encryption request


@dataclass(frozen=True)
class StartTls:
    direct: bool  # the ClientHello is already buffered (direct), or follows our 'S'


@dataclass(frozen=True)
class Refuse:
    error: PgError  # sent as FATAL, then the connection ends


@dataclass(frozen=True)
class HangUp:
    """End the connection without a word (PostgreSQL's COMMERROR paths)."""


@dataclass(frozen=True)
class Cancel:
    backend_pid: int
    secret_key: int


@dataclass(frozen=True)
class Authenticate:
    """The StartupMessage may go on to authentication."""


Effect = Answer | StartTls | Refuse | HangUp | Cancel | Authenticate


def unencrypted_data(request: str) -> PgError:
    return PgError(E.PROTOCOL_VIOLATION, f"received unencrypted data after {request} request",
                   detail="This could be either a client-software bug or evidence of an attempted "
                          "man-in-the-middle attack.")


def unsupported_protocol(code: int) -> PgError:
    return PgError(E.FEATURE_NOT_SUPPORTED,
                   f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: server supports 3.0 to 3.0")


def no_hba_entry(host: str, user: str, database: str) -> PgError:
    """PostgreSQL's refusal of a plaintext connection that only `hostssl` lines would admit."""
    return PgError(E.INVALID_AUTHORIZATION,
                   f'no pg_hba.conf entry for host "{host}", user "{user}", database "{database}", no encryption')


_SSL_REQUEST_CODE = 80877103  # 1234.5679
_GSSENC_REQUEST_CODE = 80877104  # 1234.5680


def step(state: State, event: Event, config: Config) -> tuple[State, tuple[Effect, ...]]:
    """The next state and the effects of `event` (the table in the module docstring)."""
    match event:
        case ClientHelloArrived():
            if not config.tls:
                return state, (HangUp(),)
            return replace(state, tls_done=True, gss_done=True, encrypted=True, direct=True), (StartTls(direct=True),)
        case SSLRequested(pipelined=pipelined):
            if state.tls_done:
                return state, (Refuse(unsupported_protocol(_SSL_REQUEST_CODE)),)
            if not config.tls:
                refused = (Refuse(unencrypted_data("SSL")),) if pipelined else ()
                return replace(state, tls_done=True), (Answer(b"N"), *refused)
            return (replace(state, tls_done=True, gss_done=True, encrypted=True, stuffed=pipelined),
                    (Answer(b"S"), StartTls(direct=False)))
        case GSSENCRequested(pipelined=pipelined):
            if state.gss_done:
                return state, (Refuse(unsupported_protocol(_GSSENC_REQUEST_CODE)),)
            refused = (Refuse(unencrypted_data("GSSAPI encryption")),) if pipelined else ()
            return replace(state, gss_done=True), (Answer(b"N"), *refused)
        case HandshakeDone(alpn=alpn):
            if state.stuffed:
                return state, (Refuse(unencrypted_data("SSL")),)
            # PostgreSQL 17 requires ALPN on a direct connection (a client that offered only
            # other protocols fails the handshake there; here it arrives without one).
            if state.direct and alpn != ALPN_POSTGRESQL:
                return state, (HangUp(),)
            return state, ()
        case StartupReceived(host=host, user=user, database=database):
            # Without a user name the session's own check answers first, as in PostgreSQL,
            # where it comes before pg_hba.conf is consulted.
            if config.tls_required and not state.encrypted and user:
                return state, (Refuse(no_hba_entry(host, user, database)),)
            return state, (Authenticate(),)
        case CancelReceived(backend_pid=pid, secret_key=secret):
            return state, (Cancel(pid, secret),)
    raise AssertionError(f"no transition for {event!r}")
