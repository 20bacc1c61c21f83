"""Listening ports, taken before anything else happens, and the file that reports them.

A serving process (`serve`, `flight-serve`, `keeper`) binds every port it will listen on first,
before it creates a data directory or opens a lake: a busy port is then one line on stderr and
nothing left behind. Port 0 asks the kernel for a free port, which nothing can take between the
choice and the bind (a port picked by binding and closing a probe socket can be taken in that gap
by any outgoing connection); `--ports-file` tells whoever started the process which ports it got.

The sockets are bound but not listening until the server is ready (`BoundPort.listen`): a client
that connects too early is refused at once instead of waiting in the backlog, so "connect works"
still means "serving". A bound socket already keeps its port from outgoing connections and from
every other bind (SO_REUSEADDR, which a restart needs while old connections sit in TIME_WAIT, lets
two processes bind one port as long as neither listens: the second then fails at `listen`, with
the same message).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BoundPort", "CannotListen", "bind_port", "read_ports_file", "write_ports_file"]

LISTEN_BACKLOG = socket.SOMAXCONN


class CannotListen(Exception):
    """A port could not be bound or listened on (or reported, for --ports-file); `str()` is the
    line for stderr."""


@dataclass
class BoundPort:
    """The sockets of one listen address (one per address `host` resolves to), all on `port`."""

    host: str
    port: int  # the port bound: the kernel's choice when 0 was asked for
    flag: str  # the option that named it, for messages ("--port", "--ops-port", ...)
    sockets: list[socket.socket] = field(default_factory=list)

    def backlog(self) -> None:
        """Let connections queue from now on (the kernel completes their handshakes) while the
        sockets stay here for `listen`: a client told the port (--ports-file) before the process
        serves waits instead of being refused, as a bound socket that does not listen refuses."""
        for sock in self.sockets:
            try:
                sock.listen(LISTEN_BACKLOG)
            except OSError as exc:
                self.close()
                raise CannotListen(_message(self.host, self.port, self.flag, exc)) from None

    def listen(self) -> list[socket.socket]:
        """Start listening; the sockets then belong to the caller (who closes them)."""
        self.backlog()
        sockets, self.sockets = self.sockets, []
        return sockets

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        self.sockets = []


def bind_port(host: str, port: int, *, flag: str = "--port") -> BoundPort:
    """Bind (not listen) every address `host` resolves to on `port`; 0 takes a free port, the same
    one for every address. Raises CannotListen with one line naming host, port and `flag`."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CannotListen(f"cannot listen on {host}:{port} ({flag}): {exc.strerror}") from None
    bound = BoundPort(host, port, flag)
    seen: set[tuple[int, str]] = set()
    for family, kind, proto, _, address in infos:
        if (family, address[0]) in seen:
            continue
        seen.add((family, address[0]))
        sock = socket.socket(family, kind, proto)
        try:
            # As trio does for its listeners: a restart must not wait out TIME_WAIT connections,
            # and an IPv6 wildcard must not claim the IPv4 one as well.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], bound.port, *address[2:]))
        except OSError as exc:
            sock.close()
            bound.close()
            raise CannotListen(_message(host, bound.port, flag, exc)) from None
        bound.sockets.append(sock)
        bound.port = sock.getsockname()[1]
    if not bound.sockets:
        raise CannotListen(f"cannot listen on {host}:{port} ({flag}): the address resolves to nothing")
    return bound


def _message(host: str, port: int, flag: str, exc: OSError) -> str:
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return f"cannot listen on {where} ({flag}): port {port} is in use"
    return f"cannot listen on {where} ({flag}): {exc.strerror or exc}"


def write_ports_file(path: str | os.PathLike[str], host: str, ports: Mapping[str, int]) -> None:
    """Write `{"pid": ..., "host": ..., <option key>: <port>, ...}` to `path` atomically (a reader
    sees the whole file or none). The pid says which process the ports are of: the file stays after
    the process exits, and a restarted one overwrites it."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "host": host, **ports}) + "\n")
    os.replace(tmp, target)


def read_ports_file(path: str | os.PathLike[str]) -> dict[str, object] | None:
    """What `write_ports_file` wrote, or None while there is no (whole) file."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        data = json.loads(Path(path).read_text())
        if isinstance(data, dict):
            return data
    return None
