"""A big str made without holding the GIL for its whole size.

A 50 MB text with one non-ASCII character is a 100 MB str. `"".join` makes it in one C call
that holds the GIL while it copies the parts and while the kernel faults in and zeroes the 25,600
fresh pages of its buffer: 22 ms for the copy and faults, of which 2 ms are the copy alone (the
same join into memory already faulted in; 2026-12-07, this machine). Every other session waits
that long for the GIL, and the faults cost more on a busy machine: inside full test runs a 50 MB
COMMENT ON or DEFAULT (two or three such joins) held a bystander's `select 1` for 103-244 ms,
where alone it waited 27-39 ms (tests/e2e/test_limits.py).

So a str over `BIG_CHARS` is allocated empty (`PyUnicode_New`, of the kind its widest character
needs, as CPython's own constructors do: a str is always of the narrowest kind that holds it)
and filled one part at a time by `ctypes.memmove`, which lets the GIL go while it copies and
faults. Big bytes (`join_bytes`: a 50 MB ErrorResponse's fields) are made the same way, from
`PyBytes_FromStringAndSize(NULL, n)`. Where the layout check at import fails (another
interpreter, another object layout), the plain join is used.
"""

from __future__ import annotations

import codecs
import ctypes
import sys
from collections.abc import Iterable, Sequence

BIG_CHARS = 1 << 20

# Per kind (bytes a character), its codec and the widest character it holds.
_KINDS = {1: ("latin-1", 0xFF), 2: ("utf-16-le", 0xFFFF), 4: ("utf-32-le", 0x10FFFF)}


def join(parts: Sequence[str]) -> str:
    """`"".join(parts)`, made as described above when it is big."""
    chars = sum(map(len, parts))
    if chars < BIG_CHARS or _new is None:
        return "".join(parts)
    kind = max((_kind(p) for p in parts), default=1)
    ascii_only = kind == 1 and all(p.isascii() for p in parts)
    made = _new(chars, 0x7F if ascii_only else _KINDS[kind][1])
    at = id(made) + (_ASCII_HEADER if ascii_only else _HEADER)
    codec = _KINDS[kind][0]
    for part in parts:
        for start in range(0, len(part), BIG_CHARS):
            data = part[start:start + BIG_CHARS].encode(codec)
            ctypes.memmove(at, data, len(data))  # (the GIL let go: the copy and the page faults)
            at += len(data)
    return made


def join_bytes(parts: Sequence[bytes]) -> bytes:
    """`b"".join(parts)`, made as `join` makes a str when it is big."""
    size = sum(map(len, parts))
    if size < BIG_CHARS or _new_bytes is None:
        return b"".join(parts)
    made = _new_bytes(None, size)
    at = id(made) + _BYTES_HEADER
    for part in parts:
        ctypes.memmove(at, part, len(part))
        at += len(part)
    return made


def decoded(pieces: Iterable[bytes]) -> str:
    """UTF-8 `pieces` (a character may span two) as one str: `join` of their decoded parts."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    return join([*(decoder.decode(p) for p in pieces), decoder.decode(b"", final=True)])


def _kind(part: str, header: int | None = None) -> int:
    """The bytes a character of `part` takes in a str (1, 2 or 4), read off its size: a str is
    stored in the narrowest kind that holds it, so no pass over its characters is needed."""
    if part.isascii():
        return 1
    return (sys.getsizeof(part) - (_HEADER if header is None else header)) // (len(part) + 1)


def _layout() -> tuple[object, int, int] | None:
    """`PyUnicode_New` and where a compact str's characters start (after an ASCII str's header,
    and after any other's), checked by making a str of each kind and comparing; None if any
    differs."""
    try:
        new = ctypes.pythonapi.PyUnicode_New
    except AttributeError:
        return None
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_ssize_t, ctypes.c_uint32]
    ascii_header = sys.getsizeof("") - 1  # (the header and the terminating NUL)
    header = sys.getsizeof("\xe9") - 2
    for sample in ("abc", "ab\xe9", "a\u0101\xe9", "a\U0001f600\xe9"):
        kind = _kind(sample, header)
        made = new(len(sample), 0x7F if sample.isascii() else max(map(ord, sample)))
        data = sample.encode(_KINDS[kind][0])
        ctypes.memmove(id(made) + (ascii_header if sample.isascii() else header), data, len(data))
        if made != sample or hash(made) != hash(sample) or made.isascii() != sample.isascii():
            return None
    return new, ascii_header, header


def _bytes_layout() -> tuple[object, int] | None:
    """`PyBytes_FromStringAndSize` and where a bytes object's bytes start, checked likewise."""
    try:
        new = ctypes.pythonapi.PyBytes_FromStringAndSize
    except AttributeError:
        return None
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_ssize_t]
    header = sys.getsizeof(b"") - 1  # (the header and the terminating NUL)
    sample = b"ab\x00\xffc"
    made = new(None, len(sample))
    ctypes.memmove(id(made) + header, sample, len(sample))
    return (new, header) if made == sample and hash(made) == hash(sample) else None


_checked = _layout()
_new, _ASCII_HEADER, _HEADER = _checked if _checked is not None else (None, 0, 0)
_checked_bytes = _bytes_layout()
_new_bytes, _BYTES_HEADER = _checked_bytes if _checked_bytes is not None else (None, 0)
