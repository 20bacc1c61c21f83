"""The end of a run, for people (a table) and for tooling (one JSON document). Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from icegres.verify.outcome import Result, Verdict

__all__ = ["as_json", "figures_text", "line", "table"]


def figures_text(figures: dict[str, Any] | Any) -> str:
    return ", ".join(f"{k}={_number(v)}" for k, v in dict(figures).items())


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def line(result: Result) -> str:
    """The line printed as a claim ends."""
    out = f"{result.outcome.verdict.value} {result.claim.name} ({result.seconds:.1f} s)"
    if result.outcome.figures:
        out += f": {figures_text(result.outcome.figures)}"
    if result.outcome.detail:
        out += f"\n    {result.outcome.detail}"
    return out


def table(results: Sequence[Result]) -> str:
    """claim | result | figures | docs, one row per claim, and a last line with the counts."""
    rows = [("claim", "result", "figures", "docs")]
    for r in results:
        figures = figures_text(r.outcome.figures) or r.outcome.detail
        rows.append((r.claim.name, r.outcome.verdict.value, figures, r.claim.docs))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    text = []
    for n, row in enumerate(rows):
        text.append("  ".join([*(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])), row[3]]).rstrip())
        if n == 0:
            text.append("  ".join(["-" * w for w in widths] + ["-" * 4]))
    counts = {v: sum(r.outcome.verdict is v for r in results) for v in Verdict}
    text.append(f"{counts[Verdict.PASS]} passed, {counts[Verdict.FAIL]} failed, {counts[Verdict.SKIP]} skipped")
    return "\n".join(text)


def as_json(results: Sequence[Result], *, deployment: dict[str, Any], exit_status: int) -> str:
    return json.dumps({
        "deployment": deployment,
        "exit_status": exit_status,
        "claims": [{
            "claim": r.claim.name,
            "title": r.claim.title,
            "result": r.outcome.verdict.value,
            "seconds": round(r.seconds, 3),
            "figures": dict(r.outcome.figures),
            "detail": r.outcome.detail,
            "docs": r.claim.docs,
        } for r in results],
    }, indent=2)
