"""The pure parts of `icegres verify`: which claims --only selects, the exit status, the table and
the JSON document, the progress lines."""

from __future__ import annotations

import io
import json

import pytest

from icegres.verify import report
from icegres.verify.claims import CLAIMS
from icegres.verify.lab import Progress
from icegres.verify.outcome import Claim, Outcome, Result, Verdict
from icegres.verify.run import _exit_status, select

pytestmark = pytest.mark.unit


def _claim(name: str) -> Claim:
    return Claim(name, f"the {name} claim", f"docs/x.md#{name}", lambda lab: Outcome.passed({}))


def test_only_selects_by_name_in_the_order_given_and_reports_unknown_names() -> None:
    names = [c.name for c in CLAIMS]
    assert [c.name for c in select(None)[0]] == names
    chosen, unknown = select(f" {names[-1]} ,nope,{names[0]}")
    assert [c.name for c in chosen] == [names[-1], names[0]] and unknown == ["nope"]


def test_every_claim_names_the_docs_section_that_makes_it() -> None:
    assert len({c.name for c in CLAIMS}) == len(CLAIMS)
    for claim in CLAIMS:
        assert claim.docs.startswith("docs/") and "#" in claim.docs, claim


def test_exit_status_skips_count_only_when_asked_for_by_name() -> None:
    passed = Result(_claim("a"), Outcome.passed({"n": 1}), 1.0)
    skipped = Result(_claim("b"), Outcome.skipped("give --tail-dir"), 0.0)
    failed = Result(_claim("c"), Outcome.failed("lost 1"), 2.0)
    assert _exit_status([passed, skipped], explicit=False) == 0
    assert _exit_status([passed, skipped], explicit=True) == 1
    assert _exit_status([passed, failed, skipped], explicit=False) == 1


def test_the_table_has_a_row_per_claim_and_the_counts() -> None:
    results = [Result(_claim("commit-crash"), Outcome.passed({"kills": 6, "commit_ms": 82.94}), 30.0),
               Result(_claim("fencing"), Outcome.skipped("no write tail configured: give --tail-url"), 0.0),
               Result(_claim("bank"), Outcome.failed("an update was lost", {"transfers": 3}), 5.0)]
    lines = report.table(results).splitlines()
    assert lines[0].split() == ["claim", "result", "figures", "docs"]
    assert lines[2].split()[:3] == ["commit-crash", "PASS", "kills=6,"] and "commit_ms=82.9" in lines[2]
    assert "SKIP" in lines[3] and "give --tail-url" in lines[3] and lines[3].endswith("docs/x.md#fencing")
    assert lines[-1] == "1 passed, 1 failed, 1 skipped"
    assert report.line(results[2]) == "FAIL bank (5.0 s): transfers=3\n    an update was lost"


def test_the_json_document_carries_every_field_of_every_claim() -> None:
    results = [Result(_claim("bank"), Outcome(Verdict.PASS, {"transfers": 96}, ""), 12.3456)]
    document = json.loads(report.as_json(results, deployment={"catalog": "x"}, exit_status=0))
    assert document == {"deployment": {"catalog": "x"}, "exit_status": 0, "claims": [{
        "claim": "bank", "title": "the bank claim", "result": "PASS", "seconds": 12.346,
        "figures": {"transfers": 96}, "detail": "", "docs": "docs/x.md#bank"}]}


def test_progress_off_a_terminal_is_a_line_per_tenth() -> None:
    out = io.StringIO()
    progress = Progress(out=out)
    progress.start("bank: transfers", 20)
    for _ in range(20):
        progress.advance()
    lines = out.getvalue().splitlines()
    assert lines[0] == "  bank: transfers: 0/20" and lines[-1] == "  bank: transfers: 20/20" and len(lines) == 11
