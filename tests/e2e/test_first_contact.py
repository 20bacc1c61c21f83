"""What a newcomer meets first, through the real command line: `icegres --version`, `serve --help`
in groups, a busy port as one line on stderr that leaves no data directory behind (serve's three
ports, flight-serve's, the keeper's), and port 0 reported back (--ports-file, the log)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import run_files, start_icegres, stop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CLI_TIMEOUT_S = 60


def icegres(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "icegres", *argv], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


# --- --version and --help ---------------------------------------------------------------------------


def test_version_prints_the_installed_version_and_exits_0() -> None:
    done = icegres("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"icegres {version('icegres')}"


def test_serve_help_groups_its_flags_with_the_ones_that_matter_first() -> None:
    done = icegres("serve", "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    usage = text.splitlines()[0]
    assert usage == "usage: icegres serve [--data-dir DIR] [--host HOST] [--port PORT] [options]", usage
    headings = [line[:-1] for line in text.splitlines() if re.fullmatch(r"[a-z][a-z ]+:", line)]
    assert headings == ["options", "connection", "authentication", "catalog and storage", "write ladder",
                        "maintenance", "limits", "operations"], headings

    def section(title: str) -> list[str]:
        body = text.split(f"\n{title}:\n", 1)[1].split("\n\n", 2)[1]  # past the group's description
        return re.findall(r"^  (--[a-z0-9-]+)", body.split("\n\n")[0], re.M)

    assert section("connection")[:2] == ["--port", "--host"]
    assert section("authentication")[:2] == ["--auth-method", "--jwt-jwks"]
    assert section("catalog and storage")[:2] == ["--data-dir", "--catalog-uri"]
    assert section("write ladder") == ["--write-buffer-ms", "--tail-dir", "--tail-url", "--tail-quorum"]
    assert {"--ops-port", "--ports-file", "--config"} <= set(section("operations"))
    assert section("limits")[:2] == ["--max-connections", "--superuser-reserved-connections"]
    # Every flag once, in its group: nothing left in the ungrouped "options".
    assert section("options") == []


def test_the_keepers_port_help_is_its_own() -> None:
    keeper = icegres("keeper", "--help").stdout.split("\noptions:\n", 1)[1]  # past the usage lines
    serve = icegres("serve", "--help").stdout
    port_help = " ".join(keeper.split("--port PORT", 1)[1].split("--data-dir", 1)[0].split())
    assert "this keeper's listen port, required" in port_help and "--tail-quorum" in port_help, port_help
    assert "Postgres" not in port_help
    assert "Postgres wire listen port" in serve
    data_dir_help = " ".join(keeper.split("--data-dir DIR", 1)[1].split("--host", 1)[0].split())
    assert "keeper.log" in data_dir_help and "lakehouse" not in data_dir_help, data_dir_help


# --- a busy port -------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, flag", [
    (("serve", "--port", "{busy}"), "--port"),
    (("serve", "--port", "0", "--flight-port", "{busy}"), "--flight-port"),
    (("serve", "--port", "0", "--ops-port", "{busy}"), "--ops-port"),
    (("flight-serve", "--port", "{busy}"), "--port"),
    (("supervise", "--port", "0", "--ops-port", "{busy}"), "--ops-port"),
], ids=["serve", "serve-flight", "serve-ops", "flight-serve", "supervise-ops"])
def test_a_busy_port_is_one_line_and_leaves_no_data_dir(tmp_path: Path, busy_port: int, argv: tuple[str, ...],
                                                        flag: str) -> None:
    data_dir = tmp_path / "data"
    argv = tuple(a.format(busy=busy_port) for a in argv)
    if argv[0] == "supervise":
        # The supervisor's child meets the busy port: it exits with the line, and is retried
        # until the supervisor is stopped.
        log_path, _ = run_files(tmp_path, "supervise")
        with open(log_path, "ab") as log:
            sup = subprocess.Popen([sys.executable, "-m", "icegres", *argv, "--data-dir", str(data_dir)],
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            expected = f"icegres: cannot listen on 127.0.0.1:{busy_port} ({flag}): port {busy_port} is in use"
            deadline = time.monotonic() + CLI_TIMEOUT_S
            while expected not in log_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert expected in log_path.read_text(), log_path.read_text()[-3000:]
        finally:
            stop(sup)
        assert "Traceback" not in log_path.read_text()
        assert not data_dir.exists()
        return
    done = icegres(*argv, "--data-dir", str(data_dir))
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == f"icegres: cannot listen on 127.0.0.1:{busy_port} ({flag}): port {busy_port} is in use"
    assert not data_dir.exists()


@pytest.mark.parametrize("mode", [("--init",), ("--rejoin", "127.0.0.1:1,127.0.0.1:2"), ()],
                         ids=["init", "rejoin", "restart"])
def test_a_keeper_on_a_busy_port_is_one_line_and_touches_no_directory(tmp_path: Path, busy_port: int,
                                                                      mode: tuple[str, ...]) -> None:
    data_dir = tmp_path / "keeper"
    done = icegres("keeper", "--port", str(busy_port), "--data-dir", str(data_dir), *mode)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == \
        f"icegres keeper: cannot listen on 127.0.0.1:{busy_port} (--port): port {busy_port} is in use"
    assert not data_dir.exists()


def test_an_unresolvable_host_is_one_line(tmp_path: Path) -> None:
    done = icegres("serve", "--host", "no-such-host.invalid", "--port", "0", "--data-dir", str(tmp_path / "d"),
                   # passwords and --allow-plaintext: past the trust and TLS checks, to the bind
                   env={"ICEGRES_USERS": "alice:secret", "ICEGRES_ALLOW_PLAINTEXT": "1"})
    assert done.returncode == 1
    assert done.stderr.strip().startswith("icegres: cannot listen on no-such-host.invalid:0 (--port): "), done.stderr
    assert not (tmp_path / "d").exists()


def test_trust_beyond_loopback_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    done = icegres("serve", "--host", "0.0.0.0", "--port", "0", "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 1
    assert done.stderr.strip().startswith("refusing to serve 0.0.0.0 without passwords"), done.stderr
    assert not (tmp_path / "d").exists()


# --- port 0, reported --------------------------------------------------------------------------------


def test_serve_on_port_0_reports_every_port_it_bound(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    started = start_icegres(["serve", "--data-dir", str(data_dir), "--port", "0", "--flight-port", "0",
                             "--ops-port", "0"], log_dir=tmp_path)
    try:
        ports = started.ports
        assert set(ports) == {"port", "flight_port", "ops_port"}, ports
        assert len(set(ports.values())) == 3 and 0 not in ports.values(), ports
        with psycopg.connect(f"host=127.0.0.1 port={ports['port']} dbname=icegres user=icegres") as conn:
            assert conn.execute("select 1").fetchone() == (1,)
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['ops_port']}/ready", timeout=5) as reply:
            assert reply.status == 200
        log = started.log_path.read_text()
        assert f"on 127.0.0.1:{ports['port']} (database icegres" in log, log[-2000:]
        assert f"Flight SQL on grpc://127.0.0.1:{ports['flight_port']}" in log
        assert f"operations endpoint on http://127.0.0.1:{ports['ops_port']}" in log
    finally:
        stop(started.proc)
    assert started.proc.returncode == 0


def test_the_ports_file_comes_before_the_lake_and_names_the_process(tmp_path: Path) -> None:
    """The file is written once the ports are bound, before the lake is opened: a server whose
    catalog cannot be reached has written it when it stops (with its one line), and its pid
    tells it from a file an earlier process left."""
    log_path, ports_file = run_files(tmp_path)
    ports_file.write_text(json.dumps({"pid": 1, "host": "127.0.0.1", "port": 9}))  # stale
    with socket.socket() as closed:  # bound, never listening: the catalog's connection is refused
        closed.bind(("127.0.0.1", 0))
        uri = f"postgresql://ice@127.0.0.1:{closed.getsockname()[1]}/nope"
        done = subprocess.run([sys.executable, "-m", "icegres", "serve", "--data-dir", str(tmp_path / "d"),
                               "--port", "0", "--ops-port", "0", "--catalog-uri", uri, "--ports-file", str(ports_file)],
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # the catalog's line, nothing else
    data = json.loads(ports_file.read_text())
    assert data["pid"] != 1 and data["host"] == "127.0.0.1", data
    assert data["port"] not in (0, 9) and data["ops_port"] not in (0, data["port"]), data


def test_a_keeper_on_port_0_reports_its_port(tmp_path: Path) -> None:
    started = start_icegres(["keeper", "--port", "0", "--init", "--data-dir", str(tmp_path / "k")],
                            log_dir=tmp_path, stem="keeper")
    try:
        port = started.ports["port"]
        assert port != 0
        # (the port answers before the line is flushed to the log: wait for it, a few seconds at most)
        line, deadline = f"keeper listening on 127.0.0.1:{port}", time.monotonic() + 10
        while line not in started.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert line in started.log_path.read_text()
    finally:
        stop(started.proc)
