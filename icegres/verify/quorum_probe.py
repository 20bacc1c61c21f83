"""Keepers for the quorum claims: the configured ones, checked before anything starts, or three
local ones this run starts (`--local-keepers`)."""

from __future__ import annotations

import socket

from icegres.verify.nodes import Nodes

__all__ = ["quorum_problems", "start_local_keepers"]

LOCAL_KEEPERS = 3


def quorum_problems(addresses: str) -> list[str]:
    """One line per configured keeper that cannot be reached."""
    from icegres.machines.drivers.quorum import parse_addresses

    problems = []
    for host, port in parse_addresses(addresses):
        try:
            with socket.create_connection((host, port), timeout=5):
                pass
        except OSError as exc:
            problems.append(f"--tail-quorum: keeper {host}:{port} cannot be reached: {exc.strerror or exc}")
    return problems


def start_local_keepers(nodes: Nodes) -> str:
    """Three new keepers on loopback; their addresses as --tail-quorum takes them."""
    keepers = [nodes.keeper(f"keeper-{n}", init=True) for n in range(1, LOCAL_KEEPERS + 1)]
    return ",".join(k.address for k in keepers)
