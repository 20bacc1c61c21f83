"""Seeded walks outside pytest: `python -m tests.model.walk MACHINE SEEDS [--steps N]`.

SEEDS is one seed (`1234`: reproduce one walk) or a range (`0:100000`, end excluded: a deep run).
Every walk's inputs go through the machine's harness and end with its settle phase, exactly as in
`test_seeded_walks`; a failing walk's inputs are saved as a trace in tests/model/traces/_new/ (its
header names the seed and the steps) and the run goes on with the next seed. A progress line
about every 60 s and a summary at the end: walks, inputs, failures, wall time.

SIGINT (Ctrl-C) or SIGTERM (`timeout 25m ...`) ends the run and still sums up the walks done.

Exit status: 0 every walk held every invariant, 1 some walk failed (or the run was interrupted),
2 usage.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence

from tests.model.scaffold import UnknownMachine, WalkFailed, model_of

PROGRESS_INTERVAL_S = 60.0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse_seeds(text: str) -> range:
    start, sep, end = text.partition(":")
    if not sep:
        return range(int(start), int(start) + 1)
    seeds = range(int(start), int(end))
    if not seeds:
        raise ValueError(f"empty seed range {text!r}")
    return seeds


def main(argv: Sequence[str] | None = None, out=sys.stdout) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.model.walk", description="Run seeded walks of a machine's model."
    )
    parser.add_argument("machine")
    parser.add_argument("seeds", help="N (one walk) or START:END (END excluded)")
    parser.add_argument("--steps", type=int, default=None, help="inputs per walk (the machine's own)")
    args = parser.parse_args(argv)
    try:
        model = model_of(args.machine)
        seeds = parse_seeds(args.seeds)
    except (UnknownMachine, ValueError) as exc:
        print(exc, file=out)
        return 2
    steps = model.walk_steps if args.steps is None else args.steps
    print(f"{model.name}: seeds {seeds.start}:{seeds.stop}, {steps} steps per walk", file=out)
    # Also where a background shell ignores SIGINT: a deep run cut short says what it covered.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    started = last_report = time.monotonic()
    failed: list[WalkFailed] = []
    inputs = progressed = walked = 0
    interrupted = False
    try:
        for seed in seeds:
            try:
                harness = model.walk(seed, steps)
            except WalkFailed as exc:
                failed.append(exc)
                print(f"FAILED {exc}", file=out, flush=True)
                continue
            finally:
                walked += 1
            inputs += len(harness.inputs)
            progressed += bool(model.progress(harness))
            now = time.monotonic()
            if now - last_report >= PROGRESS_INTERVAL_S:
                last_report = now
                rate = walked / (now - started)
                print(
                    f"  {walked} walks ({rate:.0f}/s), at seed {seed}, {len(failed)} failed",
                    file=out,
                    flush=True,
                )
    except KeyboardInterrupt:
        interrupted = True
        walked -= 1  # the walk under way did not finish
    wall_s = time.monotonic() - started
    stop = seeds.start + walked
    print(
        f"{model.name}: {walked} walks of {steps} steps (seeds {seeds.start}:{stop}"
        f"{', interrupted' if interrupted else ''}), {inputs} inputs, {progressed} with a record "
        f"acknowledged, {len(failed)} failed, {wall_s:.0f} s wall "
        f"({wall_s / max(walked, 1) * 1000:.1f} ms per walk)",
        file=out,
    )
    transitions = [(level, t) for level, spec in model.levels.items() for t in spec.transitions]
    missing = [f"{level}: {t.source} --{t.event}--> {t.target}" for level, t in transitions
               if (level, t) not in model.exercised]
    print(
        f"  the walks took {len(transitions) - len(missing)} of the spec's {len(transitions)} "
        "transitions" + (f"; never {'; '.join(missing)}" if missing else ""),
        file=out,
    )
    for exc in failed:
        print(f"  failed: seed {exc.seed} -> {exc.trace}", file=out)
    return 1 if failed or interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
