"""`icegres verify`'s write-ladder claims, run as the command runs them: a Lab on a scratch
embedded lake, scratch `icegres serve` processes killed and restarted for real.

Each claim PASSes on the local WAL (--tail-dir) and on a real PostgreSQL tail (--tail-url), and
FAILs, naming the ids, when the guarantee it covers is broken on purpose (ICEGRES_FAULTS
`durable-ack=break`: the tail acknowledges before it writes; `replay-watermark=break`: replay
ignores what the lake already holds), so neither claim is a check that cannot fail.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from icegres.config import Settings
from icegres.engine.catalog import Lakehouse
from icegres.verify.claims import buffered_acks, replay_once
from icegres.verify.deployment import Deployment
from icegres.verify.lab import Lab, Progress
from icegres.verify.nodes import Nodes, child_base_env
from icegres.verify.outcome import Outcome, Verdict
from icegres.verify.scratch import claim_namespace
from tests.support.postgres import PostgresServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

NAMESPACE = "icegres_verify"


def run_claim(tmp_path: Path, run: Callable[[Lab], Outcome], claim: str, *, faults: str = "",
              tail_url: str | None = None, rounds: int = 2) -> Outcome:
    lake = tmp_path / "lake"
    lakehouse = Lakehouse.embedded(lake)
    claim_namespace(lakehouse.catalog, NAMESPACE)
    settings = Settings(data_dir=lake, write_buffer_ms=50,
                        **({"tail_url": tail_url} if tail_url else {"tail_dir": str(tmp_path / "wal")}))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    nodes = Nodes(run_dir, child_base_env({**os.environ, "ICEGRES_FAULTS": faults}))
    lab = Lab(Deployment(settings, "t1"), NAMESPACE, nodes, rounds=rounds, rng=random.Random(1),
              progress=Progress(), claim=claim)
    try:
        return run(lab)
    finally:
        nodes.close()


def tail_url(pg: PostgresServer) -> str:
    return f"postgresql://{pg.user}@{pg.host}:{pg.port}/{pg.dbname}"


def test_buffered_acks_is_skipped_without_a_tail(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    Lakehouse.embedded(lake)
    nodes = Nodes(tmp_path, child_base_env(os.environ))
    lab = Lab(Deployment(Settings(data_dir=lake), "t0"), NAMESPACE, nodes, rounds=1, rng=random.Random(1),
              progress=Progress(), claim="buffered-acks")
    outcome = buffered_acks.run(lab)
    assert outcome.verdict is Verdict.SKIP
    assert "--tail-dir" in outcome.detail and "--write-buffer-ms" in outcome.detail


def test_buffered_acks_pass_on_the_wal(tmp_path: Path) -> None:
    outcome = run_claim(tmp_path, buffered_acks.run, "buffered-acks")
    assert outcome.verdict is Verdict.PASS, outcome
    assert outcome.figures["acked"] > 0 and outcome.figures["lost"] == 0 and outcome.figures["duplicated"] == 0


def test_buffered_acks_pass_on_a_postgres_tail(tmp_path: Path, real_postgres: PostgresServer) -> None:
    outcome = run_claim(tmp_path, buffered_acks.run, "buffered-acks", tail_url=tail_url(real_postgres))
    assert outcome.verdict is Verdict.PASS, outcome
    assert outcome.figures["acked"] > 0 and "url tail" in outcome.figures


@pytest.mark.parametrize("tail", ["wal", "postgres"])
def test_buffered_acks_fail_when_the_tail_acks_before_it_writes(tmp_path: Path, tail: str,
                                                               request: pytest.FixtureRequest) -> None:
    url = tail_url(request.getfixturevalue("real_postgres")) if tail == "postgres" else None
    outcome = run_claim(tmp_path, buffered_acks.run, "buffered-acks", faults="durable-ack=break", rounds=1,
                        tail_url=url)
    assert outcome.verdict is Verdict.FAIL, outcome
    assert outcome.figures["lost"] > 0
    assert "acknowledged id(s) lost (ids " in outcome.detail, outcome.detail


def test_replay_once_passes_on_the_wal(tmp_path: Path) -> None:
    outcome = run_claim(tmp_path, replay_once.run, "replay-once")
    assert outcome.verdict is Verdict.PASS, outcome
    assert outcome.figures["acked"] > 0 and outcome.figures["crashed after a flush commit"] > 0


def test_replay_once_passes_on_a_postgres_tail(tmp_path: Path, real_postgres: PostgresServer) -> None:
    outcome = run_claim(tmp_path, replay_once.run, "replay-once", tail_url=tail_url(real_postgres), rounds=1)
    assert outcome.verdict is Verdict.PASS, outcome


def test_replay_once_fails_when_replay_ignores_the_lake_watermark(tmp_path: Path) -> None:
    outcome = run_claim(tmp_path, replay_once.run, "replay-once", faults="replay-watermark=break", rounds=1)
    assert outcome.verdict is Verdict.FAIL, outcome
    assert outcome.figures["duplicated"] > 0
    assert "id(s) duplicated (ids " in outcome.detail, outcome.detail
