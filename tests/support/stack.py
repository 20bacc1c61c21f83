"""The real lakehouse stack (SeaweedFS S3 + Iceberg REST catalog, PostgreSQL 15) for e2e tests.

`running_stack(state_dir)` runs `infra/up.sh STATE_DIR`, yields a `Stack` with the settings it wrote
to `STATE_DIR/stack.env`, and always runs `infra/down.sh STATE_DIR` on exit, which stops exactly the
processes up.sh started. If the stack cannot start, `StackStartError` carries up.sh's output and the
log tails: a test that needs the stack fails loudly, it never skips.

`Stack.stop_seaweed()` / `Stack.start_seaweed()` stop and restart SeaweedFS on the same ports and
state dir (fault tests: the catalog and S3 go away mid-session and come back).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
UP_SH = REPO_ROOT / "infra" / "up.sh"
DOWN_SH = REPO_ROOT / "infra" / "down.sh"
_LOG_TAIL_BYTES = 4000


class StackStartError(RuntimeError):
    """The stack (or a restarted SeaweedFS) did not come up; the message ends with the log tails."""


def _log_tail(path: Path | str | None) -> str:
    if not path:
        return "<no log>"
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        return f"<no log at {path}: {e}>"
    return f"--- tail of {path}:\n" + data[-_LOG_TAIL_BYTES:].decode("utf-8", "replace")


def read_env_file(path: Path) -> dict[str, str]:
    """Parse the KEY='value' lines infra/up.sh writes (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        parts = shlex.split(raw)
        values[key.strip()] = parts[0] if parts else ""
    return values


def _write_env_value(path: Path, key: str, value: str) -> None:
    """Replace one KEY='value' line of the env file atomically (used when SeaweedFS restarts)."""
    lines = path.read_text().splitlines()
    out = [f"{key}={shlex.quote(value)}" if ln.startswith(f"{key}=") else ln for ln in lines]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(out) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _pid_is_our_weed(pid: int, weed_data_dir: Path) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"-dir={weed_data_dir}".encode() in argv


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # Our own child (after a restart) must be reaped, or it lingers as a zombie.
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        time.sleep(0.05)
    return False


def _http(
    method: str,
    url: str,
    *,
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
) -> tuple[int, bytes]:
    """One HTTP request; returns (status, body) for any HTTP answer, raises OSError if none."""
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def listening_tcp(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket process `pid` holds, read from /proc."""
    inodes = set()
    with contextlib.suppress(FileNotFoundError, PermissionError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            addr_hex, port_hex = local.split(":")
            raw = bytes.fromhex(addr_hex)
            # /proc/net prints the address as 32-bit words in host (little-endian) order
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add((socket.inet_ntop(family, raw), int(port_hex, 16)))
    return found


@dataclass(frozen=True)
class Stack:
    """Settings of a running stack, as written by infra/up.sh."""

    state_dir: Path
    catalog_uri: str
    warehouse: str
    catalog_prefix: str
    catalog_sigv4: str  # "<signing name>:<region>", e.g. "s3tables:us-east-1"
    oauth2_uri: str
    s3_endpoint: str
    s3_access_key: str
    s3_secret_key: str = field(repr=False)
    s3_region: str = "us-east-1"
    s3_path_style: bool = True
    pg_url: str = ""
    pg_data: Path = Path()
    pg_pid: int = 0
    weed_ports: Mapping[str, int] = field(default_factory=dict)
    env_file: Path = Path()

    @classmethod
    def from_env_file(cls, env_file: Path) -> Stack:
        v = read_env_file(env_file)
        ports = dict(p.split("=", 1) for p in v["STACK_WEED_PORTS"].split())
        return cls(
            state_dir=Path(v["STACK_STATE_DIR"]),
            catalog_uri=v["ICEGRES_CATALOG_URI"],
            warehouse=v["ICEGRES_WAREHOUSE"],
            catalog_prefix=v["STACK_CATALOG_PREFIX"],
            catalog_sigv4=v["ICEGRES_CATALOG_SIGV4"],
            oauth2_uri=v["ICEGRES_OAUTH2_URI"],
            s3_endpoint=v["ICEGRES_S3_ENDPOINT"],
            s3_access_key=v["ICEGRES_S3_ACCESS_KEY"],
            s3_secret_key=v["ICEGRES_S3_SECRET_KEY"],
            s3_region=v["ICEGRES_S3_REGION"],
            s3_path_style=v["ICEGRES_S3_PATH_STYLE"].lower() == "true",
            pg_url=v["ICEGRES_PG_URL"],
            pg_data=Path(v["STACK_PG_DATA"]),
            pg_pid=int(v["STACK_PG_PID"]),
            weed_ports={k: int(p) for k, p in ports.items()},
            env_file=env_file,
        )

    # ------------------------------------------------------------------ settings
    @property
    def signing_name(self) -> str:
        return self.catalog_sigv4.split(":", 1)[0]

    @property
    def signing_region(self) -> str:
        return self.catalog_sigv4.split(":", 1)[1]

    @property
    def weed_pid(self) -> int:
        """SeaweedFS's current PID (it changes when start_seaweed() restarts it)."""
        return int(read_env_file(self.env_file)["STACK_WEED_PID"])

    def env(self) -> dict[str, str]:
        """The ICEGRES_* variables, for an `icegres` subprocess's environment."""
        return {k: v for k, v in read_env_file(self.env_file).items() if k.startswith("ICEGRES_")}

    def s3_properties(self) -> dict[str, str]:
        return {
            "s3.endpoint": self.s3_endpoint,
            "s3.access-key-id": self.s3_access_key,
            "s3.secret-access-key": self.s3_secret_key,
            "s3.region": self.s3_region,
            "s3.path-style-access": "true" if self.s3_path_style else "false",
        }

    def pyiceberg_properties(self) -> dict[str, str]:
        """Properties for pyiceberg.catalog.load_catalog(name, **props): REST + SigV4, S3 FileIO."""
        return {
            "type": "rest",
            "uri": self.catalog_uri,
            "warehouse": self.warehouse,
            "rest.sigv4-enabled": "true",
            "rest.signing-region": self.signing_region,
            "rest.signing-name": self.signing_name,
            "client.access-key-id": self.s3_access_key,
            "client.secret-access-key": self.s3_secret_key,
            "client.region": self.s3_region,
            **self.s3_properties(),
        }

    def pyiceberg_oauth2_properties(self) -> dict[str, str]:
        """The same catalog through OAuth2 client credentials (id/secret = the S3 key pair)."""
        return {
            "type": "rest",
            "uri": self.catalog_uri,
            "warehouse": self.warehouse,
            "credential": f"{self.s3_access_key}:{self.s3_secret_key}",
            "oauth2-server-uri": self.oauth2_uri,
            **self.s3_properties(),
        }

    # ------------------------------------------------------------------ catalog probes
    def oauth2_token(self, client_id: str | None = None, client_secret: str | None = None) -> str:
        """A bearer token from the catalog's OAuth2 client-credentials endpoint."""
        status, body = self.oauth2_token_request(client_id, client_secret)
        if status != 200:
            raise RuntimeError(f"{self.oauth2_uri} answered {status}: {body[:300]!r}")
        return str(json.loads(body)["access_token"])

    def oauth2_token_request(
        self, client_id: str | None = None, client_secret: str | None = None
    ) -> tuple[int, bytes]:
        form = urllib.parse.urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": self.s3_access_key if client_id is None else client_id,
                "client_secret": self.s3_secret_key if client_secret is None else client_secret,
                "scope": "catalog",
            }
        ).encode()
        return _http(
            "POST",
            self.oauth2_uri,
            data=form,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )

    def catalog_answers(self, timeout_s: float = 3.0) -> bool:
        """True if the REST catalog serves an authenticated namespace listing (via OAuth2)."""
        try:
            status, body = self.oauth2_token_request()
            if status != 200:
                return False
            token = json.loads(body)["access_token"]
            status, _ = _http(
                "GET",
                f"{self.catalog_uri}/v1/{self.catalog_prefix}/namespaces",
                headers={"Authorization": f"Bearer {token}"},
                timeout_s=timeout_s,
            )
            return status == 200
        except (OSError, ValueError, KeyError):
            return False

    def volumes_registered(self, timeout_s: float = 2.0) -> bool:
        """True once SeaweedFS's master knows every volume on disk. Until then, right after a
        restart, S3 GETs of existing objects fail with 500 INTERNAL_FAILURE."""
        data_dir = self.state_dir / "weed" / "data"
        want = len(list(data_dir.glob("*.dat")))
        try:
            status, body = _http(
                "GET",
                f"http://127.0.0.1:{self.weed_ports['master']}/dir/status",
                timeout_s=timeout_s,
            )
            topo = json.loads(body)["Topology"]
        except (OSError, ValueError, KeyError):
            return False
        have = sum(
            node["Volumes"]
            for dc in topo.get("DataCenters") or []
            for rack in dc.get("Racks") or []
            for node in rack.get("DataNodes") or []
        )
        return status == 200 and have >= want

    def s3_answers(self, timeout_s: float = 2.0) -> bool:
        try:
            _http("GET", f"{self.s3_endpoint}/", timeout_s=timeout_s)
            return True
        except OSError:
            return False

    # ------------------------------------------------------------------ fault injection
    def stop_seaweed(self, *, graceful: bool = True, timeout_s: float = 20.0) -> None:
        """Stop SeaweedFS (SIGTERM, or SIGKILL with graceful=False). The stack keeps its ports."""
        pid = self.weed_pid
        weed_data = self.state_dir / "weed" / "data"
        if not _pid_is_our_weed(pid, weed_data):
            _wait_gone(pid, 0)  # reap it if it was our child
            return
        os.kill(pid, signal.SIGTERM if graceful else signal.SIGKILL)
        if not _wait_gone(pid, timeout_s):
            os.kill(pid, signal.SIGKILL)
            if not _wait_gone(pid, 5.0):
                raise RuntimeError(f"weed PID {pid} did not exit")

    def start_seaweed(self, *, timeout_s: float = 60.0) -> None:
        """Start SeaweedFS again with the same command, ports and state dir; wait until it answers."""
        weed_dir = self.state_dir / "weed"
        run_sh = weed_dir / "run.sh"
        log_path = weed_dir / "weed.log"
        if _pid_is_our_weed(self.weed_pid, weed_dir / "data"):
            raise RuntimeError(f"SeaweedFS is already running (PID {self.weed_pid})")
        with contextlib.suppress(FileNotFoundError):
            (weed_dir / "data" / "mini.options").unlink()
        # weed mini hard-codes /tmp/seaweedfs-<component>-grpc-<port>.sock and a killed weed leaves
        # some behind; clear the ones named after this stack's ports.
        for name, port in self.weed_ports.items():
            if name.endswith("_grpc"):
                with contextlib.suppress(FileNotFoundError):
                    Path(f"/tmp/seaweedfs-{name.removesuffix('_grpc')}-grpc-{port}.sock").unlink()
        with open(log_path, "ab") as log:
            log.write(f"=== tests/support/stack.py: restarting weed at {time.ctime()}\n".encode())
            log.flush()
            # run.sh execs weed, so the child's PID is weed's; it leads its own session.
            proc = subprocess.Popen(
                [str(run_sh)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=weed_dir,
            )
        _write_env_value(self.env_file, "STACK_WEED_PID", str(proc.pid))
        (weed_dir / "weed.pid").write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise StackStartError(
                    f"SeaweedFS exited with {proc.returncode} while restarting\n{_log_tail(log_path)}"
                )
            if (
                self.s3_answers()
                and self.catalog_answers()
                and self.volumes_registered()
                # the admin server (and its gRPC port) comes up after S3 and the catalog
                and {p for _, p in listening_tcp(proc.pid)} >= set(self.weed_ports.values())
            ):
                return
            time.sleep(0.1)
        self.stop_seaweed(graceful=False)
        raise StackStartError(
            f"SeaweedFS did not answer within {timeout_s}s\n{_log_tail(log_path)}"
        )


def _run_script(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        cwd=REPO_ROOT,
    )


def stop_stack(state_dir: Path, timeout_s: float = 60.0) -> None:
    """infra/down.sh STATE_DIR; raises if it fails (it is idempotent, so failures are real)."""
    proc = _run_script([str(DOWN_SH), str(state_dir)], timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"infra/down.sh failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")


@contextlib.contextmanager
def running_stack(state_dir: Path | str, *, timeout_s: float = 90.0) -> Iterator[Stack]:
    """Start the stack in state_dir (infra/up.sh), yield its settings, stop it on exit (down.sh)."""
    state_dir = Path(state_dir).resolve()
    env_timeout = str(int(timeout_s))
    try:
        try:
            proc = subprocess.run(
                [str(UP_SH), str(state_dir)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout_s + 15,
                check=False,
                cwd=REPO_ROOT,
                env={**os.environ, "ICEGRES_STACK_TIMEOUT": env_timeout},
            )
        except subprocess.TimeoutExpired as e:
            raise StackStartError(
                f"infra/up.sh did not finish within {timeout_s + 15}s\n"
                f"{_log_tail(state_dir / 'weed' / 'weed.log')}\n"
                f"{_log_tail(state_dir / 'pg' / 'postgres.log')}"
            ) from e
        if proc.returncode != 0:
            raise StackStartError(
                f"infra/up.sh {state_dir} exited with {proc.returncode}\n"
                f"{proc.stdout[-_LOG_TAIL_BYTES:]}{proc.stderr[-_LOG_TAIL_BYTES:]}"
            )
        env_file = Path(proc.stdout.strip().splitlines()[-1])
        yield Stack.from_env_file(env_file)
    finally:
        stop_stack(state_dir)
