"""The catalog commit machine's world on a real lakehouse: renames, purges, intent records.

`LakeCatalogWorld` implements `icegres.machines.drivers.catalog_commit.CatalogWorld`. Moves are
catalog renames checked against the table's uuid, so a move another session's DDL overtook is
refused rather than applied to the wrong table; views that read a moved table follow it (as a
PostgreSQL view follows its table's OID), and follow it back when the move is undone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

from icegres import faults
from icegres.engine import view_ddl
from icegres.engine.catalog import HIDDEN_PREFIX, Lakehouse
from icegres.engine.catalog_views import NoSuchView, ViewExists
from icegres.machines.catalog_commit import (
    CatalogPlan,
    DataAborted,
    DataCommitted,
    DataUnknown,
    Move,
    MoveApplied,
    MoveFailed,
    MoveRefused,
    PlanChecked,
    PlanRefused,
)

log = logging.getLogger("icegres.commit")

Key = tuple[str, str]
DataCommit = Callable[[], Awaitable[DataCommitted | DataAborted | DataUnknown]]


def hidden_name(kind: str, token: str, n: int) -> str:
    """A block's hidden table: `kind` is `new` (a CREATE) or `dropped` (a DROP's graveyard)."""
    return f"{HIDDEN_PREFIX}{kind}_{token[:16]}_{n}"


def is_hidden(name: str) -> bool:
    return name.startswith(HIDDEN_PREFIX)


class LakeCatalogWorld:
    def __init__(self, lakehouse: Lakehouse, intents: Any, data_commit: DataCommit | None = None) -> None:
        self.lakehouse = lakehouse
        self.intents = intents
        self._data_commit = data_commit

    def check_plan(self, plan: CatalogPlan) -> PlanChecked | PlanRefused:
        """The plan's moves, in order, against the catalog as it stands (moves the plan made
        earlier counted): apply_move checks each again when it applies it."""
        moved: dict[Key, str | None] = {}  # names the plan's earlier moves vacated or filled

        def identity(move: Move, name: str) -> str | None:
            key = (move.namespace, name)
            return moved[key] if key in moved else self._identity_at(move, name)

        def taken(move: Move, name: str) -> bool:
            key = (move.namespace, name)
            return moved[key] is not None if key in moved else self._taken(move.namespace, name)

        for move in plan.moves:
            ns = move.namespace
            if identity(move, move.src) != move.table_uuid:
                return PlanRefused(f'relation "{ns}.{move.src}" was dropped, renamed or replaced by another transaction')
            if taken(move, move.dst):
                return PlanRefused(f'relation "{ns}.{move.dst}" was created by another transaction')
            moved[(ns, move.src)] = None
            moved[(ns, move.dst)] = move.table_uuid
        return PlanChecked()

    def record_intent(self, plan: CatalogPlan, decided: bool) -> None:
        self.intents.record(plan, decided)
        faults.point("after-catalog-intent")

    def forget_intent(self, token: str) -> None:
        self.intents.forget(token)

    def apply_move(self, move: Move) -> MoveApplied | MoveRefused | MoveFailed:
        ns = move.namespace
        if self._identity_at(move, move.src) != move.table_uuid:
            return MoveRefused(f'relation "{ns}.{move.src}" was dropped, renamed or replaced by another transaction')
        if self._taken(ns, move.dst):
            return MoveRefused(f'relation "{ns}.{move.dst}" was created by another transaction')
        views = view_ddl.catalog_views_now(self.lakehouse)
        try:
            self._rename(move, move.src, move.dst)
        except (NoSuchTableError, TableAlreadyExistsError, NoSuchView, ViewExists) as exc:
            return MoveRefused(f"another transaction changed {ns}.{move.src} or {ns}.{move.dst}: {exc}")
        except Exception as exc:
            return MoveFailed(f"{type(exc).__name__}: {exc}")
        view_ddl.retarget(self.lakehouse, views, (ns, move.src), (ns, move.dst))
        faults.point("after-catalog-move")
        return MoveApplied()

    def undo_move(self, move: Move) -> None:
        ns = move.namespace
        if self._identity_at(move, move.dst) != move.table_uuid:
            return  # it never moved (or another session moved it since: nothing is ours to undo)
        if self._taken(ns, move.src):
            log.warning("cannot undo the move of %s.%s to %s: %s was taken", ns, move.src, move.dst, move.src)
            return
        views = view_ddl.catalog_views_now(self.lakehouse)
        self._rename(move, move.dst, move.src)
        view_ddl.retarget(self.lakehouse, views, (ns, move.dst), (ns, move.src))

    def purge(self, tables: tuple[Key, ...]) -> bool:
        """Drop these hidden relations (tables or views), and the views that read them."""
        ok = True
        views = view_ddl.catalog_views_now(self.lakehouse) if tables else {}
        # Views that read a dropped relation followed it aside (its DROP ... CASCADE): they go too.
        view_ddl.drop_each(self.lakehouse, view_ddl.dependents(views, set(tables)))
        for ns, name in tables:
            assert is_hidden(name), name
            try:
                if self.lakehouse.view_location(ns, name) is not None:
                    self.lakehouse.drop_view(ns, name)
                else:
                    self.lakehouse.drop_table(ns, name)
            except (NoSuchTableError, NoSuchView):
                continue
            except Exception:
                log.warning("could not purge %s.%s", ns, name, exc_info=True)
                ok = False
        faults.point("after-catalog-purge")
        return ok

    async def commit_data(self) -> DataCommitted | DataAborted | DataUnknown:
        assert self._data_commit is not None, "a plan with data needs its data commit"
        return await self._data_commit()

    def token_landed(self, plan: CatalogPlan) -> bool:
        """Recovery: is the block's token in a snapshot (or property) of a table it wrote?"""
        from icegres.engine.lake_world import carries_token

        for ns, name in plan.written:
            try:
                meta = self.lakehouse.load_table(ns, name).metadata
            except NoSuchTableError:
                continue
            if carries_token(meta, plan.token):
                return True
        return False

    def _identity_at(self, move: Move, name: str) -> str | None:
        """What `name` holds now, as the move knows its relation: a table's uuid, a view's file."""
        if move.kind == "view":
            return self.lakehouse.view_location(move.namespace, name)
        try:
            return str(self.lakehouse.load_table(move.namespace, name).metadata.table_uuid)
        except NoSuchTableError:
            return None

    def _taken(self, namespace: str, name: str) -> bool:
        return self.lakehouse.table_exists(namespace, name) or bool(self.lakehouse.view_location(namespace, name))

    def _rename(self, move: Move, src: str, dst: str) -> None:
        if move.kind == "view":
            self.lakehouse.rename_view(move.namespace, src, dst)
        else:
            self.lakehouse.rename_table(move.namespace, src, dst)


async def recover_pending(lakehouse: Lakehouse, intents: Any) -> list[tuple[str, str]]:
    """At start-up, before serving: finish or undo every block whose COMMIT this server left half
    done (its intent records). Each block's (token, verdict) for the log."""
    import trio

    from icegres.machines.drivers.catalog_commit import run_catalog_recovery

    done = []
    for plan, decided in await trio.to_thread.run_sync(intents.pending):
        world = LakeCatalogWorld(lakehouse, intents)
        if not decided and plan.has_data:
            decided = await trio.to_thread.run_sync(world.token_landed, plan)
        outcome = await run_catalog_recovery(plan, decided, world)
        verdict = "committed" if outcome.committed else outcome.phase.value
        log.warning("recovered transaction %s: %s", plan.token, verdict)
        done.append((plan.token, verdict))
    return done
