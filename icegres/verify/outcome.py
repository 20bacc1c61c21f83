"""What a claim is and what running it found: plain values, shared by the claims, the runner and
the report."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from icegres.verify.lab import Lab

__all__ = ["Claim", "Outcome", "Result", "Verdict"]


class Verdict(enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Outcome:
    """A claim's verdict, its figures (name -> number or short text, in the order they were
    measured) and one line: what broke for a FAIL, what to configure for a SKIP."""

    verdict: Verdict
    figures: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""

    @classmethod
    def passed(cls, figures: Mapping[str, Any], detail: str = "") -> Outcome:
        return cls(Verdict.PASS, dict(figures), detail)

    @classmethod
    def failed(cls, detail: str, figures: Mapping[str, Any] | None = None) -> Outcome:
        return cls(Verdict.FAIL, dict(figures or {}), detail)

    @classmethod
    def skipped(cls, what_to_configure: str) -> Outcome:
        return cls(Verdict.SKIP, {}, what_to_configure)


@dataclass(frozen=True)
class Claim:
    """One claim: `name` for --only, `title` for people, `docs` the section that makes the claim,
    `run` proves it in a Lab and returns its Outcome (raising means it could not be run: the
    runner reports that as a FAIL with the error)."""

    name: str
    title: str
    docs: str
    run: Callable[[Lab], Outcome]


@dataclass(frozen=True)
class Result:
    claim: Claim
    outcome: Outcome
    seconds: float
