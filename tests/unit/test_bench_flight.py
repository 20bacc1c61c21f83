"""The flight bench suite's pure parts: combined load meters, the ceiling's checksum."""

from __future__ import annotations

import pyarrow as pa
import pytest

from bench.peers.flight import checksum
from bench.suites.flight import _combined_load

pytestmark = pytest.mark.unit


def test_load_meters_of_the_parts_combine():
    parts = [
        {"wall_s": 10.0, "others_cpu_s": 4.0, "loadavg_start": (1.0, 1, 1), "loadavg_end": (2.0, 1, 1)},
        {"wall_s": 30.0, "others_cpu_s": 20.0, "loadavg_start": (2.5, 1, 1), "loadavg_end": (3.0, 1, 1)},
    ]
    load = _combined_load(parts)
    assert load["wall_s"] == 40.0 and load["others_cpu_s"] == 24.0
    assert load["loadavg_start"] == (1.0, 1, 1) and load["loadavg_end"] == (3.0, 1, 1)
    assert 0 < load["others_share_of_machine"] <= 24.0 / 40.0


def test_checksum_compares_bulk_reads_by_count_and_id_sum():
    table = pa.table({"id": [3, 1, 2], "x": ["a", "b", "c"]})
    assert checksum(table) == [(3, 6)]
    assert checksum(table.slice(0, 0)) == [(0, None)]
