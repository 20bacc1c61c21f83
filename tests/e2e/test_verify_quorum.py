"""`icegres verify`'s quorum claims on an embedded scratch lake with three local keepers: `fencing`
(on the quorum and on the Postgres tail) and `quorum-failover` PASS on a sound build and FAIL when
their guarantee is broken on purpose (ICEGRES_FAULTS=lake-fencing=break, quorum-majority=break);
the preflight refuses keepers whose log holds a live writer's term; a claim without the tail it
needs SKIPs, naming what to configure.

Each claim runs one round (`rounds=1`): the claims' own loops are what an operator scales with
--rounds; one is enough to prove a claim can pass and can fail."""

from __future__ import annotations

import io
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from icegres.config import Settings
from icegres.engine.catalog import Lakehouse
from icegres.verify.claims import fencing, quorum_failover
from icegres.verify.deployment import Deployment
from icegres.verify.lab import Lab, Progress
from icegres.verify.nodes import Nodes, child_base_env
from icegres.verify.outcome import Outcome, Verdict
from icegres.verify.quorum_probe import quorum_problems, start_local_keepers
from icegres.verify.scratch import claim_namespace

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

NAMESPACE = "icegres_verify"


@contextmanager
def lab_for(tmp_path: Path, claim: str, *, faults: str | None = None, keepers: bool = True,
            settings: dict[str, object] | None = None) -> Iterator[Lab]:
    """A Lab on a new embedded lake (three local keepers unless `keepers` is False); every process
    it started is killed on exit."""
    lake = tmp_path / "lake"
    Lakehouse.embedded(lake)
    claim_namespace(Lakehouse.embedded(lake).catalog, NAMESPACE)
    env = {k: v for k, v in os.environ.items() if k != "ICEGRES_FAULTS"}
    if faults:
        env["ICEGRES_FAULTS"] = faults
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    nodes = Nodes(run_dir, child_base_env(env))
    try:
        deployment = Deployment(Settings(data_dir=lake, write_buffer_ms=50, **settings or {}), "test")
        yield Lab(deployment, NAMESPACE, nodes, rounds=1, rng=random.Random(1), progress=Progress(out=io.StringIO()),
                  claim=claim, local_keepers=start_local_keepers(nodes) if keepers else None)
    finally:
        nodes.close()


def assert_fenced(outcome: Outcome) -> None:
    assert outcome.verdict is Verdict.PASS, outcome
    figures = outcome.figures
    assert figures["refused after takeover"] > 0 and figures["acked after takeover"] == 0
    assert figures["stale rows in lake"] == figures["stale commits"] == figures["rows twice"] == 0
    assert figures["acked lost"] == 0
    assert figures["replayed by B"] > 0, "the paused writer held no unflushed rows: the lake fence went untested"


def test_fencing_passes_a_paused_writer_is_refused_and_publishes_nothing(tmp_path: Path) -> None:
    with lab_for(tmp_path, "fencing") as lab:
        outcome = fencing.run(lab)
    assert_fenced(outcome)


def test_fencing_fails_when_a_quorum_writer_skips_the_lake_fence(tmp_path: Path) -> None:
    with lab_for(tmp_path, "fencing", faults="lake-fencing=break") as lab:
        outcome = fencing.run(lab)
    assert outcome.verdict is Verdict.FAIL, outcome
    assert outcome.figures["rows twice"] > 0 and outcome.figures["stale commits"] > 0
    assert "twice" in outcome.detail


def test_quorum_failover_passes_a_keeper_killed_and_one_wiped_lose_nothing(tmp_path: Path) -> None:
    with lab_for(tmp_path, "quorum-failover") as lab:
        outcome = quorum_failover.run(lab)
    assert outcome.verdict is Verdict.PASS, outcome
    figures = outcome.figures
    assert figures["keeper kills"] == figures["disks lost"] == 1
    assert figures["acked"] > 0 and figures["acked lost"] == figures["rows twice"] == 0
    assert figures["acked without majority"] == 0
    assert isinstance(figures["failover ms"], int) and isinstance(figures["rejoin ms"], int)


def test_quorum_failover_fails_when_one_keeper_counts_as_a_majority(tmp_path: Path) -> None:
    with lab_for(tmp_path, "quorum-failover", faults="quorum-majority=break") as lab:
        outcome = quorum_failover.run(lab)
    assert outcome.verdict is Verdict.FAIL, outcome
    assert outcome.figures["acked without majority"] == 1 and outcome.figures["acked lost"] >= 1
    assert "without a majority" in outcome.detail


def test_quorum_failover_on_configured_keepers_kills_only_the_writer(tmp_path: Path) -> None:
    """Keepers the run did not start (here: started beside it, handed over as --tail-quorum) are
    never killed; the claim proves the writer's failover on them and says what it left out."""
    run_dir = tmp_path / "keepers"
    run_dir.mkdir()
    theirs = Nodes(run_dir, child_base_env(os.environ))
    try:
        addresses = start_local_keepers(theirs)
        with lab_for(tmp_path, "quorum-failover", keepers=False, settings={"tail_quorum": addresses}) as lab:
            outcome = quorum_failover.run(lab)
        assert all(keeper.running() for keeper in theirs.by_name.values())
    finally:
        theirs.close()
    assert outcome.verdict is Verdict.PASS, outcome
    assert outcome.figures["keeper kills"] == "not run (configured keepers)"
    assert outcome.figures["acked lost"] == 0 and "--local-keepers" in outcome.detail


def test_keepers_holding_a_live_writers_term_are_refused(tmp_path: Path) -> None:
    with lab_for(tmp_path, "probe") as lab:
        assert lab.local_keepers is not None
        assert quorum_problems(lab.local_keepers) == []  # fresh keepers: a scratch quorum
        plan = next(p for p in lab.tails() if p.kind == "quorum")
        lab.server("live", tail=plan)
        problems = quorum_problems(lab.local_keepers)
        down = lab.nodes.by_name["keeper-3"]
        down.kill()
        with_one_down = quorum_problems(lab.local_keepers)
    assert len(problems) == 3, problems
    assert all("in use" in line and "verify must never steal a production writer's term" in line
               and "--local-keepers" in line for line in problems), problems
    assert any(f"keeper {down.address} cannot be reached" in line for line in with_one_down), with_one_down


def test_claims_skip_without_a_shared_tail_naming_what_to_configure(tmp_path: Path) -> None:
    with lab_for(tmp_path, "fencing", keepers=False) as lab:
        none = fencing.run(lab), quorum_failover.run(lab)
    for outcome in none:
        assert outcome.verdict is Verdict.SKIP and "--local-keepers" in outcome.detail, outcome
    (tmp_path / "dir").mkdir()
    with lab_for(tmp_path / "dir", "fencing", keepers=False, settings={"tail_dir": str(tmp_path / "wal")}) as lab:
        on_a_dir = fencing.run(lab)
    assert on_a_dir.verdict is Verdict.SKIP and "--tail-dir" in on_a_dir.detail, on_a_dir


def test_fencing_passes_on_the_postgres_tail(tmp_path: Path) -> None:
    """The Postgres tail fences a deposed writer's appends with its epoch in the owner row, and its
    flushes at the lake: each asserts the epoch (`icegres.pg-tail-epoch`), and a paused writer
    resumed after its replacement replayed its acknowledged rows publishes nothing."""
    from tests.support.postgres import running_postgres

    with running_postgres() as pg:
        url = f"postgresql://{pg.user}@{pg.host}:{pg.port}/{pg.dbname}"
        with lab_for(tmp_path, "fencing", keepers=False, settings={"tail_url": url}) as lab:
            outcome = fencing.run(lab)
    assert_fenced(outcome)


def test_fencing_fails_when_a_postgres_tail_writer_skips_the_lake_fence(tmp_path: Path) -> None:
    from tests.support.postgres import running_postgres

    with running_postgres() as pg:
        url = f"postgresql://{pg.user}@{pg.host}:{pg.port}/{pg.dbname}"
        with lab_for(tmp_path, "fencing", faults="lake-fencing=break", keepers=False,
                     settings={"tail_url": url}) as lab:
            outcome = fencing.run(lab)
    assert outcome.verdict is Verdict.FAIL, outcome
    assert outcome.figures["rows twice"] > 0 and "twice" in outcome.detail
