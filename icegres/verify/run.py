"""`icegres verify`: check the configuration, take the scratch namespace, run the selected claims,
report, clean up. Exit status 0 when every claim run passed (a claim skipped for want of a
configured backend does not count against it, unless it was asked for with --only), 1 when one
failed, 2 when the configuration is bad (one line per problem, before anything is started)."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from icegres.config import Settings
from icegres.verify import report
from icegres.verify.claims import CLAIMS, by_name
from icegres.verify.cleanup import remove_scratch_tails
from icegres.verify.deployment import Deployment
from icegres.verify.lab import Lab, Progress
from icegres.verify.nodes import Nodes, child_base_env
from icegres.verify.outcome import Claim, Outcome, Result, Verdict
from icegres.verify.scratch import ScratchRefused, claim_namespace, drop_namespace

__all__ = ["Options", "preflight", "select", "verify"]

DEFAULT_NAMESPACE = "icegres_verify"


@dataclass(frozen=True)
class Options:
    only: str | None = None
    json: bool = False
    rounds: int = 3
    keep: bool = False
    namespace: str = DEFAULT_NAMESPACE
    local_keepers: bool = False
    seed: int | None = None


def select(only: str | None) -> tuple[list[Claim], list[str]]:
    """The claims --only names (all of them when None), and the names it gave that are no claim."""
    if not only:
        return list(CLAIMS), []
    known = by_name()
    names = [n.strip() for n in only.split(",") if n.strip()]
    return [known[n] for n in names if n in known], [n for n in names if n not in known]


def preflight(settings: Settings, options: Options) -> tuple[Any, list[str]]:
    """The deployment's catalog (None if it cannot be opened) and one line per problem found
    before anything is started."""
    problems: list[str] = []
    if options.rounds < 1:
        problems.append(f"--rounds must be at least 1, not {options.rounds}")
    if not options.namespace.isidentifier() or options.namespace != options.namespace.lower():
        problems.append(f"--scratch-namespace {options.namespace!r} must be a lower-case SQL identifier")
    catalog = None
    if not settings.catalog_uri and not (settings.data_dir / "catalog.db").is_file():
        problems.append(f"no embedded lake in {settings.data_dir.resolve()} (give the serving server's --data-dir, "
                        "or --catalog-uri)")
    else:
        from icegres.engine.catalog import CatalogUnavailable, Lakehouse

        try:
            catalog = Lakehouse.from_settings(settings).catalog
        except CatalogUnavailable as exc:
            problems.append(str(exc))
    if settings.tail_url:
        problems += _tail_url_problems(settings.tail_url)
    if settings.tail_dir:
        parent = Path(settings.tail_dir).expanduser().resolve().parent
        if not (parent.is_dir() and os.access(parent, os.W_OK)):
            problems.append(f"--tail-dir: cannot make a scratch log beside it: {parent} is not a writable directory")
    if settings.tail_quorum and not options.local_keepers:
        from icegres.verify.quorum_probe import quorum_problems

        problems += quorum_problems(settings.tail_quorum)
    return catalog, problems


def _first_line(exc: BaseException) -> str:
    """The error as one line: drivers append the statement, its parameters and links below it."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _tail_url_problems(url: str) -> list[str]:
    import psycopg

    from icegres.config import redact_uri

    try:
        with psycopg.connect(url, connect_timeout=5):
            return []
    except psycopg.Error as exc:
        return [f"--tail-url {redact_uri(url)}: cannot connect: {_first_line(exc)}"]


def verify(settings: Settings, options: Options, *, out: IO[str] | None = None, err: IO[str] | None = None,
           environ: Mapping[str, str] | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    # A refused catalog write makes psycopg warn while SQLAlchemy drops the aborted connection:
    # the problem is reported once, as verify's own line.
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    environ = os.environ if environ is None else environ
    claims, unknown = select(options.only)
    if unknown:
        names = ", ".join(c.name for c in CLAIMS)
        print(f"icegres verify: no claim named {', '.join(unknown)} (claims: {names})", file=err)
        return 2
    catalog, problems = preflight(settings, options)
    if catalog is not None and not problems:
        try:
            claim_namespace(catalog, options.namespace)
        except ScratchRefused as exc:
            problems.append(str(exc))
        except Exception as exc:  # the catalog refused: permissions, a read-only catalog
            problems.append(f"cannot create the scratch namespace {options.namespace}: {_first_line(exc)}")
    if problems:
        for problem in problems:
            print(f"icegres verify: {problem}", file=err)
        return 2
    talk = err if options.json else out
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(1 << 31)
    run_dir = Path(tempfile.mkdtemp(prefix="icegres-verify-"))
    deployment = Deployment(settings, uuid.uuid4().hex[:8])
    nodes = Nodes(run_dir, child_base_env(environ))
    lab = Lab(deployment, options.namespace, nodes, options.rounds, random.Random(seed), Progress(out=err))
    results: list[Result] = []
    previous = signal.signal(signal.SIGTERM, _interrupt)
    failed = True
    try:
        print(f"icegres verify: {deployment.catalog_shown}, scratch namespace {options.namespace}, "
              f"{options.rounds} round(s), seed {seed}, logs in {run_dir}", file=talk)
        if options.local_keepers:
            from icegres.verify.quorum_probe import start_local_keepers

            lab.local_keepers = start_local_keepers(nodes)
        for claim in claims:
            results.append(_run_claim(lab, claim, talk))
            print(report.line(results[-1]), file=talk, flush=True)
        failed = any(r.outcome.verdict is Verdict.FAIL for r in results)
        status = _exit_status(results, explicit=bool(options.only))
        print(report.table(results), file=talk, flush=True)
        if options.json:
            print(report.as_json(results, exit_status=status, deployment={
                "catalog": deployment.catalog_shown, "tails": [t.shown for t in lab.tails()],
                "namespace": options.namespace, "rounds": options.rounds, "seed": seed,
                "logs": str(run_dir) if options.keep or failed else None}), file=out, flush=True)
        return status
    except KeyboardInterrupt:
        print("icegres verify: interrupted; stopping every scratch process", file=talk, flush=True)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        nodes.close()
        if not options.keep:
            with contextlib.suppress(Exception):
                drop_namespace(catalog, options.namespace)
            remove_scratch_tails(deployment, lab.tails(), [n.data_dir for n in nodes.by_name.values() if n.kind == "serve"])
        if options.keep or failed:
            print(f"icegres verify: logs kept in {run_dir}"
                  + (f", scratch namespace {options.namespace} kept" if options.keep else ""), file=talk)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


def _run_claim(lab: Lab, claim: Claim, talk: IO[str]) -> Result:
    lab.claim = claim.name
    print(f"- {claim.name}: {claim.title}", file=talk, flush=True)
    started = time.monotonic()
    try:
        outcome = claim.run(lab)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        outcome = Outcome.failed(f"could not run: {type(exc).__name__}: {exc}")
    finally:
        lab.nodes.close_claim(f"{claim.name}-")
    return Result(claim, outcome, time.monotonic() - started)


def _exit_status(results: Sequence[Result], *, explicit: bool) -> int:
    if any(r.outcome.verdict is Verdict.FAIL for r in results):
        return 1
    if explicit and any(r.outcome.verdict is Verdict.SKIP for r in results):
        return 1  # asked for by name, and not proved
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM ends a run as Ctrl-C does: every scratch process stopped
