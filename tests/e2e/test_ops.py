"""The operations endpoint (`--ops-port`) of a real `icegres serve`: /health, /ready, /metrics on
an embedded lake, then on a quorum tail (two keepers killed -> 503 after a write attempt, back to
200 once one returns and a write succeeds; a writer fenced by its replacement -> 503)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.keepers import start_keepers
from tests.support.ladder import make_table, serve
from tests.support.ops import get, health

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

def test_health_ready_and_metrics_on_an_embedded_lake(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with serve(data_dir, "--write-buffer-ms", "100", "--ops-port", "0") as srv:
        ops = srv.ops_port
        assert get(ops, "/ready")[0] == 200
        status, body = health(ops)
        assert status == 200 and body["status"] == "ok" and body["tail"] == "memory", body
        ns = make_table(srv, prefix="o")
        with srv.connect() as conn:
            conn.execute(f"insert into {ns}.t values (1, 0, 'x')")
        status, text = get(ops, "/metrics")
        assert status == 200
        assert "icegres_ready 1" in text and "icegres_healthy 1" in text
        assert "icegres_ladder_buffered_rows" in text and "icegres_ladder_flushed_rows_total" in text
        assert get(ops, "/nope")[0] == 404
        assert srv.stop(signal.SIGTERM) == 0


def test_quorum_writer_health_follows_its_majority_and_its_term(tmp_path: Path) -> None:
    keepers = start_keepers(tmp_path)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    quorum = ",".join(k.address for k in keepers)
    try:
        with serve(data_dir, "--write-buffer-ms", "200", "--tail-quorum", quorum, "--ops-port", "0") as srv:
            ops = srv.ops_port
            status, body = health(ops)
            assert status == 200 and body["tail"] == "quorum" and body["writer_term"], body
            ns = make_table(srv, prefix="o")
            with srv.connect() as conn:
                conn.execute(f"insert into {ns}.t values (1, 0, 'x')")
            metrics = get(ops, "/metrics")[1]
            assert 'icegres_ladder_info{tail="quorum",writer_term="' in metrics
            assert "icegres_ladder_writer_term_round" in metrics

            # Two keepers down: the next write finds no majority, and /health says so.
            keepers[0].stop()
            keepers[1].stop()
            with srv.connect() as conn, pytest.raises(Exception, match="majority"):
                conn.execute(f"insert into {ns}.t values (2, 0, 'x')")
            status, body = health(ops)
            assert status == 503 and any("no majority" in r for r in body["reasons"]), body
            assert "icegres_healthy 0" in get(ops, "/metrics")[1]

            # One returns: a write succeeds and /health is 200 again.
            keepers[1].start()
            with srv.connect() as conn:
                conn.execute(f"insert into {ns}.t values (3, 0, 'x')")
            assert health(ops)[0] == 200
            keepers[0].start()

            # A replacement writer wins a higher term: this one is fenced at its next write.
            with serve(data_dir, "--write-buffer-ms", "200", "--tail-quorum", quorum) as new:
                with srv.connect() as conn, pytest.raises(Exception, match="fenced|durable"):
                    conn.execute(f"insert into {ns}.t values (4, 0, 'x')")
                status, body = health(ops)
                assert status == 503 and any("fenced" in r for r in body["reasons"]), body
                assert new.stop(signal.SIGTERM) == 0
    finally:
        for keeper in keepers:
            keeper.stop()
