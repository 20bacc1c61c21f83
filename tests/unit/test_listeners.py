"""Ports bound before anything else (icegres/listeners.py): port 0 reported, a busy port as one
line, the ports file, and the supervisor's pinning of its children's ports (icegres/supervise.py)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from icegres.listeners import CannotListen, bind_port, read_ports_file, write_ports_file
from icegres.supervise import ChildPorts

pytestmark = pytest.mark.unit


def test_port_0_binds_a_port_of_the_kernels_choice_not_yet_listening() -> None:
    bound = bind_port("127.0.0.1", 0)
    try:
        assert bound.port > 0 and [s.getsockname()[1] for s in bound.sockets] == [bound.port]
        with pytest.raises(ConnectionRefusedError):  # bound, not listening: refused, not queued
            socket.create_connection(("127.0.0.1", bound.port), timeout=2).close()
    finally:
        sockets = bound.listen()
    try:
        socket.create_connection(("127.0.0.1", bound.port), timeout=2).close()
        assert bound.sockets == []  # the listening sockets are the caller's now
    finally:
        for sock in sockets:
            sock.close()


def test_a_backlog_queues_connections_while_the_sockets_stay_for_listen() -> None:
    """What a keeper does before it writes its ports file: a client connecting then waits in the
    backlog (the verify probe of fresh keepers was refused now and then, before)."""
    bound = bind_port("127.0.0.1", 0)
    try:
        bound.backlog()
        early = socket.create_connection(("127.0.0.1", bound.port), timeout=2)  # queued, not refused
        assert len(bound.sockets) == 1
    finally:
        sockets = bound.listen()
    try:
        accepted, _ = sockets[0].accept()
        early.sendall(b"x")
        assert accepted.recv(1) == b"x"
        accepted.close()
        early.close()
    finally:
        for sock in sockets:
            sock.close()


def test_a_busy_port_is_one_line_naming_host_port_and_flag() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(CannotListen) as info:
            bind_port("127.0.0.1", port, flag="--ops-port")
    assert str(info.value) == f"cannot listen on 127.0.0.1:{port} (--ops-port): port {port} is in use"


def test_two_binds_of_one_port_meet_at_listen_with_the_same_line() -> None:
    """SO_REUSEADDR (for restarts past TIME_WAIT) lets two sockets bind one port while neither
    listens; the second to listen gets the busy-port line."""
    first = bind_port("127.0.0.1", 0)
    second = bind_port("127.0.0.1", first.port)
    listening = first.listen()
    try:
        with pytest.raises(CannotListen, match=f"port {first.port} is in use"):
            second.listen()
        assert second.sockets == []
    finally:
        for sock in listening:
            sock.close()


def test_the_ports_file_is_whole_and_names_its_writer(tmp_path: Path) -> None:
    path = tmp_path / "ports.json"
    assert read_ports_file(path) is None
    path.write_text('{"pid": ')  # half a file reads as none
    assert read_ports_file(path) is None
    write_ports_file(path, "127.0.0.1", {"port": 5439, "ops_port": 9000})
    assert read_ports_file(path) == {"pid": os.getpid(), "host": "127.0.0.1", "port": 5439, "ops_port": 9000}
    assert [p.name for p in tmp_path.iterdir()] == ["ports.json"]  # no temporary file left


def test_the_supervisor_pins_what_its_first_child_bound(tmp_path: Path) -> None:
    report = tmp_path / "supervisor.json"
    ports = ChildPorts(tmp_path / "child.json", ops_port=0, host="127.0.0.1", report=str(report))
    assert ports.ops_port(pid=111) is None and ports.flags() == ["--ports-file", str(tmp_path / "child.json")]
    (tmp_path / "child.json").write_text(json.dumps({"pid": 110, "host": "127.0.0.1", "port": 1, "ops_port": 2}))
    assert ports.ops_port(pid=111) is None  # another process's file
    (tmp_path / "child.json").write_text(json.dumps({"pid": 111, "host": "127.0.0.1", "port": 40001,
                                                     "ops_port": 40002}))
    assert ports.ops_port(pid=111) == 40002
    assert ports.flags()[2:] == ["--port", "40001", "--ops-port", "40002"]
    assert json.loads(report.read_text()) == {"pid": os.getpid(), "host": "127.0.0.1", "port": 40001,
                                              "ops_port": 40002}
    assert ports.ops_port(pid=222) == 40002  # a replacement is given the same ports


def test_a_configured_ops_port_is_probed_before_the_file_is_read(tmp_path: Path) -> None:
    ports = ChildPorts(tmp_path / "child.json", ops_port=9000, host="127.0.0.1")
    assert ports.ops_port(pid=1) == 9000
