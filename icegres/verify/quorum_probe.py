"""Keepers for the quorum claims: the configured ones, checked before anything starts, or three
local ones this run starts (`--local-keepers`).

Configured keepers must be a scratch quorum. A scratch writer on them would win a term above the
production writer's and depose it (docs/quorum-protocol.md, "Fencing"), so verify refuses keepers
whose log holds any writer term. The probe asks each keeper for its state with the read-only
`CatchUp(0)` (the first round of a rejoin: it raises nothing and persists nothing) and reads the
`Snapshot` it answers. A keeper cannot say whether the writer of its term is still alive: the
protocol has no leases or heartbeats, and a live writer with no INSERTs sends nothing at all. So
every term held counts as in use — the safe side: a quorum whose writer is gone must be drained and
replaced by fresh keepers (`--init`) before verify may use it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from icegres.verify.nodes import Nodes

__all__ = ["KeeperState", "keeper_state", "quorum_problems", "start_local_keepers"]

LOCAL_KEEPERS = 3
PROBE_TIMEOUT_S = 5.0
PROBE_BODY_BYTES_MAX = 256 * 1024 * 1024  # a snapshot holds every record above the trim point
STEAL_REFUSAL = ("verify must never steal a production writer's term: use --local-keepers or point "
                 "--tail-quorum at scratch keepers")


@dataclass(frozen=True)
class KeeperState:
    """What one keeper told the probe: its promised writer term ("" for none), its trim point
    and the records it holds above it; `catching_up` when it refused (rejoining after a disk loss)."""

    promised: str
    trimmed: int
    records: int
    catching_up: bool = False

    @property
    def in_use(self) -> bool:
        return bool(self.promised) or self.trimmed > 0 or self.records > 0


def keeper_state(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> KeeperState:
    """Ask the keeper at `host:port` for its state without changing it (`CatchUp(0)`). Raises
    OSError when it cannot be reached, ValueError when it answers something else."""
    from icegres.machines.quorum import ZERO_TERM, CatchUp, Refused, Snapshot
    from icegres.machines.quorum_format import IncompleteFrame, decode_frame, encode_frame

    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(encode_frame(CatchUp(0)))
        data = bytearray()
        while True:
            chunk = sock.recv(256 * 1024)
            if not chunk:
                raise ValueError("it closed the connection without an answer")
            data += chunk
            try:
                message, _ = decode_frame(data, body_bytes_max=PROBE_BODY_BYTES_MAX)
            except IncompleteFrame:
                continue
            break
    if isinstance(message, Refused):
        return KeeperState("", 0, 0, catching_up=True)
    if not isinstance(message, Snapshot):
        raise ValueError(f"it answered a {type(message).__name__}, not a Snapshot")
    promised = "" if message.promised == ZERO_TERM else str(message.promised)
    return KeeperState(promised, message.trimmed, len(message.entries))


def quorum_problems(addresses: str) -> list[str]:
    """One line per configured keeper that cannot be reached, or that holds a writer's term (in
    use: see the module doc), or that is catching up after a disk loss."""
    from icegres.machines.drivers.quorum import parse_addresses

    try:
        parsed = parse_addresses(addresses)
    except ValueError as exc:
        return [f"--tail-quorum: {exc}"]
    problems = []
    for host, port in parsed:
        try:
            state = keeper_state(host, port)
        except OSError as exc:
            problems.append(f"--tail-quorum: keeper {host}:{port} cannot be reached: {exc.strerror or exc}")
            continue
        except Exception as exc:  # a corrupt frame, another protocol on that port
            problems.append(f"--tail-quorum: {host}:{port} does not answer as a keeper: {exc}")
            continue
        if state.catching_up:
            problems.append(f"--tail-quorum: keeper {host}:{port} is catching up after a disk loss (--rejoin); "
                            "wait until it logs 'caught up and serving'")
        elif state.in_use:
            problems.append(f"--tail-quorum: keeper {host}:{port} is in use (writer term {state.promised or '-'}, "
                            f"{state.records} records held above slot {state.trimmed}; a keeper cannot tell whether that "
                            f"writer still runs), and a scratch writer would take its term: {STEAL_REFUSAL}")
    return problems


def start_local_keepers(nodes: Nodes) -> str:
    """Three new keepers on loopback; their addresses as --tail-quorum takes them."""
    keepers = [nodes.keeper(f"keeper-{n}", init=True) for n in range(1, LOCAL_KEEPERS + 1)]
    return ",".join(k.address for k in keepers)
