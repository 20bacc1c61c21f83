"""Texts too long for a table's metadata JSON, kept in a file beside it.

A column's DEFAULT, a CHECK constraint and a COMMENT are table properties or field docs, so they
live in the table's metadata JSON, and pyiceberg writes that whole document at every commit of the
table (`model_dump_json`) and parses it at every load (pydantic-core), each in one call holding
the GIL for its whole length. With a 50 MB comment every INSERT into the table, and every session
that loaded it, stopped all other sessions for 0.3-2.3 s (measured 2026-12-07, /tmp script as
test_limits.py). So a text from `OUTLINE_CHARS` on is written to its own file under the table's
metadata directory, and the property or doc holds a reference to it: `icegres-text:` + the
text's SHA-256 + `:` + the file's path. The digest makes a damaged or replaced file an error
naming it, never a different text. Other engines show the reference where they show the text.

A text that begins with the marker is kept in a file whatever its length, so a stored value that
begins with the marker is always a reference. The files are written before the metadata that
names them is committed (a failed commit leaves one for orphan GC, which counts the texts the
table's metadata references: `referenced`), never rewritten, and read once per process
(`_READ`), a piece at a time: encoding, hashing and decoding a 50 MB text in one call would hold
the GIL 50-100 ms.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from icegres.engine import damage
from icegres.pg import text_arrays
from icegres.sql.pieces import BigText

MARKER = "icegres-text:"
OUTLINE_CHARS = 64 * 1024
_PIECE_BYTES = 1 << 20
_CACHED_CHARS = 256 << 20  # texts read, most recently used last, up to this many characters


def long(text: str) -> bool:
    """Whether `text` is kept in a file of its own."""
    return len(text) >= OUTLINE_CHARS or text.startswith(MARKER)


def is_reference(value: str) -> bool:
    return value.startswith(MARKER)


def kept(io: Any, table_location: str, text: str) -> str:
    """What to store for `text`: itself, or (when `long`) a reference to a new file holding it,
    written now. Blocking: run it in a worker thread."""
    if not long(text):
        return text
    path = f"{table_location.rstrip('/')}/metadata/icegres-text-{uuid.uuid4()}.txt"
    digest = hashlib.sha256()
    with io.new_output(path).create(overwrite=False) as out:
        for piece in text_arrays.utf8_pieces(text):
            digest.update(piece)
            out.write(piece)
    reference = f"{MARKER}{digest.hexdigest()}:{path}"
    _remember(reference, text)
    return reference


def kept_all(io: Any, table_location: str, values: Mapping[str, str]) -> dict[str, str]:
    """`values` with each long text replaced by its reference (see `kept`)."""
    return {key: kept(io, table_location, value) for key, value in values.items()}


def text(io: Any, value: str, relation: str) -> str:
    """The text `value` stands for: itself, or what the file it references holds. A file that is
    gone or does not hold the text it was written with raises the damage error naming it.
    Blocking: run it in a worker thread."""
    if not is_reference(value):
        return value
    with _LOCK:
        cached = _READ.get(value)
        if cached is not None:
            _READ.move_to_end(value)
            return cached
    digest, _, path = value[len(MARKER):].partition(":")
    try:
        read = _read(io, path)
    except Exception as exc:  # noqa: BLE001 - classified: gone, unreadable or undecodable
        raise damage.classify(relation, path, exc) from None
    if read[1] != digest:
        raise damage.corrupt_file(relation, path, "its SHA-256 is not the one the table's metadata names")
    _remember(value, read[0])
    return read[0]


def texts(io: Any, values: Mapping[str, str], relation: str) -> dict[str, str]:
    """`values` with each reference replaced by its text."""
    if not any(is_reference(v) for v in values.values()):
        return dict(values)
    return {key: text(io, value, relation) for key, value in values.items()}


def referenced(properties: Mapping[str, str], docs: Iterable[str | None]) -> set[str]:
    """The files a table's properties and field docs reference (orphan GC keeps them)."""
    return {value[len(MARKER):].partition(":")[2] for value in (*properties.values(), *docs)
            if value and is_reference(value)}


def _read(io: Any, path: str) -> tuple[str, str]:
    """The file's text (decoded as a big literal's pieces are) and its SHA-256."""
    digest = hashlib.sha256()
    pieces: list[bytes] = []
    with io.new_input(path).open() as f:
        while piece := f.read(_PIECE_BYTES):
            digest.update(piece)
            pieces.append(piece)
    return BigText(tuple(pieces), sum(map(len, pieces)), 0).text(), digest.hexdigest()


_LOCK = threading.Lock()
_READ: OrderedDict[str, str] = OrderedDict()


def _remember(reference: str, value: str) -> None:
    text_arrays.prepare(value)  # (pg_catalog's rows carry it: made here, not under the engine's lock)
    with _LOCK:
        _READ[reference] = value
        _READ.move_to_end(reference)
        while sum(map(len, _READ.values())) > _CACHED_CHARS and len(_READ) > 1:
            _READ.popitem(last=False)
