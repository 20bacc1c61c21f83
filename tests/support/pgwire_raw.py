"""A raw pgwire socket for tests of the authentication exchange itself: what a server offers and
answers, message by message, where no client library shows it (the mock salt of an unknown user,
an OAUTHBEARER exchange by RFC 7628 when no client is at hand)."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass


@dataclass(frozen=True)
class Reply:
    kind: bytes
    body: bytes

    @property
    def auth_code(self) -> int:
        assert self.kind == b"R", self
        return struct.unpack("!i", self.body[:4])[0]

    @property
    def auth_data(self) -> bytes:
        return self.body[4:]

    def error_fields(self) -> dict[str, str]:
        assert self.kind == b"E", self
        fields = {}
        for part in self.body.split(b"\0"):
            if part:
                fields[part[:1].decode()] = part[1:].decode()
        return fields


class RawConnection:
    def __init__(self, host: str, port: int, *, timeout_s: float = 10) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self._buf = b""

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def startup(self, user: str, database: str) -> Reply:
        params = b"".join(k.encode() + b"\0" + v.encode() + b"\0"
                          for k, v in (("user", user), ("database", database))) + b"\0"
        body = struct.pack("!i", 196608) + params
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        return self.read()

    def send(self, kind: bytes, body: bytes) -> None:
        self.sock.sendall(kind + struct.pack("!i", len(body) + 4) + body)

    def sasl_initial(self, mechanism: str, data: bytes | None) -> None:
        payload = struct.pack("!i", -1) if data is None else struct.pack("!i", len(data)) + data
        self.send(b"p", mechanism.encode() + b"\0" + payload)

    def sasl_response(self, data: bytes) -> None:
        self.send(b"p", data)

    def read(self) -> Reply:
        while True:
            if len(self._buf) >= 5:
                (length,) = struct.unpack("!i", self._buf[1:5])
                if len(self._buf) >= length + 1:
                    reply = Reply(self._buf[:1], self._buf[5:length + 1])
                    self._buf = self._buf[length + 1:]
                    return reply
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self._buf += chunk

    def read_until_ready(self) -> list[Reply]:
        """Replies up to and including ReadyForQuery (or an ErrorResponse after login failed)."""
        replies = []
        while True:
            reply = self.read()
            replies.append(reply)
            if reply.kind in (b"Z", b"E"):
                return replies


def mechanisms(reply: Reply) -> list[str]:
    """The mechanism names of an AuthenticationSASL reply."""
    assert reply.auth_code == 10, reply
    return [name.decode() for name in reply.auth_data.split(b"\0") if name]
