"""The scratch namespace: the only place of the lake a verify run writes.

It is created with an owner property naming the run (host and pid); a namespace of that name that
lacks it belongs to someone else and the run refuses to start. One whose owner is a live verify on
this host is another run in progress (refused); one whose owner is gone was left by a `--keep` run
or a killed one, and is dropped and made anew. Dropping purges every table in it (data files too)
and then the namespace."""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
from pathlib import Path
from typing import Any

__all__ = ["OWNER_PROPERTY", "ScratchRefused", "claim_namespace", "drop_namespace"]

OWNER_PROPERTY = "icegres.verify.owner"
STARTED_PROPERTY = "icegres.verify.started"


class ScratchRefused(Exception):
    """The scratch namespace cannot be taken (the message says why and what to do)."""


def owner_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_namespace(catalog: Any, namespace: str) -> None:
    """Create `namespace` owned by this run, after dropping a dead run's leftover (see module doc)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchNamespaceError

    try:
        properties = catalog.load_namespace_properties(namespace)
    except NoSuchNamespaceError:
        properties = None
    if properties is not None:
        owner = properties.get(OWNER_PROPERTY)
        if owner is None:
            raise ScratchRefused(f"namespace {namespace} exists and was not created by icegres verify: "
                                 "verify never writes into it (choose another with --scratch-namespace)")
        host, _, pid = owner.rpartition(":")
        if host != socket.gethostname():
            raise ScratchRefused(f"namespace {namespace} is icegres verify's from host {host} (pid {pid}, started "
                                 f"{properties.get(STARTED_PROPERTY, '?')}); if no verify runs there, drop it "
                                 "(DROP SCHEMA … CASCADE) or choose another with --scratch-namespace")
        if _verify_alive(int(pid) if pid.isdigit() else -1):
            raise ScratchRefused(f"another icegres verify (pid {pid}) is running in namespace {namespace}; "
                                 "wait for it to end")
        drop_namespace(catalog, namespace)  # a --keep run's or a killed run's leftover
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    try:
        catalog.create_namespace(namespace, {OWNER_PROPERTY: owner_tag(), STARTED_PROPERTY: started})
    except NamespaceAlreadyExistsError:
        raise ScratchRefused(f"another icegres verify created namespace {namespace} just now; "
                             "wait for it to end") from None


def drop_namespace(catalog: Any, namespace: str) -> None:
    """Every table of `namespace` purged, then the namespace dropped."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        tables = catalog.list_tables(namespace)
    except NoSuchNamespaceError:
        return
    for identifier in tables:
        with contextlib.suppress(NoSuchTableError):
            table = catalog.load_table(identifier)
            catalog.purge_table(identifier)
            _sweep(table, namespace)
    catalog.drop_namespace(namespace)


def _sweep(table: Any, namespace: str) -> None:
    """Delete what purging left under the table's location: its metadata files, manifests, and the
    files of commits that lost a race (no snapshot references them, so purging does not see them).
    Only a location inside the scratch namespace (as the catalog placed it) is swept."""
    location = table.location().rstrip("/")
    if f"/{namespace}/" not in location and f"/{namespace}.db/" not in location:
        return
    io = table.io
    if not hasattr(io, "fs_by_scheme"):
        return
    scheme, netloc, path = io.parse_location(location)
    fs = io.fs_by_scheme(scheme, netloc)
    with contextlib.suppress(FileNotFoundError, OSError):
        fs.delete_dir(path)
    if scheme == "file":  # object stores have no directories to leave behind
        with contextlib.suppress(OSError):
            Path(path).parent.rmdir()  # the namespace's directory, once its last table is gone


def _verify_alive(pid: int) -> bool:
    """Whether `pid` is a running `icegres verify` on this host (a reused pid is not)."""
    if pid <= 0 or pid == os.getpid():
        return pid == os.getpid()
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"verify" in cmdline and any(b"icegres" in part for part in cmdline)
