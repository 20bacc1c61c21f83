"""The parts every suite shares: interleaving, per-round ratios, reports, scorecard, plots, the gate.

The pure parts (``rotation``, ``round_ratio``, ``summarise``, ``render_section``, ``check``) take
and return plain data, so tests/unit/test_bench_harness.py drives them without servers or clocks.
The rest writes ``bench/results/<date>-<suite>.json``, the suite's ``<!-- suite:start/end -->``
section of ``bench/SCORECARD.md`` and its PNG plots.

Ratios are the median over rounds of the ratio of that round's medians: each round runs every peer
back to back (A B C, B C A, ...), so drift on a shared machine hits all peers of a round alike,
and a ratio is far steadier across runs than an absolute time.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import shutil
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
PLOTS_DIR = BENCH_DIR / "plots"
SCORECARD = BENCH_DIR / "SCORECARD.md"
BASELINES = BENCH_DIR / "baselines.json"
# A gated ratio fails when it is worse than its baseline by more than this factor (1.35 = 35%).
# This machine is shared and 2-core: interleaved ratios moved by up to ~25% between quiet runs.
GATE_TOLERANCE = 0.35


# --- pure: order, statistics, ratios -------------------------------------------------------------


def rotation(items: Sequence[Any], i: int) -> list[Any]:
    """Iteration i runs the peers starting from the (i mod n)-th: A B C, B C A, C A B, A B C ..."""
    if not items:
        return []
    k = i % len(items)
    return list(items[k:]) + list(items[:k])


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]; NaN when empty."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    v = list(values)
    return statistics.median(v) if v else math.nan


def per_round(samples: Iterable[tuple[int, float]]) -> dict[int, float]:
    """(round, value) samples -> the median value of each round."""
    by_round: dict[int, list[float]] = {}
    for rnd, v in samples:
        by_round.setdefault(rnd, []).append(v)
    return {rnd: median(v) for rnd, v in by_round.items()}


def round_ratio(a: Iterable[tuple[int, float]], b: Iterable[tuple[int, float]]) -> float | None:
    """Median over the rounds both have of (median of a in that round) / (median of b in it)."""
    ra, rb = per_round(a), per_round(b)
    ratios = [ra[r] / rb[r] for r in sorted(ra) if r in rb and rb[r] > 0]
    return median(ratios) if ratios else None


@dataclass
class Samples:
    """peer -> query -> [(round, seconds)], plus what went wrong on the way."""

    data: dict[str, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # "peer/query" -> first error
    mismatches: list[str] = field(default_factory=list)

    def add(self, peer: str, query: str, rnd: int, seconds: float) -> None:
        self.data.setdefault(peer, {}).setdefault(query, []).append((rnd, seconds))

    def of(self, peer: str, query: str) -> list[tuple[int, float]]:
        return self.data.get(peer, {}).get(query, [])


def summarise(
    samples: Samples, queries: Sequence[str], peers: Sequence[str], subject: str,
    refs: Sequence[str],
) -> dict[str, Any]:
    """Per query: p50/p95/n per peer (ms) and `subject / ref` for each ref (median of per-round
    ratios). Ratio keys read `subject/ref`."""
    out: dict[str, Any] = {}
    for q in queries:
        entry: dict[str, Any] = {"peers": {}, "ratios": {}}
        for p in peers:
            vals = [s for _, s in samples.of(p, q)]
            if vals:
                entry["peers"][p] = {
                    "p50_ms": percentile(vals, 50) * 1e3,
                    "p95_ms": percentile(vals, 95) * 1e3,
                    "n": len(vals),
                }
        for ref in refs:
            r = round_ratio(samples.of(subject, q), samples.of(ref, q))
            if r is not None:
                entry["ratios"][f"{subject}/{ref}"] = r
        out[q] = entry
    return out


# --- running interleaved peers ------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    key: str
    label: str
    sql: str  # str.format template over the drawn parameters
    iters: int  # per round
    quick_iters: int = 1
    draw: Callable[[random.Random], dict[str, Any]] = lambda rng: {}
    # Only these peers run it (None: all). E.g. PostgreSQL holds trips but not TPC-H.
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()

    def runs_on(self, peer: str) -> bool:
        return (self.only is None or peer in self.only) and peer not in self.skip


class Peer:
    """Runs SQL text and returns rows as plain Python values (for the cross-peer check)."""

    name: str

    def run(self, sql: str) -> list[tuple]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _coarse(v: Any) -> Any:
    return f"{float(v):.4g}" if isinstance(v, int | float) and not isinstance(v, bool) else repr(v)


def rows_match(a: list[tuple], b: list[tuple], tol: float = 1e-6) -> bool:
    """Same rows in any order, numbers equal within `tol` (relative or absolute): DataFusion's
    avg() of a decimal keeps 6 decimals where DuckDB's returns a double. Expects `normalise`d rows
    (Decimal -> float, instants in UTC)."""
    if len(a) != len(b):
        return False
    key = lambda r: tuple(_coarse(v) for v in r)  # noqa: E731
    for ra, rb in zip(sorted(a, key=key), sorted(b, key=key), strict=True):
        if len(ra) != len(rb):
            return False
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, int | float) and isinstance(y, int | float) and not isinstance(x, bool):
                if not math.isclose(float(x), float(y), rel_tol=tol, abs_tol=tol):
                    return False
            elif x != y:
                return False
    return True


def short_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 400 else text[:400] + " ..."


def run_interleaved(
    peers: Sequence[Peer], queries: Sequence[Query], rounds: int, warmup: int, quick: bool,
    seed: int, reference: str | None = None, progress: Callable[[str], None] = print,
) -> Samples:
    """Warm-up rounds (the first checks that every peer's answer equals `reference`'s), then
    `rounds` measured rounds; within a round each iteration runs all peers, rotating who goes
    first. A peer that fails a query is recorded once and left out of that query afterwards."""
    from bench.pgwire_read import normalise

    res = Samples()
    broken: set[tuple[str, str]] = set()

    def attempt(peer: Peer, q: Query, sql: str) -> tuple[float, list[tuple]] | None:
        if (peer.name, q.key) in broken:
            return None
        try:
            t0 = time.perf_counter_ns()
            rows = peer.run(sql)
            return (time.perf_counter_ns() - t0) / 1e9, rows
        except Exception as exc:
            broken.add((peer.name, q.key))
            res.errors[f"{peer.name}/{q.key}"] = f"{sql[:120]!r}: {short_error(exc)}"
            return None

    for w in range(warmup):
        for q in queries:
            sql = q.sql.format(**q.draw(random.Random(seed - 1 - w)))
            answers: dict[str, list[tuple]] = {}
            for peer in [p for p in peers if q.runs_on(p.name)]:
                got = attempt(peer, q, sql)
                if got is not None:
                    answers[peer.name] = normalise(got[1])
            if w == 0 and answers:
                ref = reference if reference in answers else next(iter(answers))
                for name, rows in answers.items():
                    if not rows_match(rows, answers[ref]):
                        res.mismatches.append(
                            f"{q.key}: {name} answered {rows[:2]!r} ({len(rows)} rows) but {ref} "
                            f"answered {answers[ref][:2]!r} ({len(answers[ref])} rows)"
                        )
                        broken.add((name, q.key))  # a wrong answer's time does not count
    rng = random.Random(seed)
    for rnd in range(rounds):
        t0 = time.perf_counter()
        for q in queries:
            qpeers = [p for p in peers if q.runs_on(p.name)]
            n = q.quick_iters if quick else q.iters
            for i in range(n):
                sql = q.sql.format(**q.draw(rng))
                for peer in rotation(qpeers, rnd * n + i):
                    got = attempt(peer, q, sql)
                    if got is not None:
                        res.add(peer.name, q.key, rnd, got[0])
        progress(f"  round {rnd + 1}/{rounds} ({time.perf_counter() - t0:.1f}s)")
    return res


# --- reports, results files, the scorecard --------------------------------------------------------


def fmt_ms(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{v:.2f}" if v < 100 else f"{v:.0f}"


def fmt_x(v: float | None) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}x"


def machine_line(m: dict[str, Any]) -> str:
    v = m.get("versions", {})
    return (
        f"{m.get('cpu', '?')}, {m.get('logical_cores')} logical / {m.get('physical_cores')} "
        f"physical cores, {m.get('ram_gb')} GB RAM, {m.get('os', '?')}; Python {m.get('python')}; "
        + ", ".join(f"{k} {x}" for k, x in v.items() if x != "absent")
    )


def load_line(load: dict[str, Any]) -> str:
    if not load:
        return "not measured"
    share = load.get("others_share_of_machine")
    la0, la1 = load.get("loadavg_start") or [0], load.get("loadavg_end") or [0]
    return (
        f"{load.get('wall_s', 0):.0f} s measured; other processes used "
        f"{load.get('others_cpu_s', 0):.0f} CPU-s = {(share or 0) * 100:.0f}% of the machine; "
        f"load average {la0[0]:.1f} -> {la1[0]:.1f}"
        + (" (**noisy**: read ratios, not absolute times)" if (share or 0) > 0.10 else "")
    )


def table_lines(columns: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> list[str]:
    """A Markdown table; `align` has one char per column, 'r' for right-aligned."""
    sep = ["--:" if (align[i:i + 1] == "r") else "---" for i in range(len(columns))]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines


def render_section(report: dict[str, Any]) -> str:
    """The scorecard section of one suite's report: provenance first, then its tables and notes."""
    name = report["section"]
    lines = [
        f"<!-- {name}:start -->",
        f"## {report['title']}",
        "",
        f"- **Command:** `{report['command']}`",
        f"- **Date:** {report['date']}  **Commit:** {report['commit']} (icegres source sha256 "
        f"`{report.get('source_sha256', '?')}`)",
        f"- **Machine:** {machine_line(report.get('machine', {}))}",
        f"- **Load during the run:** {load_line(report.get('load', {}))}",
    ]
    for k, v in report.get("facts", {}).items():
        lines.append(f"- **{k}:** {v}")
    lines.append(f"- **Raw data:** `{report['results_file']}`")
    for t in report.get("tables", []):
        lines += ["", f"### {t['title']}", ""]
        lines += table_lines(t["columns"], t["rows"], t.get("align", ""))
        for note in t.get("notes", []):
            lines += ["", note]
    for plot in report.get("plots", []):
        lines += ["", f"![{Path(plot).stem}](plots/{Path(plot).name})"]
    if report.get("notes"):
        lines += [""] + [f"- {n}" for n in report["notes"]]
    problems = [f"- ERROR {k}: {v}" for k, v in report.get("errors", {}).items()] + [
        f"- MISMATCH (time not counted) {m}" for m in report.get("mismatches", [])
    ]
    if problems:
        lines += ["", "### Errors and mismatches", ""] + problems
    lines += ["", f"<!-- {name}:end -->"]
    return "\n".join(lines)


def replace_section(text: str, name: str, section: str) -> str:
    """`text` with its `<!-- name:start/end -->` section replaced by `section` (or appended)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        return head + section + tail
    return text.rstrip("\n") + "\n\n" + section + "\n"


def write_scorecard_section(name: str, section: str) -> None:
    from bench.pgwire_read import SCORECARD_HEADER

    text = SCORECARD.read_text() if SCORECARD.exists() else SCORECARD_HEADER
    SCORECARD.write_text(replace_section(text, name, section))


def json_safe(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [json_safe(x) for x in v]
    return v


def provenance(command: str) -> dict[str, Any]:
    from bench.pgwire_read import git_commit, machine_facts, source_digest

    return {
        "command": command,
        "date": dt.date.today().isoformat(),
        "started_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "source_sha256": source_digest(),
        "machine": machine_facts(),
    }


def results_path(section: str, date: str | None = None) -> Path:
    return RESULTS_DIR / f"{date or dt.date.today().isoformat()}-{section}.json"


def write_report(report: dict[str, Any], write: bool = True) -> None:
    """Results JSON, then the scorecard section; prints the section either way."""
    path = results_path(report["section"], report["date"])
    report["results_file"] = str(path.relative_to(REPO_DIR))
    text = render_section(report)
    print("\n" + text + "\n", flush=True)
    if not write:
        return
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(json_safe(report), indent=1, default=str) + "\n")
    shutil.move(tmp, path)
    write_scorecard_section(report["section"], text)
    print(f"wrote {report['results_file']} and its bench/SCORECARD.md section", flush=True)


# --- plots --------------------------------------------------------------------------------------

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_bars(
    summary: dict[str, Any], labels: dict[str, str], peers: Sequence[str], path: Path, title: str
) -> str:
    """Bars of p50 (whisker to p95) per query and peer, log scale."""
    plt = _plt()
    queries = list(summary)
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(queries) + 3), 4.8))
    width = 0.8 / max(len(peers), 1)
    for j, peer in enumerate(peers):
        xs, p50, err = [], [], []
        for i, q in enumerate(queries):
            st = summary[q]["peers"].get(peer)
            if st:
                xs.append(i + (j - (len(peers) - 1) / 2) * width)
                p50.append(st["p50_ms"])
                err.append(max(st["p95_ms"] - st["p50_ms"], 0))
        if xs:
            ax.bar(xs, p50, width, yerr=[[0] * len(err), err], label=peer,
                   color=COLORS[j % len(COLORS)], capsize=2)
    ax.set_xticks(range(len(queries)), [labels.get(q, q) for q in queries], rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("ms (bar p50, whisker p95; log)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3, which="both")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path.relative_to(REPO_DIR))


def line_plot(
    series: dict[str, list[tuple[float, float]]], path: Path, title: str, xlabel: str,
    ylabel: str, logx: bool = True, logy: bool = True,
) -> str:
    """One line per series name through its (x, y) points."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for j, (name, pts) in enumerate(series.items()):
        pts = sorted(p for p in pts if p[1] is not None and not math.isnan(p[1]))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name,
                    color=COLORS[(j // 2) % len(COLORS)], linestyle="-" if j % 2 == 0 else "--")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path.relative_to(REPO_DIR))


# --- the regression gate ------------------------------------------------------------------------


def latest_results(results_dir: Path = RESULTS_DIR) -> dict[str, dict[str, Any]]:
    """section -> the newest results report of that section (by the date in its name)."""
    newest: dict[str, tuple[str, Path]] = {}
    for p in results_dir.glob("*.json"):
        date, section = p.stem[:10], p.stem[11:]
        if section and (section not in newest or date > newest[section][0]):
            newest[section] = (date, p)
    return {s: json.loads(p.read_text()) for s, (_, p) in newest.items()}


def check(
    reports: dict[str, dict[str, Any]], baselines: dict[str, Any], tolerance: float
) -> tuple[bool, list[str]]:
    """Compare each gated ratio of the newest reports with its baseline.

    baselines: {"section": {"metric": {"ratio": x, "better": "lower"|"higher"}}}. A ratio fails
    when it is worse than its baseline by more than `tolerance` (relative). A metric missing from
    the newest results is reported, not failed (the suite may not have run yet on this machine).
    """
    ok, lines = True, []
    for section, metrics in sorted(baselines.items()):
        if section.startswith("_"):
            continue
        got = (reports.get(section) or {}).get("gate", {})
        for metric, base in sorted(metrics.items()):
            cur = got.get(metric)
            b = float(base["ratio"])
            if cur is None:
                lines.append(f"  ?    {section}: {metric}: no result (baseline {b:.2f}x)")
                continue
            lower = base.get("better", "lower") == "lower"
            limit = b * (1 + tolerance) if lower else b / (1 + tolerance)
            bad = cur > limit if lower else cur < limit
            ok = ok and not bad
            lines.append(
                f"  {'FAIL' if bad else 'ok  '} {section}: {metric}: {cur:.2f}x vs baseline "
                f"{b:.2f}x ({'<=' if lower else '>='} {limit:.2f}x allowed)"
            )
    return ok, lines


def latency_table(
    summary: dict[str, Any], labels: dict[str, str], peers: Sequence[str], subject: str,
    refs: Sequence[str], ref_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A scorecard table: one row per (query, peer), the subject's ratios on its own row."""
    ref_labels = ref_labels or {}
    cols = ["query", "peer", "p50 ms", "p95 ms", "n"] + [
        f"{subject} / {ref_labels.get(r, r)}" for r in refs]
    rows = []
    for q, entry in summary.items():
        first = True
        for p in peers:
            st = entry["peers"].get(p)
            if st is None:
                continue
            ratios = [fmt_x(entry["ratios"].get(f"{subject}/{r}")) if p == subject else ""
                      for r in refs]
            rows.append([labels.get(q, q) if first else "", p, fmt_ms(st["p50_ms"]),
                         fmt_ms(st["p95_ms"]), st["n"], *ratios])
            first = False
    return {"title": "Latency", "columns": cols, "rows": rows, "align": "llrrr" + "r" * len(refs)}


def load_meter(extra_pids: Sequence[int] = ()) -> Any:
    """bench.pgwire_read.LoadMeter counting every process this one started as 'ours' (servers,
    PostgreSQL), alive or already reaped, so 'others' is really the rest of the machine.
    `extra_pids`: processes the run uses that are not its descendants, counted as ours with their
    children (SeaweedFS's weed: infra/up.sh starts it in a session of its own)."""
    import contextlib as _cl

    import psutil

    from bench.pgwire_read import LoadMeter

    class TreeMeter(LoadMeter):
        def _ours(self) -> float:
            me = psutil.Process()
            t = me.cpu_times()
            total = t.user + t.system + t.children_user + t.children_system
            for child in me.children(recursive=True):
                with _cl.suppress(psutil.Error):
                    ct = child.cpu_times()
                    total += ct.user + ct.system
            for pid in extra_pids:
                with _cl.suppress(psutil.Error):
                    proc = psutil.Process(pid)
                    for p in [proc, *proc.children(recursive=True)]:
                        with _cl.suppress(psutil.Error):
                            ct = p.cpu_times()
                            total += ct.user + ct.system
            return total

    return TreeMeter(None)
