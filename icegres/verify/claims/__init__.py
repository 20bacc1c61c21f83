"""The claims `icegres verify` proves, in the order it runs them. Each module holds one claim
(`CLAIM`): the property, the docs section that makes it, and how it is re-proved."""

from __future__ import annotations

from icegres.verify.outcome import Claim

__all__ = ["CLAIMS", "by_name"]


def _claims() -> tuple[Claim, ...]:
    from icegres.verify.claims import (
        bank,
        buffered_acks,
        commit_crash,
        fencing,
        freshness,
        quorum_failover,
        replay_once,
        snapshot_isolation,
    )

    return (commit_crash.CLAIM, buffered_acks.CLAIM, replay_once.CLAIM, fencing.CLAIM, quorum_failover.CLAIM,
            freshness.CLAIM, snapshot_isolation.CLAIM, bank.CLAIM)


CLAIMS: tuple[Claim, ...] = _claims()


def by_name() -> dict[str, Claim]:
    return {claim.name: claim for claim in CLAIMS}
