"""The benchmark harness's pure parts: interleaving order, per-round ratio medians, the scorecard
section and the regression gate. No timing assertions: nothing here measures anything."""

from __future__ import annotations

import math

import pytest

from bench.harness import (
    Samples,
    check,
    percentile,
    render_section,
    replace_section,
    rotation,
    round_ratio,
    summarise,
    table_lines,
)

pytestmark = pytest.mark.unit


def test_rotation_interleaves_a_b_c_then_b_c_a():
    order = [rotation("ABC", i) for i in range(4)]
    assert order == [list("ABC"), list("BCA"), list("CAB"), list("ABC")]
    assert rotation([], 3) == []


def test_every_peer_goes_first_equally_often():
    firsts = [rotation(["pg", "duck", "inproc"], i)[0] for i in range(30)]
    assert {p: firsts.count(p) for p in set(firsts)} == {"pg": 10, "duck": 10, "inproc": 10}


def test_round_ratio_is_the_median_of_per_round_ratios_of_medians():
    a = [(0, 2.0), (0, 4.0), (0, 3.0), (1, 10.0), (2, 6.0)]  # medians: 3, 10, 6
    b = [(0, 1.0), (1, 2.0), (1, 2.0), (2, 3.0), (3, 1.0)]  # medians: 1, 2, 3, (3 unmatched)
    assert round_ratio(a, b) == 3.0  # median of 3/1, 10/2, 6/3 = 3, 5, 2
    assert round_ratio(a, []) is None
    assert round_ratio([(0, 1.0)], [(0, 0.0)]) is None


def test_round_ratio_cancels_drift_that_hits_both_peers():
    # The machine gets 10x slower in round 1; the ratio stays 2.
    a = [(0, 2.0), (1, 20.0), (2, 2.0)]
    b = [(0, 1.0), (1, 10.0), (2, 1.0)]
    assert round_ratio(a, b) == 2.0


def test_percentile_interpolates_like_numpy():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    assert math.isnan(percentile([], 50))


def test_summarise_reports_p50_p95_n_and_ratios():
    s = Samples()
    for rnd in range(3):
        s.add("pgwire", "point", rnd, 0.010)
        s.add("duckdb", "point", rnd, 0.005)
    out = summarise(s, ["point", "join"], ["pgwire", "duckdb", "postgres"], "pgwire", ["duckdb", "postgres"])
    assert out["point"]["peers"]["pgwire"] == {"p50_ms": 10.0, "p95_ms": 10.0, "n": 3}
    assert "postgres" not in out["point"]["peers"]
    assert out["point"]["ratios"] == {"pgwire/duckdb": 2.0}
    assert out["join"] == {"peers": {}, "ratios": {}}


def _report(**kw):
    base = {
        "section": "read", "title": "read latency", "command": "python -m bench read --quick",
        "date": "2026-12-03", "commit": "abc1234+dirty", "source_sha256": "0123456789ab",
        "machine": {"cpu": "AMD EPYC", "logical_cores": 2, "physical_cores": 2, "ram_gb": 23.5,
                    "os": "Linux", "python": "3.11.7", "versions": {"duckdb": "1.5.5", "x": "absent"}},
        "load": {"wall_s": 60, "others_cpu_s": 30, "others_share_of_machine": 0.25,
                 "loadavg_start": [1.5, 1, 1], "loadavg_end": [2.0, 1, 1]},
        "results_file": "bench/results/2026-12-03-read.json",
        "tables": [{"title": "Latency", "columns": ["query", "p50 ms"], "rows": [["point", "1.00"]],
                    "align": "lr"}],
        "errors": {"postgres/q1": "boom"}, "mismatches": [],
    }
    base.update(kw)
    return base


def test_scorecard_section_carries_command_date_commit_machine_and_load():
    text = render_section(_report(plots=["bench/plots/read.png"]))
    assert text.startswith("<!-- read:start -->\n## read latency")
    assert text.endswith("<!-- read:end -->")
    for needle in ("`python -m bench read --quick`", "2026-12-03", "abc1234+dirty",
                   "2 logical / 2 physical cores", "23.5 GB RAM", "duckdb 1.5.5",
                   "25% of the machine", "**noisy**", "| point | 1.00 |", "|---|--:|",
                   "![read](plots/read.png)", "ERROR postgres/q1: boom"):
        assert needle in text, needle
    assert "absent" not in text


def test_replace_section_keeps_other_sections():
    doc = "# head\n\n<!-- a:start -->\nold a\n<!-- a:end -->\n\n<!-- b:start -->\nb\n<!-- b:end -->\n"
    new = replace_section(doc, "a", "<!-- a:start -->\nnew a\n<!-- a:end -->")
    assert "new a" in new and "old a" not in new and "<!-- b:start -->\nb\n" in new
    appended = replace_section(doc, "c", "<!-- c:start -->\nc\n<!-- c:end -->")
    assert appended.endswith("<!-- c:end -->\n") and "old a" in appended


def test_table_lines_right_aligns_numbers():
    assert table_lines(["q", "ms"], [["a", 1]], "lr") == ["| q | ms |", "|---|--:|", "| a | 1 |"]


def test_gate_fails_only_beyond_tolerance_and_respects_direction():
    baselines = {
        "_tolerance": 0.35,
        "read": {"point: pgwire/duckdb": {"ratio": 1.0, "better": "lower"}},
        "concurrency": {"point: x16/x1": {"ratio": 2.0, "better": "higher"},
                        "filter: x16/x1": {"ratio": 2.0, "better": "higher"}},
    }
    fine = {"read": {"gate": {"point: pgwire/duckdb": 1.3}},
            "concurrency": {"gate": {"point: x16/x1": 1.6}}}
    ok, lines = check(fine, baselines, 0.35)
    assert ok
    assert any("no result" in line and "filter" in line for line in lines)
    worse = {"read": {"gate": {"point: pgwire/duckdb": 1.4}},
             "concurrency": {"gate": {"point: x16/x1": 1.4}}}
    ok, lines = check(worse, baselines, 0.35)
    assert not ok
    assert sum(line.strip().startswith("FAIL") for line in lines) == 2


def test_rows_match_tolerates_decimal_rounding_but_not_wrong_answers():
    from bench.harness import rows_match

    duck = [("A", "F", 25.51933748733714, 0.050007506421033125, 739367), ("N", "O", 1.0, 2.0, 3)]
    ours = [("N", "O", 1.0, 2.0, 3), ("A", "F", 25.519337, 0.050007, 739367)]
    assert rows_match(ours, duck)
    assert not rows_match([("A", "F", 25.52, 0.050007, 739367), ("N", "O", 1.0, 2.0, 3)], duck)
    assert not rows_match(ours[:1], duck)
    assert not rows_match([("N", "O", 1.0, 2.0, 3), ("A", "X", 25.519337, 0.050007, 739367)], duck)


PGBENCH_OUTPUT = """pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: point.sql
scaling factor: 1
query mode: extended
number of clients: 4
number of threads: 2
maximum number of tries: 1
duration: 5 s
number of transactions actually processed: 1490
number of failed transactions: 0 (0.000%)
latency average = 13.428 ms
initial connection time = 12.113 ms
tps = 297.880316 (without initial connection time)
"""


def test_pgbench_report_is_read_for_tps_latency_and_failures():
    from bench.suites.pgbench import parse_output

    assert parse_output(PGBENCH_OUTPUT) == {"tps": 297.880316, "latency_ms": 13.428, "transactions": 1490,
                                            "failed": 0}
    with pytest.raises(ValueError, match="no tps"):
        parse_output("pgbench: error: connection to server failed\n")


def test_pgbench_command_line_names_mode_clients_and_seed():
    from pathlib import Path

    from bench.suites.pgbench import pgbench_args

    args = pgbench_args(Path("/pg/pgbench"), Path("/tmp/point.sql"), host="127.0.0.1", port=5439, user="bench",
                        dbname="icegres", mode="extended", clients=4, seconds=5, seed=3)
    assert args == ["/pg/pgbench", "-n", "-f", "/tmp/point.sql", "-M", "extended", "-c", "4", "-j", "2", "-T", "5",
                    "--random-seed=3", "-h", "127.0.0.1", "-p", "5439", "-U", "bench", "icegres"]


def test_merge_model_matches_a_table_changed_row_by_row():
    from bench.suites.merge import CHANGED, Model, source_rows

    rows = 2_000
    ids = list(range(1, rows + 1))
    fares = [round((i * 37 % 1000) / 10, 2) for i in ids]
    model = Model(ids, fares, rows)
    table = dict(zip(ids, fares, strict=True))
    for iteration in range(3):  # later iterations update ids earlier ones updated, and add new ones
        src = source_rows(iteration, rows)
        assert len(src) == CHANGED and len({i for i, _, _ in src}) == CHANGED
        got = model.apply(src)
        table.update({i: fare for i, _, fare in src})
        cents = {i: round(f * 100) for i, f in table.items()}
        assert got == (len(table), sum(table), sum(i * c for i, c in cents.items()))
    model.reset()
    assert model.totals == (rows, sum(ids), sum(i * round(f * 100) for i, f in zip(ids, fares, strict=True)))
