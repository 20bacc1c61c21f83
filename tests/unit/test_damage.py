"""How a failed read of a table's file is named (engine/damage.py), and how /health and /metrics
report damaged tables (protocol/http.py), driven as plain values."""

from __future__ import annotations

import pytest

from icegres.engine import damage
from icegres.engine.damage import DamageRegistry
from icegres.protocol.http import damage_metrics, health_report, with_damage

pytestmark = pytest.mark.unit

PATH = "file:///lake/s/t/data/f.parquet"


@pytest.mark.parametrize(("exc", "sqlstate"), [
    (FileNotFoundError(2, "Failed to open local file"), "58P01"),
    (OSError("When reading information for key 'x': AWS Error NoSuchKey"), "58P01"),
    (OSError("Couldn't deserialize thrift: No more data to read."), "XX001"),
    (OSError("Parquet magic bytes not found in footer"), "XX001"),
    (ValueError("1 validation error for TableMetadataWrapper: Invalid JSON"), "XX001"),
    (SystemError("Negative size passed to PyBytes_FromStringAndSize"), "XX001"),
    (OSError("AWS Error NETWORK_CONNECTION during GetObject: connection refused"), "58030"),
])
def test_a_failed_read_is_named_by_what_failed(exc: BaseException, sqlstate: str) -> None:
    err = damage.classify("s.t", PATH, exc)
    assert err.sqlstate == sqlstate
    assert f'"{PATH}"' in err.message and "relation s.t" in err.message


def test_a_long_reason_is_cut() -> None:
    err = damage.classify("s.t", PATH, ValueError("x" * 10_000))
    assert len(err.message) < 500


def test_the_registry_keeps_when_a_table_was_first_seen_damaged() -> None:
    reg = DamageRegistry()
    reg.record(("s", "t"), "m1", damage.missing_file("s.t", PATH))
    first = reg.get(("s", "t"))
    reg.record(("s", "t"), "m1", damage.corrupt_file("s.t", PATH, "garbage"))
    assert reg.get(("s", "t")).since_s == first.since_s and reg.get(("s", "t")).sqlstate == "XX001"
    assert [r["table"] for r in reg.reports()] == ["s.t"] and len(reg) == 1
    assert reg.clear(("s", "t")) and not reg.clear(("s", "t")) and len(reg) == 0


def test_health_stays_200_degraded_with_damaged_tables_and_metrics_count_them() -> None:
    reg = DamageRegistry()
    ok = health_report(None, ready=True)
    assert with_damage(ok, reg.reports()) == ok
    reg.record(("s", "t"), "m1", damage.missing_file("s.t", PATH))
    report = with_damage(ok, reg.reports())
    assert report.status_code == 200 and report.body["status"] == "degraded"
    assert report.body["damaged_tables"][0]["sqlstate"] == "58P01"
    assert "icegres_tables_damaged 1\n" in damage_metrics(len(reg))
