"""`icegres verify` as an operator runs it: on the embedded lake every local claim passes and the
rest skip with what to configure; the rest of the lake is untouched; bad configuration is one line
per problem and exit 2 before anything starts; a second run is refused; Ctrl-C stops everything;
and a claim whose guarantee is broken on purpose FAILs."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icegres.engine.catalog import Lakehouse
from tests.support.verify import (
    SCRATCH,
    embedded_fingerprint,
    run_verify,
    scratch_rows,
    verdicts,
    verify_env,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

LOCAL_CLAIMS = {"commit-crash", "freshness", "snapshot-isolation", "bank"}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("verify") / "lake"
    subprocess.run([sys.executable, "-m", "icegres", "seed", "--data-dir", str(data_dir), "--rows", "2000"],
                   check=True, timeout=300, capture_output=True, stdin=subprocess.DEVNULL, env=verify_env())
    return data_dir


def test_on_the_embedded_lake_local_claims_pass_the_rest_skip_and_nothing_else_changes(lake: Path) -> None:
    before = embedded_fingerprint(lake)
    proc = run_verify("--data-dir", str(lake), "--rounds", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = verdicts(proc)
    assert {name for name, c in results.items() if c["result"] == "PASS"} >= LOCAL_CLAIMS, results
    for name, claim in results.items():
        assert claim["result"] in ("PASS", "SKIP"), (name, claim)
        if claim["result"] == "SKIP":
            assert "--" in claim["detail"], claim  # says what to configure
        assert claim["docs"].startswith("docs/"), claim
    assert results["commit-crash"]["figures"]["kills"] == 2
    assert embedded_fingerprint(lake) == before
    assert scratch_rows(lake) == []  # dropped
    assert not (lake / "warehouse" / SCRATCH).exists()
    assert "claim" in proc.stderr and "passed" in proc.stderr  # the table, beside the JSON


def test_a_namespace_verify_did_not_create_is_refused_and_left_alone(lake: Path) -> None:
    catalog = Lakehouse.embedded(lake).catalog
    catalog.create_namespace("someone_elses")
    try:
        proc = run_verify("--data-dir", str(lake), "--scratch-namespace", "someone_elses")
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines() == [
            "icegres verify: namespace someone_elses exists and was not created by icegres verify: verify never "
            "writes into it (choose another with --scratch-namespace)"]
        assert proc.stdout == ""
        assert catalog.load_namespace_properties("someone_elses") is not None
    finally:
        catalog.drop_namespace("someone_elses")


def _refusing_port() -> socket.socket:
    """A port bound but not listening: connections to it are refused, and nobody else can take it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def test_bad_configuration_is_one_line_per_problem_and_exit_2(lake: Path, tmp_path: Path) -> None:
    with _refusing_port() as closed:
        port = closed.getsockname()[1]
        proc = run_verify("--data-dir", str(lake), "--rounds", "0", "--write-buffer-ms", "50",
                          "--tail-url", f"postgresql://icegres:s3cret-pw@127.0.0.1:{port}/tail")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 2, proc.stderr
        assert lines[0] == "icegres verify: --rounds must be at least 1, not 0"
        assert lines[1].startswith(f"icegres verify: --tail-url postgresql://icegres:***@127.0.0.1:{port}/tail: "
                                   "cannot connect")
        assert "s3cret-pw" not in proc.stderr + proc.stdout
        rest = run_verify("--catalog-uri", f"http://127.0.0.1:{port}", "--catalog-timeout-s", "2")
        assert rest.returncode == 2 and len(rest.stderr.strip().splitlines()) == 1, rest.stderr
        assert f"cannot open the rest catalog at http://127.0.0.1:{port}" in rest.stderr
    missing = run_verify("--data-dir", str(tmp_path / "nothing-here"))
    assert missing.returncode == 2 and "no embedded lake in" in missing.stderr
    assert not (tmp_path / "nothing-here").exists()
    unknown = run_verify("--data-dir", str(lake), "--only", "bank,durability-vibes")
    assert unknown.returncode == 2 and "no claim named durability-vibes (claims: " in unknown.stderr
    assert scratch_rows(lake) == []


def test_a_second_run_is_refused_and_ctrl_c_stops_every_scratch_process(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "first.out"
    with open(out, "w") as sink:
        first = subprocess.Popen([sys.executable, "-m", "icegres", "verify", "--data-dir", str(lake), "--only", "bank",
                                  "--rounds", "20"], stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=verify_env())
    try:
        deadline = time.monotonic() + 120
        while "transfers:" not in out.read_text():  # the claim's workers are running
            assert first.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.1)
        run_dir = Path(re.search(r"logs in (\S+)", out.read_text()).group(1))
        second = run_verify("--data-dir", str(lake), "--only", "freshness")
        assert second.returncode == 2
        assert f"another icegres verify (pid {first.pid}) is running in namespace {SCRATCH}" in second.stderr
        children = [int(p.read_text().split('"pid": ')[1].split(",")[0]) for p in run_dir.glob("*.ports.json")]
        assert len(children) == 2, children
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=120) == 130, out.read_text()
        assert "interrupted" in out.read_text()
        for pid in children:
            assert not Path(f"/proc/{pid}").exists() or "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
        assert scratch_rows(lake) == []
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)


def test_keep_leaves_the_namespace_and_the_next_run_takes_it_back(lake: Path) -> None:
    kept = run_verify("--data-dir", str(lake), "--only", "freshness", "--rounds", "1", "--keep")
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert scratch_rows(lake) != [] and "kept" in kept.stdout
    logs = Path(re.search(r"logs kept in (\S+?),", kept.stdout).group(1))
    assert any(logs.glob("*.log"))
    again = run_verify("--data-dir", str(lake), "--only", "freshness", "--rounds", "1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert scratch_rows(lake) == []


@pytest.mark.parametrize(("claim", "guarantee", "rounds", "says"), [
    ("commit-crash", "atomic-publish", "4", "landed in one table only"),
    ("freshness", "exact-freshness", "1", "were not visible on server B at once"),
    ("bank", "first-committer-wins", "1", "an update was lost"),
])
def test_a_claim_fails_when_its_guarantee_is_broken(lake: Path, claim: str, guarantee: str, rounds: str,
                                                    says: str) -> None:
    proc = run_verify("--data-dir", str(lake), "--only", claim, "--rounds", rounds, "--json",
                      env={"ICEGRES_FAULTS": f"{guarantee}=break"})
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = verdicts(proc)[claim]
    assert result["result"] == "FAIL" and says in result["detail"], result
    assert scratch_rows(lake) == []



def test_with_a_tail_dir_the_ladder_claims_pass_and_leave_nothing_beside_it(lake: Path, tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    proc = run_verify("--data-dir", str(lake), "--write-buffer-ms", "50", "--tail-dir", str(wal), "--rounds", "1",
                      "--only", "buffered-acks,replay-once", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = verdicts(proc)
    assert {c["result"] for c in results.values()} == {"PASS"}, results
    assert results["buffered-acks"]["figures"]["lost"] == 0 and results["buffered-acks"]["figures"]["acked"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the scratch logs beside wal/ are gone; wal/ never made
