"""A table whose files cannot be read is damaged: isolated, named, counted and retried.

One missing or corrupt metadata JSON, manifest list, manifest or Parquet footer used to stop the
whole server at start-up (a raw traceback, exit 1, and `icegres supervise` restarting it forever).
Now the error is caught where the table is mounted, classified here into PostgreSQL's vocabulary
— 58P01 (undefined_file) for a file that is gone, as `file_presence.py` already answers for a data
file deleted after the table was read; XX001 (data_corrupted) for a file that cannot be decoded;
58030 (io_error) for a read that failed otherwise (an object store that did not answer) — naming
the table and the file, and kept in a `DamageRegistry`: statements naming the table get that
error, every other table serves, `/health` lists it and `/metrics` counts it
(`icegres_tables_damaged`). A damaged table is tried again when a statement names it and by the
server's periodic re-check, so restoring the file, or committing a new snapshot over it, heals it
without a restart.

Which file: the metadata JSON is the listed location; pyiceberg's planning reads the manifest
list and manifests in one call, so when it fails they are read again one by one
(`locate_manifest_damage`) to name the first that fails; a Parquet footer is read per file.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from icegres.pg.errors import PgError

UNDEFINED_FILE = "58P01"
DATA_CORRUPTED = "XX001"
IO_ERROR = "58030"
DAMAGE_SQLSTATES = (UNDEFINED_FILE, DATA_CORRUPTED, IO_ERROR)

Key = tuple[str, str]

_REASON_CHARS_MAX = 300  # an exception's text can carry a whole file's garbage


def missing_file(relation: str, path: str) -> PgError:
    """PostgreSQL's error for a relation file that is gone, naming the table and the file."""
    return PgError(UNDEFINED_FILE, f'could not open file "{path}" of relation {relation}: No such file or directory',
                   hint="The table's snapshot lists this file: restore it, or roll the table back "
                        "to a snapshot that does not list it.")


def corrupt_file(relation: str, path: str, reason: str) -> PgError:
    """XX001: the file is there but cannot be decoded."""
    return PgError(DATA_CORRUPTED, f'invalid data in file "{path}" of relation {relation}: {_short(reason)}',
                   hint="Restore the file from a copy, or roll the table back to a snapshot that does "
                        "not list it; the other tables are not affected.")


def unreadable_file(relation: str, path: str, reason: str) -> PgError:
    """58030: reading the file failed for another reason (the store did not answer)."""
    return PgError(IO_ERROR, f'could not read file "{path}" of relation {relation}: {_short(reason)}')


def classify(relation: str, path: str, exc: BaseException) -> PgError:
    """The PostgreSQL error for `exc`, raised while reading `path` of `relation`."""
    if isinstance(exc, PgError):
        return exc
    if isinstance(exc, FileNotFoundError) or _says_not_found(exc):
        return missing_file(relation, path)
    if isinstance(exc, OSError) and not _decoding(exc):
        return unreadable_file(relation, path, _reason(exc))
    # ValueError / pydantic's ValidationError (metadata JSON), fastavro's and pyiceberg's avro
    # decoder errors (SystemError, EOFError, ValueError, ...), Arrow's "Couldn't deserialize
    # thrift" (an OSError, caught above as decoding): the bytes are there and wrong.
    return corrupt_file(relation, path, _reason(exc))


def _says_not_found(exc: BaseException) -> bool:
    text = str(exc)
    return "No such file or directory" in text or "Path does not exist" in text or "NoSuchKey" in text


def _decoding(exc: OSError) -> bool:
    """An Arrow OSError that is about the bytes read, not about reading them."""
    text = str(exc).lower()
    return any(w in text for w in ("deserialize", "thrift", "parquet", "magic", "invalid", "corrupt", "footer",
                                   "unexpected end", "eof", "out of bounds"))


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short(text: str) -> str:
    return text if len(text) <= _REASON_CHARS_MAX else text[: _REASON_CHARS_MAX - 3] + "..."


def locate_manifest_damage(relation: str, table: Any, exc: BaseException) -> PgError:
    """The error naming which of the current snapshot's manifest list or manifests fails to
    read, after pyiceberg's planning failed with `exc` (each file read again on its own)."""
    snapshot = table.current_snapshot()
    io = table.io
    where = snapshot.manifest_list if snapshot is not None else table.metadata_location
    try:
        manifests = snapshot.manifests(io) if snapshot is not None else []
    except Exception as listed:
        return classify(relation, where, listed)
    for manifest in manifests:
        try:
            manifest.fetch_manifest_entry(io, discard_deleted=True)
        except Exception as entry:
            return classify(relation, manifest.manifest_path, entry)
    return classify(relation, where, exc)


def catalog_failure(exc: BaseException) -> bool:
    """Whether loading a table failed in the catalog itself (its database or REST server), not
    in the table's metadata file: that is 58030 for the statement, never the table's damage."""
    module = type(exc).__module__
    if module.startswith(("sqlalchemy", "requests", "urllib3")):
        return True
    from pyiceberg.exceptions import RESTError, ServerError, UnauthorizedError

    return isinstance(exc, (RESTError, ServerError, UnauthorizedError)) and not _says_file_failed(exc)


def _says_file_failed(exc: BaseException) -> bool:
    """A REST catalog reports the metadata file it could not read as a server error."""
    text = str(exc).lower()
    return any(w in text for w in ("metadata", "no such file", "not found", "json", "parse", "nosuchkey"))


@dataclass(frozen=True)
class Damage:
    """One damaged table as /health reports it."""

    relation: str
    metadata_location: str
    sqlstate: str
    message: str
    since_s: float  # time.time() when first seen damaged at this metadata location

    def report(self) -> dict[str, Any]:
        return {"table": self.relation, "sqlstate": self.sqlstate, "error": self.message,
                "metadata_location": self.metadata_location,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since_s))}


class DamageRegistry:
    """The damaged tables of one engine, readable from any thread (the ops endpoint reads it on
    the trio loop: plain dictionary reads under a lock, never I/O)."""

    def __init__(self) -> None:
        self._damaged: dict[Key, Damage] = {}
        self._lock = threading.Lock()

    def record(self, key: Key, metadata_location: str, err: PgError) -> None:
        with self._lock:
            known = self._damaged.get(key)
            since = (known.since_s if known is not None and known.metadata_location == metadata_location
                     else time.time())
            self._damaged[key] = Damage(f"{key[0]}.{key[1]}", metadata_location, err.sqlstate, err.message, since)

    def clear(self, key: Key) -> bool:
        """Forget `key`'s damage (mounted whole, dropped); whether it was damaged."""
        with self._lock:
            return self._damaged.pop(key, None) is not None

    def keys(self) -> list[Key]:
        with self._lock:
            return list(self._damaged)

    def get(self, key: Key) -> Damage | None:
        with self._lock:
            return self._damaged.get(key)

    def reports(self) -> list[dict[str, Any]]:
        with self._lock:
            return [d.report() for _, d in sorted(self._damaged.items())]

    def __len__(self) -> int:
        with self._lock:
            return len(self._damaged)
