"""The write tails' lake watermark, kept exact when snapshot expiry removes the history holding it.

A tail flush publishes its watermark in its snapshot's summary (`icegres.tail-id`,
`icegres.tail-lsn`, and a lake-fenced tail's writer term: ladder.py). Replay, readers and the lake
fence find a tail's watermark by walking the ancestry of a ref's head to the newest snapshot that
tail wrote. Expiry cuts that ancestry: the oldest snapshot it keeps of a chain (a *root*) loses its
parent. So, in the same commit as the expiry, every root whose ancestry is cut carries what the walk
would have found beyond the cut, for every tail: table property `icegres.tail-marks.<root id>` =
JSON `{tail id: {summary key: value}}` (`carry`). A walk that reaches a root without finding the
tail reads the root's carried marks (`tail_summary`). A later expiry that cuts deeper carries the
carried marks forward to its new roots, and drops the properties of the roots it expires.

One property per root, not one for the table: two expiries racing on one table each set their own
roots' keys, so neither overwrites the other's (properties are not guarded by commit requirements).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

TAIL_ID_PROPERTY = "icegres.tail-id"
TAIL_LSN_PROPERTY = "icegres.tail-lsn"
CARRIED_PREFIX = "icegres.tail-marks."
# The summary keys a tail flush writes that a walk reads back: the id, the LSN, a writer term.
_CARRIED_KEYS = (TAIL_LSN_PROPERTY, "icegres.quorum-term", "icegres.pg-tail-epoch")


def tail_summary(metadata: Any, head: Any, tail_id: str) -> dict[str, str] | None:
    """The summary of the newest snapshot `tail_id` wrote in `head`'s ancestry, including the part
    an expiry removed (then only the carried keys); None if the tail never wrote there."""
    from pyiceberg.table.snapshots import ancestors_of

    last = None
    for snapshot in ancestors_of(head, metadata):
        summary = snapshot.summary
        if summary is not None and summary.get(TAIL_ID_PROPERTY) == tail_id:
            return dict(summary.additional_properties)
        last = snapshot
    if last is None:
        return None
    return carried(metadata, last.snapshot_id).get(tail_id)


def carried(metadata: Any, snapshot_id: int) -> dict[str, dict[str, str]]:
    """The tails' marks an expiry left on root `snapshot_id` ({} if none)."""
    text = metadata.properties.get(f"{CARRIED_PREFIX}{snapshot_id}")
    return json.loads(text) if text else {}


def carry(metadata: Any, expired: Iterable[int]) -> tuple[dict[str, str], tuple[str, ...]]:
    """What an expiry of `expired` from `metadata` must set and remove in the same commit: the
    marks of every root it leaves (a kept snapshot whose parent it expires), and the properties
    of roots it expires."""
    gone = set(expired)
    updates: dict[str, str] = {}
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id in gone or snapshot.parent_snapshot_id not in gone:
            continue
        marks = _marks_beyond(metadata, snapshot.parent_snapshot_id)
        if marks:
            updates[f"{CARRIED_PREFIX}{snapshot.snapshot_id}"] = json.dumps(marks, sort_keys=True)
    removals = tuple(key for key in metadata.properties
                     if key.startswith(CARRIED_PREFIX) and _root_of(key) in gone)
    return updates, removals


def _marks_beyond(metadata: Any, start: int) -> dict[str, dict[str, str]]:
    """Per tail, the carried keys of its newest snapshot in the ancestry from `start` (inclusive),
    then the carried marks where that ancestry already ended."""
    from pyiceberg.table.snapshots import ancestors_of

    marks: dict[str, dict[str, str]] = {}
    last = None
    for snapshot in ancestors_of(metadata.snapshot_by_id(start), metadata):
        last = snapshot
        summary = snapshot.summary
        tail_id = summary.get(TAIL_ID_PROPERTY) if summary is not None else None
        if tail_id is not None and tail_id not in marks:
            marks[tail_id] = _keys(summary.additional_properties)
    if last is not None:
        for tail_id, keys in carried(metadata, last.snapshot_id).items():
            marks.setdefault(tail_id, keys)
    return marks


def _keys(summary: Mapping[str, str]) -> dict[str, str]:
    return {k: summary[k] for k in (TAIL_ID_PROPERTY, *_CARRIED_KEYS) if k in summary}


def _root_of(key: str) -> int | None:
    tail = key[len(CARRIED_PREFIX):]
    return int(tail) if tail.lstrip("-").isdigit() else None
