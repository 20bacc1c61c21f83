"""Replay saved model traces: `python -m tests.model.replay PATH [PATH...]` from the repository root.

Each trace's header names its machine; the inputs go through that machine's harness (registered
by tests/model/test_<machine>.py), checking the spec and every step invariant after each input,
exactly as the test that recorded it did. A directory stands for the traces under it, except
those under a directory whose name starts with "_" (`_new/`, `_found/`: failing traces of open
bugs), unless that directory is the one named.

A trace recorded against another version of its machine's spec (its `spec_sha256` is not the
spec file's) is refused: its inputs may no longer mean what they meant. After checking that it
does (read the spec change), `--accept-spec-change` replays it anyway and, if it passes,
re-stamps its header with the current spec's hash; a failing trace keeps its header.

Exit status: 0 every trace held every invariant; 1 a replay failed (the input and the violation
are printed); 2 a path is not a readable trace of a registered machine; 3 a trace was refused for
its spec hash. With several outcomes, the lowest non-zero status wins.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path

from tests.model.scaffold import ReplayFailed, SpecChanged, UnknownMachine, model_of
from tests.model.trace import read_trace

PASSED, FAILED, UNREADABLE, REFUSED = 0, 1, 2, 3


def expand(paths: Iterable[Path]) -> list[Path]:
    traces: list[Path] = []
    for path in paths:
        if not path.is_dir():
            traces.append(path)
            continue
        for trace in sorted(path.rglob("*.ndjson")):
            if not any(part.startswith("_") for part in trace.relative_to(path).parts[:-1]):
                traces.append(trace)
    return traces


def restamp(path: Path, sha256: str) -> None:
    """Rewrite the header's spec_sha256, leaving every other line byte for byte as it was."""
    first, rest = path.read_text().split("\n", 1)
    header = json.loads(first)
    header["spec_sha256"] = sha256
    path.write_text(json.dumps(header, sort_keys=True) + "\n" + rest)


def replay_one(path: Path, *, accept_spec_change: bool, out=sys.stdout) -> int:
    try:
        header, inputs = read_trace(path)
        model = model_of(header["machine"])
    except (OSError, ValueError, UnknownMachine) as exc:
        print(f"UNREADABLE {path}: {exc}", file=out)
        return UNREADABLE
    stale = header.get("spec_sha256") != model.spec.sha256
    try:
        model.replay(path, accept_spec_change=accept_spec_change)
    except SpecChanged as exc:
        print(f"REFUSED {exc}", file=out)
        return REFUSED
    except ReplayFailed as exc:
        print(f"FAILED {exc}", file=out)
        traceback.print_exception(exc.cause, file=out)
        return FAILED
    note = ""
    if stale:
        restamp(path, model.spec.sha256)
        note = f"; re-stamped with specs/{model.name}.toml sha256 {model.spec.sha256[:12]}"
    print(f"ok {path} ({model.name}, {len(inputs)} inputs){note}", file=out)
    return PASSED


def main(argv: Sequence[str] | None = None, out=sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.model.replay",
        description="Replay saved model traces through their machine's harness.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a trace or a directory")
    parser.add_argument(
        "--accept-spec-change",
        action="store_true",
        help="replay traces recorded against an older spec, and re-stamp those that pass",
    )
    args = parser.parse_args(argv)
    traces = expand(args.paths)
    if not traces:
        print("no traces found", file=out)
        return UNREADABLE
    statuses = [
        replay_one(path, accept_spec_change=args.accept_spec_change, out=out) for path in traces
    ]
    failures = sorted(s for s in statuses if s != PASSED)
    print(f"{statuses.count(PASSED)} of {len(traces)} traces passed", file=out)
    return failures[0] if failures else PASSED


if __name__ == "__main__":
    sys.exit(main())
