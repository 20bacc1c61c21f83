"""Machine specs (specs/*.toml) and input traces (NDJSON) shared by the model tests.

A trace is the exact list of inputs a model run fed through its harness: a header line
{"machine", "spec_sha256", "commit", ...} and then one JSON object per input. Replaying the inputs
through the same harness entry point reproduces the run.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SPECS_DIR = REPO_ROOT / "specs"
TRACES_DIR = Path(__file__).resolve().parent / "traces"
NEW_TRACES_DIR = TRACES_DIR / "_new"


class SpecViolation(AssertionError):
    """A step the machine's spec does not allow."""


@dataclass(frozen=True)
class Transition:
    source: str
    event: str
    target: str
    effects: tuple[str, ...]


@dataclass(frozen=True)
class Invariant:
    name: str
    scope: str  # "step" or "run"
    description: str


@dataclass(frozen=True)
class Spec:
    machine: str
    module: str
    initial: str
    states: frozenset[str]
    terminal: frozenset[str]
    events: frozenset[str]
    effects: frozenset[str]
    transitions: tuple[Transition, ...]
    never_emit: dict[str, frozenset[str]]
    invariants: dict[str, Invariant]
    sha256: str

    def check_step(
        self, source: str, event: str, target: str, effects: Iterable[str]
    ) -> Transition:
        """The spec transition this step took; SpecViolation if there is none."""
        emitted = tuple(effects)
        forbidden = self.never_emit.get(target, frozenset()) & set(emitted)
        if forbidden:
            raise SpecViolation(
                f"{source} --{event}--> {target} emitted forbidden {sorted(forbidden)}"
            )
        for t in self.transitions:
            if (t.source, t.event, t.target, t.effects) == (source, event, target, emitted):
                return t
        raise SpecViolation(
            f"{source} --{event}--> {target} emitting {list(emitted)} is not in the spec"
        )


def load_spec(machine: str) -> Spec:
    """specs/<machine>.toml; its sha256 is the file's, which traces are stamped with."""
    raw = (SPECS_DIR / f"{machine}.toml").read_bytes()
    data = tomllib.loads(raw.decode())
    invariants = {
        i["name"]: Invariant(i["name"], i["scope"], i["description"]) for i in data["invariant"]
    }
    return _spec(data, data["machine"], data["module"], invariants, hashlib.sha256(raw).hexdigest())


def load_spec_section(top: Spec, section: str) -> Spec:
    """A section of the top spec's file ([lane], [acceptor], ...) as a Spec of its own, named
    `<machine>.<section>`, with the file's hash; its invariants are the top spec's to state."""
    data = tomllib.loads((SPECS_DIR / f"{top.machine}.toml").read_text())[section]
    return _spec(data, f"{top.machine}.{section}", top.module, {}, top.sha256)


def _spec(
    data: dict[str, Any], machine: str, module: str, invariants: dict[str, Invariant], sha256: str
) -> Spec:
    spec = Spec(
        machine=machine,
        module=module,
        initial=data["initial"],
        states=frozenset(data["states"]),
        terminal=frozenset(data["terminal"]),
        events=frozenset(data["events"]),
        effects=frozenset(data["effects"]),
        transitions=tuple(
            Transition(t["from"], t["event"], t["to"], tuple(t["effects"]))
            for t in data["transition"]
        ),
        never_emit={k: frozenset(v) for k, v in data.get("never_emit", {}).items()},
        invariants=invariants,
        sha256=sha256,
    )
    _check_well_formed(spec)
    return spec


def _check_well_formed(spec: Spec) -> None:
    assert spec.initial in spec.states
    assert spec.terminal <= spec.states
    assert set(spec.never_emit) <= spec.states
    for effects in spec.never_emit.values():
        assert effects <= spec.effects, effects
    seen = set()
    for t in spec.transitions:
        key = (t.source, t.event, t.target, t.effects)
        assert key not in seen, f"duplicate transition {key}"
        seen.add(key)
        assert t.source in spec.states and t.target in spec.states, t
        assert t.source not in spec.terminal, f"terminal state {t.source} has a transition"
        assert t.event in spec.events, t
        assert set(t.effects) <= spec.effects, t
    for inv in spec.invariants.values():
        assert inv.scope in ("step", "run"), inv


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def trace_header(spec: Spec, **extra: Any) -> dict[str, Any]:
    return {"machine": spec.machine, "spec_sha256": spec.sha256, "commit": git_commit(), **extra}


def write_trace(path: Path, header: dict[str, Any], inputs: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(header, sort_keys=True)]
    lines += [json.dumps(i, sort_keys=True) for i in inputs]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_trace(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path}: empty trace")
    header = json.loads(lines[0])
    if "machine" not in header:
        raise ValueError(f"{path}: the first line must be a header naming the machine")
    return header, [json.loads(line) for line in lines[1:]]


def traces_for(machine: str) -> list[Path]:
    return sorted((TRACES_DIR / machine).glob("*.ndjson"))
