"""Rows per second of encode_data_rows for a typical 8-column batch, text and binary formats.

    .venv/bin/python bench/bench_types.py [--rows N] [--repeat K] [--timezone Europe/Paris]

The batch: bigint, text, double, double (5% NULL), timestamptz, int, text, bool.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from icegres.pg.clock import TextSettings
from icegres.protocol.pgwire.datarows import encode_data_rows


def make_batch(rows: int, seed: int = 0) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    ts_us = rng.integers(1_500_000_000_000_000, 1_800_000_000_000_000, rows)
    nulls = rng.random(rows) < 0.05
    return pa.record_batch(
        [
            pa.array(rng.integers(0, 2**40, rows), pa.int64()),
            pa.array(words[rng.integers(0, len(words), rows)].tolist(), pa.string()),
            pa.array(rng.normal(0, 1000, rows), pa.float64()),
            pa.array(rng.random(rows), pa.float64(), mask=nulls),
            pa.array(ts_us, pa.timestamp("us", tz="UTC")),
            pa.array(rng.integers(-(2**31), 2**31, rows), pa.int32()),
            pa.array([f"user-{i}@example.com" for i in rng.integers(0, 10**6, rows)], pa.string()),
            pa.array(rng.random(rows) < 0.5, pa.bool_()),
        ],
        names=["id", "kind", "amount", "score", "created_at", "n", "email", "flag"],
    )


def rows_per_s(
    batch: pa.RecordBatch, fmt: int, settings: TextSettings, repeat: int
) -> tuple[float, float, int]:
    """(rows/s by wall clock, rows/s by this thread's CPU time, bytes per batch), best of `repeat`.

    The CPU-time figure is what encoding costs on an idle core; on a shared machine the wall-clock
    figure also counts the time the thread spent waiting for a core.
    """
    formats = [fmt] * batch.num_columns
    encode_data_rows(batch, formats, settings)  # warm up caches (time zone tables, kernels)
    best_wall = best_cpu = float("inf")
    size = 0
    for _ in range(repeat):
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        size = len(encode_data_rows(batch, formats, settings))
        best_cpu = min(best_cpu, time.thread_time() - cpu0)
        best_wall = min(best_wall, time.perf_counter() - wall0)
    return batch.num_rows / best_wall, batch.num_rows / best_cpu, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=65_536)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--timezone", default="UTC")
    args = ap.parse_args()
    batch = make_batch(args.rows)
    settings = TextSettings(timezone=args.timezone)
    print(
        f"{args.rows} rows x {batch.num_columns} cols, TimeZone={args.timezone}, best of {args.repeat}"
    )
    for name, fmt in (("text", 0), ("binary", 1)):
        wall, cpu, size = rows_per_s(batch, fmt, settings, args.repeat)
        print(
            f"{name:6s} {wall / 1e6:5.2f} M rows/s wall clock, {cpu / 1e6:5.2f} M rows/s of CPU time"
            f"  ({size / args.rows:.1f} bytes/row)"
        )


if __name__ == "__main__":
    main()
