"""`python -m tests.model.replay`: dispatch on the trace header, spec-hash refusal, exit statuses;
and the seeded-walk command beside it."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.model import replay, scaffold, walk
from tests.model.scaffold import WalkFailed, load_registry, model_of
from tests.model.trace import REPO_ROOT, read_trace, traces_for, write_trace

pytestmark = pytest.mark.unit

COMMIT_TRACE = REPO_ROOT / "tests/model/traces/commit/unknown-outcome-then-landed.ndjson"


def run(*argv: str | Path) -> tuple[int, str]:
    out = io.StringIO()
    status = replay.main([str(a) for a in argv], out=out)
    return status, out.getvalue()


def copy(tmp_path: Path, source: Path = COMMIT_TRACE, **header_changes) -> Path:
    header, inputs = read_trace(source)
    return write_trace(tmp_path / source.name, {**header, **header_changes}, inputs)


def test_every_registered_machine_replays_through_its_own_harness(tmp_path: Path) -> None:
    machines = load_registry()
    assert {"commit", "buffer", "wal", "pgtail", "quorum"} <= set(machines)
    for name in machines:
        path = shutil.copy(traces_for(name)[0], tmp_path / f"{name}.ndjson")
        status, out = run(path)
        assert status == replay.PASSED, out
        assert f"({name}, " in out


def test_the_header_not_the_directory_picks_the_harness(tmp_path: Path) -> None:
    wal = model_of("wal")
    # A commit trace's inputs labelled as a WAL trace go to the WAL harness, which rejects them.
    path = copy(tmp_path, machine="wal", spec_sha256=wal.spec.sha256)
    status, out = run(path)
    assert status == replay.FAILED and "input 1 " in out


def test_a_trace_of_another_spec_version_is_refused(tmp_path: Path) -> None:
    path = copy(tmp_path, spec_sha256="0" * 64)
    before = path.read_text()
    status, out = run(path)
    assert status == replay.REFUSED
    assert "specs/commit.toml" in out and "--accept-spec-change" in out
    assert path.read_text() == before


def test_accepting_the_spec_change_replays_and_restamps(tmp_path: Path) -> None:
    path = copy(tmp_path, spec_sha256="0" * 64)
    lines = path.read_text().splitlines()
    status, out = run("--accept-spec-change", path)
    assert status == replay.PASSED and "re-stamped" in out
    header, _ = read_trace(path)
    assert header["spec_sha256"] == model_of("commit").spec.sha256
    assert header["commit"] == json.loads(lines[0])["commit"]  # the rest of the header stays
    assert path.read_text().splitlines()[1:] == lines[1:]
    assert run(path)[0] == replay.PASSED


def test_a_failing_trace_exits_non_zero_and_names_the_input(tmp_path: Path) -> None:
    header, inputs = read_trace(COMMIT_TRACE)
    wrong = {"op": "expect", "session": 0, "phase": "aborted"}  # it committed
    path = write_trace(tmp_path / "bad.ndjson", {**header, "spec_sha256": "0" * 64}, inputs + [wrong])
    before = path.read_text()
    status, out = run("--accept-spec-change", path)
    assert status == replay.FAILED
    assert f"input {len(inputs) + 1} " in out and '"phase": "aborted"' in out
    assert path.read_text() == before  # a failing trace is never re-stamped


def test_unreadable_paths_and_unknown_machines(tmp_path: Path) -> None:
    unknown = copy(tmp_path, machine="no_such_machine")
    empty = tmp_path / "empty.ndjson"
    empty.write_text("")
    for path in (unknown, empty, tmp_path / "missing.ndjson"):
        status, out = run(path)
        assert status == replay.UNREADABLE, out
    assert "no_such_machine" in run(unknown)[1]


def test_the_lowest_non_zero_status_wins(tmp_path: Path) -> None:
    refused = copy(tmp_path, spec_sha256="0" * 64)
    header, inputs = read_trace(COMMIT_TRACE)
    failing = write_trace(
        tmp_path / "f.ndjson", header, inputs + [{"op": "expect", "session": 0, "phase": "idle"}]
    )
    status, out = run(refused, failing, COMMIT_TRACE)
    assert status == replay.FAILED and "1 of 3 traces passed" in out


def test_a_directory_leaves_out_the_traces_of_open_bugs(tmp_path: Path) -> None:
    good = copy(tmp_path)
    header, inputs = read_trace(good)
    bad = inputs + [{"op": "expect", "session": 0, "phase": "idle"}]
    write_trace(tmp_path / "_found" / "bad.ndjson", header, bad)
    status, out = run(tmp_path)
    assert status == replay.PASSED and "1 of 1 traces passed" in out
    assert run(tmp_path / "_found")[0] == replay.FAILED  # named, it is replayed


def test_the_command_runs_from_the_repository_root() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.model.replay", str(COMMIT_TRACE.relative_to(REPO_ROOT))],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 of 1 traces passed" in done.stdout


# --- seeded walks --------------------------------------------------------------------------------


def test_a_failing_walk_is_saved_as_a_trace_that_replays_its_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scaffold, "NEW_TRACES_DIR", tmp_path)
    model = model_of("commit")

    def drive_then_break(rng, harness, steps) -> None:
        model.drive(rng, harness, steps)
        harness.apply({"op": "expect", "session": 0, "phase": "no such phase"})

    broken = dataclasses.replace(model, drive=drive_then_break)
    with pytest.raises(WalkFailed) as failed:
        broken.walk(7, steps=20)
    assert failed.value.seed == 7 and failed.value.trace.parent == tmp_path
    assert f"python -m tests.model.replay {failed.value.trace}" in str(failed.value)
    header, inputs = read_trace(failed.value.trace)
    assert header["machine"] == "commit" and header["walk"] == {"seed": 7, "steps": 20}
    assert inputs[:-1] == model.walk(7, steps=20).inputs[:-1]  # the same walk, but for settle
    assert run(failed.value.trace)[0] == replay.FAILED


def test_the_walk_command(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    assert walk.main(["pgtail", "5:8"], out=out) == 0
    assert "3 walks of 150 steps (seeds 5:8)" in out.getvalue() and "0 failed" in out.getvalue()
    assert walk.main(["pgtail", "9", "--steps", "10"], out=io.StringIO()) == 0
    assert walk.main(["no_such_machine", "1"], out=io.StringIO()) == 2
    assert walk.main(["pgtail", "5:5"], out=io.StringIO()) == 2


def test_the_budget_scales_every_ci_size(monkeypatch: pytest.MonkeyPatch) -> None:
    model = model_of("wal")
    monkeypatch.delenv(scaffold.BUDGET_ENV, raising=False)
    assert len(model.walk_seeds()) == model.walks_ci
    assert model.hypothesis_settings().max_examples == model.examples_ci
    monkeypatch.setenv(scaffold.BUDGET_ENV, "30")
    monkeypatch.setenv(scaffold.SEED_START_ENV, "1000")
    assert model.walk_seeds() == range(1000, 1000 + 30 * model.walks_ci)
    assert model.hypothesis_settings().max_examples == 30 * model.examples_ci
    monkeypatch.setenv(scaffold.BUDGET_ENV, "0")
    with pytest.raises(ValueError):
        scaffold.budget()
