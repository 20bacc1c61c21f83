"""A loopback TCP relay that records every HTTP request passing through it (bench only).

SeaweedFS 4.48 exposes per-request metrics only with `-s3.metricsPort` / `-s3.auditLogConfig`,
which must be given when weed starts (infra/up.sh does not), and its Prometheus counters name
the operation, not the object. So the benchmark puts this relay between a client and SeaweedFS
(S3 or the Iceberg REST catalog): the client is pointed at the relay's port, the bytes go through
unchanged, and the request line of every request is recorded.

Unchanged bytes matter: SigV4 signs the Host header, and the relay forwards the client's own
`Host: 127.0.0.1:<relay port>`, which is what SeaweedFS then verifies the signature against.
Only the client -> server direction is parsed (reads carry no body; a body announced by
Content-Length is skipped); the answer is relayed as raw bytes.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

BUFFER_BYTES = 256 * 1024
HEADER_LIMIT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Request:
    at_s: float
    method: str
    target: str
    range: str = ""  # the Range header, if any ("bytes=a-b")

    @property
    def path(self) -> str:
        return unquote(urlsplit(self.target).path)

    @property
    def query(self) -> str:
        return urlsplit(self.target).query


def object_kind(req: Request) -> str:
    """What an S3 request touched: data Parquet, Iceberg metadata (by file), or something else."""
    path = req.path
    if req.query and ("list-type" in req.query or "prefix=" in req.query):
        return "LIST"
    name = path.rsplit("/", 1)[-1]
    if name.endswith(".parquet"):
        return "data .parquet"
    if name.endswith(".metadata.json"):
        return "metadata .json"
    if name.endswith(".avro"):
        # pyiceberg and Java name manifest lists snap-<id>-<n>-<uuid>.avro
        return "manifest list .avro" if name.startswith("snap-") else "manifest .avro"
    return "other"


def catalog_kind(req: Request) -> str:
    """What an Iceberg REST request was (loadTable, config, listing, ...)."""
    parts = [p for p in req.path.split("/") if p]
    if "tables" in parts and parts[-1] != "tables":
        return "loadTable" if req.method == "GET" else f"{req.method} table"
    if parts and parts[-1] == "config":
        return "config"
    return f"{req.method} {'/'.join(parts[-2:])}"


class Tap:
    """Listens on 127.0.0.1:<port>, relays each connection to `upstream_port`, records requests."""

    def __init__(self, upstream_port: int, name: str = "tap") -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.name = name
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True)
        self._acceptor.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()

    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def counts(self, kind=object_kind) -> Counter[tuple[str, str]]:
        """(method, kind) -> number of requests since the last reset."""
        return Counter((r.method, kind(r)) for r in self.requests())

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        for s in list(self._sockets):
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> Tap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- relay -------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(s)
            threading.Thread(
                target=self._client_to_server, args=(client, server), daemon=True
            ).start()
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(BUFFER_BYTES):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _client_to_server(self, src: socket.socket, dst: socket.socket) -> None:
        buf = b""
        body_left = 0
        parsing = True
        try:
            while data := src.recv(BUFFER_BYTES):
                dst.sendall(data)
                if not parsing:
                    continue
                buf += data
                while True:
                    if body_left:
                        skip = min(body_left, len(buf))
                        buf, body_left = buf[skip:], body_left - skip
                        if body_left:
                            break
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        if len(buf) > HEADER_LIMIT_BYTES:
                            parsing = False  # not HTTP/1.1 as we know it: relay only
                        break
                    head, buf = buf[:end].decode("latin-1"), buf[end + 4 :]
                    lines = head.split("\r\n")
                    method, _, rest = lines[0].partition(" ")
                    target = rest.rsplit(" ", 1)[0]
                    rng = ""
                    for line in lines[1:]:
                        key, _, value = line.partition(":")
                        key = key.strip().lower()
                        if key == "content-length":
                            body_left = int(value.strip() or 0)
                        elif key == "range":
                            rng = value.strip()
                        elif key == "transfer-encoding" and "chunked" in value.lower():
                            parsing = False  # no chunked bodies on the read path; stop counting
                    with self._lock:
                        self._requests.append(Request(time.perf_counter(), method, target, rng))
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
