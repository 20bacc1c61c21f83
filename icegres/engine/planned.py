"""A planned statement, and its running stream, with what must outlive planning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datafusion import DataFrame


@dataclass(eq=False)
class PlannedQuery:
    """A statement's plan and what must live as long as it runs.

    `hold` is the statement's claim on the scan directories it may read (scan_sets.py): a hold
    taken before planning, and the sets of the private context it was planned on, which may be
    dropped while the statement still runs; whatever runs the plan keeps it."""

    df: DataFrame
    hold: tuple[Any, Any]
    repeat: tuple[Any, ...] | None = None  # its plan-cache key; None: not reusable
    input_rows: int | None = None  # rows it reads where fewer than its tables hold (pruned)
    # The tables the statement reads (None: it may read any), found once for its planning and
    # running (QueryContext.plan); a plan of a tree the engine built leaves it None.
    reads: set[tuple[str, str]] | None = None

    def with_df(self, df: DataFrame) -> PlannedQuery:
        return PlannedQuery(df, self.hold, self.repeat, self.input_rows, self.reads)


class HeldStream:
    """A running plan's batch stream, holding the plan's claim on its scan directories."""

    __slots__ = ("_stream", "hold")

    def __init__(self, stream: Any, hold: tuple[Any, Any]) -> None:
        self._stream = stream
        self.hold = hold

    @property
    def inner(self) -> Any:
        """The stream it holds for (a `CancellableBatches` where the first pull may run long)."""
        return self._stream

    def __iter__(self) -> HeldStream:
        return self

    def __next__(self) -> Any:
        return next(self._stream)
