"""scan_links: what a commit's re-mount pays to link a table's data files into a scan directory
(icegres/engine/scan_sets.py), hard links vs symbolic links, interleaved round by round.

Every commit of a table mounts the new snapshot with a fresh scan directory holding one link per
data file, and drops the previous one (bench `history`: the cost that grows with the file count
once history is bounded). Here, in this process: 2,000 empty files under a lake-like path (a
table's data directory, names as pyiceberg writes them) and `ScanSets.acquire` over all of them,
timed, then the directory's removal (`shutil.rmtree`, what the remover thread does), timed. Peers:
`hard links` (what acquire does where the filesystem allows) and `symbolic links` (acquire with
`os.link` refused, its fallback, and what every set was before).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import (
    fmt_ms,
    fmt_x,
    load_meter,
    percentile,
    provenance,
    rotation,
    round_ratio,
    write_report,
)

FILES = 2000
HARD, SYMBOLIC = "hard links", "symbolic links"


@contextlib.contextmanager
def _links_refused() -> Any:
    """os.link refused as on another filesystem (EXDEV): acquire falls back to symbolic links."""
    real = os.link

    def refuse(*_: Any, **__: Any) -> None:
        raise OSError(18, "Invalid cross-device link")

    os.link = refuse
    try:
        yield
    finally:
        os.link = real


def run(opts: Any) -> dict[str, Any]:
    import gc

    from icegres.engine.scan_sets import ScanSets

    report: dict[str, Any] = {"suite": "scan_links", "section": "scan_links", **provenance(opts.command)}
    rounds = opts.rounds_or(3 if opts.quick else 10)
    samples: dict[str, dict[str, list[tuple[int, float]]]] = {p: {"link": [], "remove": []} for p in (HARD, SYMBOLIC)}
    with tempfile.TemporaryDirectory(prefix="icegres-bench-scan-links-", dir=Path.cwd()) as tmp:
        data = Path(tmp) / "warehouse" / "demo" / "events" / "data"
        data.mkdir(parents=True)
        files = []
        for i in range(FILES):
            path = data / f"00000-{i}-{uuid.uuid4()}.parquet"
            path.touch()
            files.append(str(path))
        sets = ScanSets()
        meter = load_meter()
        for rnd in range(-1, rounds):  # round -1 warms up
            for peer in rotation([HARD, SYMBOLIC], rnd + 1):
                with _links_refused() if peer == SYMBOLIC else contextlib.nullcontext():
                    t0 = time.perf_counter()
                    made = sets.acquire(f"{peer}-{rnd}", files)
                    link_s = time.perf_counter() - t0
                kind = "symlink" if os.path.islink(next(made.path.iterdir())) else "hard"
                if (kind == "hard") != (peer == HARD):
                    raise RuntimeError(f"{peer}: acquire made {kind} links")
                path = made.path
                t0 = time.perf_counter()
                shutil.rmtree(path)
                remove_s = time.perf_counter() - t0
                del made
                gc.collect()  # the set's finalizer queues a removal of a directory already gone
                if rnd >= 0:
                    samples[peer]["link"].append((rnd, link_s))
                    samples[peer]["remove"].append((rnd, remove_s))
            if rnd >= 0:
                print(f"  round {rnd + 1}/{rounds}", flush=True)
        report["load"] = meter.finish()
    rows, summary = [], {}
    for key, label in (("link", f"ScanSets.acquire over {FILES:,} files"), ("remove", "removing the directory")):
        for peer in (HARD, SYMBOLIC):
            vals = [s for _, s in samples[peer][key]]
            summary[f"{key}_{peer}_p50_ms"] = percentile(vals, 50) * 1e3
            ratio = round_ratio(samples[SYMBOLIC][key], samples[HARD][key]) if peer == SYMBOLIC else None
            if ratio is not None:
                summary[f"{key}_symbolic/hard"] = ratio
            rows.append([label if peer == HARD else "", peer, fmt_ms(percentile(vals, 50) * 1e3),
                         fmt_ms(percentile(vals, 95) * 1e3), str(len(vals)), fmt_x(ratio) if ratio else ""])
    report["title"] = f"scan_links: a scan directory of {FILES:,} data files, hard vs symbolic links"
    report["facts"] = {
        "Files": f"{FILES:,} empty files under the working directory's filesystem "
                 "(`<tmp>/warehouse/demo/events/data/00000-<i>-<uuid>.parquet`, as a lake lays them out)",
        "Peers, same run, alternating who goes first": f"`{HARD}`: icegres's `ScanSets.acquire`; `{SYMBOLIC}`: "
                                                       "the same with `os.link` refused (its fallback)",
        "Rounds": f"{rounds} measured (+1 warm-up), one set per peer per round",
    }
    report["tables"] = [{
        "title": "Per commit's re-mount of a table of that many files",
        "columns": ["step", "links", "p50 ms", "p95 ms", "n", "symbolic / hard"],
        "align": "llrrrr",
        "rows": rows,
    }]
    report["summary"] = summary
    report["samples"] = samples
    report["errors"], report["mismatches"] = {}, []
    write_report(report, opts.write)
    return report
