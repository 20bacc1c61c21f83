"""The operations endpoint's pure parts: /health from ladder stats, /metrics text, scrubbing."""

from __future__ import annotations

import re

import pytest

from icegres.config import resolve
from icegres.protocol.http import health_report, metrics_text, scrub

pytestmark = pytest.mark.unit

QUORUM_OK = {"tail": "quorum", "tail_ok": True, "tail_failure": None, "writer_term": "1733220000/ab12",
             "buffered_rows": 3, "oldest_unflushed_age_ms": 12, "flush_latency_ms_last": 4.5,
             "flushed_batches": 7, "replayed_records": 2, "tail_id": "qabc", "tail_phase": "leading"}


def test_no_buffer_is_healthy() -> None:
    report = health_report(None, ready=True)
    assert report.status_code == 200 and report.body == {"status": "ok", "ready": True}


def test_a_leading_quorum_writer_is_healthy() -> None:
    report = health_report(QUORUM_OK, ready=False)
    assert report.ok and report.body["writer_term"] == "1733220000/ab12" and report.body["ready"] is False


@pytest.mark.parametrize(
    ("stats", "reason"),
    [
        ({**QUORUM_OK, "tail_ok": False, "tail_phase": "fenced", "tail_reason": "outbid by 9/zz"}, "lost its writer term"),
        ({**QUORUM_OK, "tail_failure": "slot 9 was not acknowledged by a majority"}, "no majority"),
        ({"tail": "wal", "tail_ok": False, "tail_phase": "poisoned", "tail_reason": "fsync failed"}, "wal tail poisoned"),
        ({"tail": "postgres", "tail_ok": False, "tail_phase": "poisoned", "tail_reason": None}, "postgres tail"),
    ],
)
def test_unhealthy_tails_answer_503_with_reasons(stats: dict, reason: str) -> None:
    report = health_report(stats, ready=True)
    assert report.status_code == 503
    assert report.body["status"] == "unhealthy"
    assert any(reason in r for r in report.body["reasons"]), report.body


def test_reasons_never_carry_secrets() -> None:
    settings = resolve({"tail_url": "postgresql://me:hunter22@db/x", "write_buffer_ms": 10,
                        "users": "alice:s3cret-pw"}, environ={})
    verifier = settings.users["alice"].format()  # the password itself is not kept (config.py)
    stored_key = verifier.rpartition("$")[2].split(":")[0]
    stats = {"tail": "postgres", "tail_ok": False, "tail_phase": "poisoned",
             "tail_reason": f"connection to postgresql://me:hunter22@db/x failed (hunter22) for {verifier} {stored_key}"}
    text = str(health_report(stats, ready=True, settings=settings).body)
    assert "hunter22" not in text and stored_key not in text and "***" in text
    assert scrub("a\nb   c", None) == "a b c"


def test_metrics_are_prometheus_text() -> None:
    text = metrics_text(QUORUM_OK, ready=True, healthy=True)
    assert "icegres_ready 1\n" in text and "icegres_healthy 1\n" in text
    assert 'icegres_ladder_info{tail="quorum",writer_term="1733220000/ab12"} 1' in text
    assert "icegres_ladder_buffered_rows 3\n" in text
    assert "icegres_ladder_flush_latency_ms_last 4.5\n" in text
    assert "# TYPE icegres_ladder_flushed_batches_total counter" in text
    assert "icegres_ladder_writer_term_round 1733220000\n" in text
    assert "qabc" not in text  # ids are not metrics
    sample = re.compile(r"^[a-z_]+(\{[^}]*\})? -?[0-9.e+]+$")
    for line in text.splitlines():
        assert line.startswith("# ") or sample.match(line), line


def test_metrics_without_a_buffer() -> None:
    assert metrics_text(None, ready=False, healthy=True) .endswith("icegres_healthy 1\n")
