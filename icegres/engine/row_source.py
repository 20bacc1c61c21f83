"""A running query's rows, which a front end takes in batches (gathered for encoding) and encodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from icegres.engine.errors import from_datafusion

# The column-at-a-time encoders cost per call as well as per row, so DataFusion's 8192-row batches
# are gathered into bigger ones first: 1M rows of demo.trips encoded ~20% faster in 32k-row
# batches. The byte cap keeps wide rows from piling up. A slow stream's first rows wait for the
# gathering, as they already waited for the one-batch peek that tells "exhausted" apart.
ENCODE_ROWS = 32_768
ENCODE_BYTES_MAX = 8 << 20


@dataclass
class RowSource:
    """A running query's rows: DataFusion's batch stream plus what is left of the last batch."""

    schema: pa.Schema
    stream: Any  # datafusion RecordBatchStream, or an iterator of pa.RecordBatch
    pending: pa.RecordBatch | None = None
    done: bool = False
    rows_sent: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def take_many(self, limit: int) -> pa.RecordBatch | None:
        """Like take, but gathers batches until ENCODE_ROWS rows (or ENCODE_BYTES_MAX bytes)."""
        first = self.take(limit)
        if first is None:
            return None
        batches = [first]
        rows, size = first.num_rows, first.nbytes
        while rows < ENCODE_ROWS and size < ENCODE_BYTES_MAX and (limit == 0 or rows < limit):
            # A whole batch first, cut to the limit only once it is known to join: cut by
            # `take(limit)`, a batch of another schema put back would drop the rows cut off.
            nxt = self.take(0)
            if nxt is None:
                break
            if not nxt.schema.equals(first.schema):
                self.pending = nxt  # encoded on its own, next time
                break
            if limit and nxt.num_rows > limit - rows:
                self.pending = nxt.slice(limit - rows)
                nxt = nxt.slice(0, limit - rows)
            batches.append(nxt)
            rows += nxt.num_rows
            size += nxt.nbytes
        return first if len(batches) == 1 else pa.concat_batches(batches)

    def has_more(self) -> bool:
        batch = self.take(0)
        if batch is None:
            return False
        self.pending = batch
        return True

    def take(self, limit: int) -> pa.RecordBatch | None:
        """Up to `limit` rows (0 = no limit: one whole batch); None at the end. Blocking."""
        while True:
            if self.pending is not None and self.pending.num_rows:
                batch = self.pending
                if limit and batch.num_rows > limit:
                    self.pending = batch.slice(limit)
                    return batch.slice(0, limit)
                self.pending = None
                return batch
            if self.done:
                return None
            try:
                nxt = next(self.stream)
            except StopIteration:
                self.done = True
                return None
            except Exception as exc:
                self.done = True
                raise from_datafusion(exc) from None
            self.pending = nxt if isinstance(nxt, pa.RecordBatch) else nxt.to_pyarrow()
