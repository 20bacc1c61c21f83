"""A statement's record: its correlation id, its logfmt line, what it redacts, when it is logged,
the id in an ErrorResponse, and the duration histogram with OpenMetrics exemplars."""

from __future__ import annotations

import re
import struct

import pytest

from icegres.pg.errors import PgError
from icegres.protocol.http import metrics_text, openmetrics, wants_openmetrics
from icegres.protocol.pgwire import messages as m
from icegres.protocol.statement_metrics import StatementHistogram
from icegres.protocol.statement_record import TEXT_MAX, Policy, Record, line, new_id, redact

pytestmark = pytest.mark.unit

JWT = ("eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYS0xIn0.eyJzdWIiOiJjYXJvbCIsImF1ZCI6ImljZWdyZXMifQ."
       "c2lnbmF0dXJlLWJ5dGVzLW9mLXRoZS10b2tlbg")


def test_ids_are_16_hex_digits_and_differ() -> None:
    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        ("ALTER ROLE alice PASSWORD 'hunter2'", "hunter2"),
        ("alter user bob with encrypted password 'it''s-secret'", "s-secret"),
        ("create role c login password $pw$dollar-secret$pw$", "dollar-secret"),
        ("alter role d password E'escaped-secret", "escaped-secret"),  # cut before its end
        (f"select '{JWT}' as token", "c2lnbmF0dXJl"),
        (f"select '{JWT[:60]}", "eyJzdWIiOiJj"),  # a token cut at TEXT_MAX
        ("select 'SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy'", "c3RvcmVk"),
        ("select 'Authorization: Bearer abc.def-ghi'", "abc.def-ghi"),
    ],
)
def test_secrets_are_redacted(text: str, gone: str) -> None:
    shown = redact(text)
    assert gone not in shown and "***" in shown, shown


def test_ordinary_statements_are_left_alone() -> None:
    for text in ("select a.b.c from s.t where password_hash is null", "select 'eyJ'", "select password from users"):
        assert redact(text) == text


def test_the_line_is_logfmt_on_one_line_with_every_field() -> None:
    record = Record("pgwire", "select 1,\n  'a \"b\"'", pid=42, user="alice", database="icegres",
                    application="psql", client="127.0.0.1")
    record.completed("SELECT 3")
    text = line(record, 1.5)
    assert "\n" not in text
    assert text.startswith(f"id={record.id} ts=")
    for part in ("protocol=pgwire", "pid=42", "user=alice", "db=icegres", "app=psql", "client=127.0.0.1",
                 'tag="SELECT 3"', "rows=3", "duration_ms=1.500", 'statement="select 1,\\n  \'a \\"b\\"\'"'):
        assert part in text, (part, text)
    failed = Record("pgwire", "x" * (TEXT_MAX + 10))
    failed.failed("42P01", 'relation "nope" does not exist')
    text = line(failed, 0.1)
    assert 'severity=ERROR sqlstate=42P01 error="relation \\"nope\\" does not exist"' in text
    assert "x" * TEXT_MAX + "…" in text and "x" * (TEXT_MAX + 1) not in text


@pytest.mark.parametrize(
    ("log_statement", "cls", "logged"),
    [("none", "all", False), ("ddl", "ddl", True), ("ddl", "mod", False), ("mod", "ddl", True),
     ("mod", "mod", True), ("mod", "all", False), ("all", "all", True)],
)
def test_log_statement_classes(log_statement: str, cls: str, logged: bool) -> None:
    assert Policy(log_statement).logs(cls, None) is logged


def test_log_min_error_statement_by_severity() -> None:
    assert Policy("none", "error").logs("all", "ERROR") and Policy("none", "error").logs("all", "FATAL")
    assert not Policy("none", "fatal").logs("all", "ERROR") and Policy("none", "fatal").logs("all", "FATAL")
    assert not Policy("all", "panic").logs("all", "ERROR")


def test_a_completed_tag_classifies_the_statement() -> None:
    for tag, cls in (("CREATE TABLE", "ddl"), ("DROP VIEW", "ddl"), ("INSERT 0 2", "mod"), ("DELETE 1", "mod"),
                     ("SELECT 5", "all"), ("SET", "all")):
        record = Record("pgwire")
        record.completed(tag)
        assert record.cls == cls


def test_error_response_carries_the_id_in_field_i_after_the_others() -> None:
    frame = m.error_response(PgError("42P01", "nope", position=3), "0123456789abcdef")
    assert frame[:1] == b"E" and struct.unpack("!i", frame[1:5])[0] == len(frame) - 1
    fields = [f for f in frame[5:].split(b"\0") if f]
    assert fields[-1] == b"i0123456789abcdef"
    assert [f[:1] for f in fields] == [b"S", b"V", b"C", b"M", b"P", b"i"]
    assert m.error_response(PgError("42P01", "nope")) == m.error_response(PgError("42P01", "nope"), None)


def test_histogram_exemplars_only_in_openmetrics_and_within_their_bucket() -> None:
    hist = StatementHistogram()
    hist.observe("pgwire", "ok", 0.0004, "aaaaaaaaaaaaaaaa")
    hist.observe("pgwire", "ok", 0.003, "bbbbbbbbbbbbbbbb")
    hist.observe("pgwire", "error", 120.0, "cccccccccccccccc")
    plain = hist.text(openmetrics=False)
    assert "# {" not in plain and "_created" not in plain
    assert 'icegres_statement_duration_seconds_bucket{protocol="pgwire",outcome="ok",le="0.001"} 1\n' in plain
    assert 'icegres_statement_duration_seconds_count{protocol="pgwire",outcome="ok"} 2\n' in plain
    om = hist.text(openmetrics=True)
    assert re.search(r'outcome="ok",le="0.001"\} 1 # \{correlation_id="a{16}"\} 0.0004 \d+\.\d{3}\n', om)
    assert re.search(r'outcome="ok",le="0.005"\} 2 # \{correlation_id="b{16}"\} 0.003 ', om)
    assert 'outcome="ok",le="0.0025"} 1\n' in om  # nothing landed in it: no exemplar
    assert re.search(r'outcome="error",le="\+Inf"\} 1 # \{correlation_id="c{16}"\} 120.0 ', om)


def test_openmetrics_names_counter_families_without_total() -> None:
    text = openmetrics(metrics_text({"tail": "wal", "flushed_batches": 3}, ready=True, healthy=True))
    assert "# TYPE icegres_ladder_flushed_batches counter\n" in text
    assert "icegres_ladder_flushed_batches_total 3\n" in text


@pytest.mark.parametrize(
    ("accept", "wanted"),
    [
        (b"application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
         b"text/plain;version=0.0.4;q=0.5,*/*;q=0.1", True),  # Prometheus 2.x
        (b"text/plain", False),
        (b"application/openmetrics-text; q=0", False),
        (None, False),
    ],
)
def test_openmetrics_when_the_scraper_asks(accept: bytes | None, wanted: bool) -> None:
    headers = [] if accept is None else [(b"accept", accept)]
    assert wants_openmetrics({"headers": headers}) is wanted
