"""pgjdbc 42.7.13: a Java program (tests/e2e/java/IcegresJdbcCheck.java) compiled and run against the
server. It prints key=value lines; this module asserts on them.

What it exercises (see CLIENTS.md): extended protocol for everything, PreparedStatements executed
past prepareThreshold (named S_1, then Bind/Execute/Sync only with per-column result formats),
binary decoding of int8/int4/float8/timestamptz/bool, DatabaseMetaData catalog queries, SQLSTATEs.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pyarrow.compute as pc
import pytest

from tests.e2e.expected import city_counts, trip, trips

pytestmark = pytest.mark.e2e

JAR_CANDIDATES = (
    Path.home() / ".m2/repository/org/postgresql/postgresql/42.7.13/postgresql-42.7.13.jar",
    Path("/usr/share/java/postgresql.jar"),
)
SOURCE = Path(__file__).parent / "java" / "IcegresJdbcCheck.java"
LOOKUP_ID = 4242
CUTOFF_ID = 500  # timestamp-parameter test: count trips 1..1000 picked up no later than trip 500
COMPILE_TIMEOUT_S = 120
RUN_TIMEOUT_S = 180


def _jar() -> Path:
    for jar in JAR_CANDIDATES:
        if jar.exists():
            return jar
    raise FileNotFoundError(f"no pgjdbc jar at any of {[str(j) for j in JAR_CANDIDATES]}; run infra/system-deps.sh")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[Path, Path]:
    assert shutil.which("javac") and shutil.which("java"), "JDK missing; run infra/system-deps.sh"
    jar = _jar()
    out_dir = tmp_path_factory.mktemp("jdbc_classes")
    subprocess.run(["javac", "-cp", str(jar), "-d", str(out_dir), str(SOURCE)], check=True,
                   timeout=COMPILE_TIMEOUT_S, capture_output=True)
    return jar, out_dir


def run_check(server, compiled, url_options: str, jvm_zone: str = "UTC") -> dict[str, str]:
    jar, classes = compiled
    url = f"jdbc:postgresql://{server.host}:{server.port}/{server.database}?{url_options}"
    proc = subprocess.run(
        ["java", f"-Duser.timezone={jvm_zone}", "-cp", f"{jar}:{classes}", "IcegresJdbcCheck", url, server.user,
         str(LOOKUP_ID), str(epoch_us(trip(CUTOFF_ID)["pickup_ts"]))],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"java failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n{server.log_tail()}"
    facts = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    assert facts.get("done") == "true"
    return facts


def epoch_us(ts) -> int:
    return int(ts.timestamp()) * 1_000_000 + ts.microsecond


def expected_cutoff_count() -> int:
    t = trips().slice(0, 1000)
    assert t["id"][999].as_py() == 1000
    return pc.sum(pc.less_equal(t["pickup_ts"], trip(CUTOFF_ID)["pickup_ts"])).as_py()


def double_bits(x: float) -> str:
    return str(struct.unpack("<q", struct.pack("<d", x))[0])


def assert_lookups(facts: dict[str, str]) -> None:
    for i in range(10):
        e = trip(LOOKUP_ID + i)
        p = f"exec{i}."
        assert facts[p + "rows"] == "1", i
        assert facts[p + "id"] == str(LOOKUP_ID + i), i
        assert facts[p + "city"] == e["city"], i
        assert facts[p + "fare"] == double_bits(e["fare"]), i
        assert facts[p + "distance"] == double_bits(e["distance"]), i
        us = epoch_us(e["pickup_ts"])
        assert facts[p + "pickup_epoch_us"] == str(us), i
        assert facts[p + "pickup_ts_millis"] == str(us // 1000), i
        assert facts[p + "passengers"] == str(e["passengers"]), i
        assert facts[p + "vendor"] == e["vendor"], i
        assert facts[p + "paid"] == str(e["paid"]).lower(), i
        assert facts[p + "obj_types"] == (
            "java.lang.Long,java.lang.String,java.lang.Double,java.sql.Timestamp,java.lang.Integer,java.lang.Boolean"), i
    assert facts["rsmd.names"] == "id,city,fare,distance,pickup_ts,passengers,vendor,paid"
    assert facts["rsmd.types"] == "int8,text,float8,float8,timestamptz,int4,text,bool"


def assert_rest(facts: dict[str, str]) -> None:
    assert facts["product"] == "PostgreSQL"
    assert facts["product_major"] == "15"
    assert [facts[f"count{i}"] for i in range(1, 9)] == [str(i * 1000) for i in range(1, 9)]
    assert [facts[f"mixed{i}"] for i in range(7)] == ["42|abx|2.5|true"] * 7
    expected = ";".join(f"{c}:{n}" for c, n in sorted(city_counts().items()))
    assert facts["groupby"] == expected
    assert facts["missing.sqlstate"] == "42P01"
    n = expected_cutoff_count()
    assert 1 <= n < 1000
    assert [facts[f"ts_odt{i}"] for i in range(7)] == [str(n)] * 7
    assert [facts[f"ts_sql{i}"] for i in range(7)] == [str(n)] * 7


def assert_metadata(facts: dict[str, str]) -> None:
    assert "demo" in facts["schemas"].split(",")
    assert "public" in facts["schemas"].split(",")
    assert facts["tables"] == "demo.cities:TABLE,demo.trips:TABLE"
    # name:java.sql.Types:type name:nullable(0 no nulls, 1 nullable):ordinal
    assert facts["columns"].split(",") == [
        "id:-5:int8:0:1", "city:12:text:1:2", "fare:8:float8:1:3", "distance:8:float8:1:4",
        "pickup_ts:93:timestamptz:1:5", "passengers:4:int4:1:6", "vendor:12:text:1:7", "paid:-7:bool:1:8",
    ]
    assert facts["pk"] == ""  # the seed declares no Iceberg identifier fields


def test_default_prepare_threshold(server, compiled):
    facts = run_check(server, compiled, "prepareThreshold=5")
    assert_lookups(facts)
    assert_rest(facts)
    assert_metadata(facts)


def test_binary_transfer_forced(server, compiled):
    # prepareThreshold=-1: named statements and binary results from the very first execution.
    facts = run_check(server, compiled, "prepareThreshold=-1&binaryTransfer=true")
    assert_lookups(facts)
    assert_rest(facts)


def test_text_transfer_and_jvm_timezone(server, compiled):
    # JVM zone sent as the TimeZone startup parameter; instants must not move.
    facts = run_check(server, compiled, "binaryTransfer=false", jvm_zone="America/New_York")
    assert_lookups(facts)
    assert_rest(facts)
