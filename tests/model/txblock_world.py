"""A model session around the transaction block machine, a reference model beside it, invariants.

`TxBlockHarness.apply(input)` is the single entry point for hypothesis rules, seeded walks and
trace replay alike. An input is one statement or protocol message as a front end receives it
(`begin`, `write`, `set`, `savepoint`, `sync`, a multi-statement `script`, ...). The harness turns
it into events exactly as pgwire's session does (every statement passes `StatementStarted` first,
unless the input says `"gated": false`, as Flight SQL's savepoint and transaction actions do),
performs the effects on a model of the engine and the session (staged rows with savepoint marks,
a lake of committed rows, settings, portals, cursors) and records the reply. `Reference` computes
the same reply and session from PostgreSQL's rules directly, with no machine; after every input
the checkers of `specs/txblock.toml` compare the two and check the machine's own promises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from icegres.machines.txblock import (
    BeginRequested,
    CloseBlockPortals,
    ClosePortals,
    CommitRequested,
    Config,
    CursorDeclareRequested,
    DiscardAllRequested,
    DiscardWrites,
    Effect,
    Event,
    ImplicitBlockEnded,
    ImplicitBlockStarted,
    MarkSavepoint,
    Notice,
    PublishWrites,
    ReadOnlyRequested,
    Refuse,
    ReleaseSavepoint,
    ReportRolledBack,
    RestoreSavepoint,
    RestoreSettings,
    RollbackRequested,
    RolledBackTo,
    SavepointDeclared,
    SavepointReleased,
    SettingChanged,
    StartTransaction,
    State,
    StatementFailed,
    StatementStarted,
    SyncReceived,
    TxBlockProtocolError,
    WriteStarted,
    initial_state,
    recover,
    step,
    transaction_status,
)
from tests.model.scaffold import Exercised, check_every_transition_exercised
from tests.model.trace import Spec

# Small enough that names collide and the savepoint bound is reached in short runs.
MODEL_CONFIG = Config(savepoints_max=4)
SAVEPOINT_NAMES = ("a", "b", "c")
CURSOR_NAMES = ("c1", "c2")
PORTAL_NAMES = ("", "p1", "p2")
SETTINGS = {
    "timezone": ("UTC", "Asia/Tokyo", "Europe/Berlin"),
    "application_name": ("", "kept", "other"),
    "default_transaction_read_only": ("off", "on"),
}
INITIAL_SETTINGS = {name: values[0] for name, values in SETTINGS.items()}
# Inputs that are statements a failed block still runs (PostgreSQL's IsTransactionExitStmt).
EXITS = ("commit", "rollback", "rollback_to")
# Inputs that may skip the gate ("gated": false), as Flight SQL's actions do: their own event
# refuses them in a failed block. A SET is gated always: the value is applied before its event.
GATE_OPTIONAL = (
    "begin",
    "savepoint",
    "release",
    "set_transaction",
    "declare",
    "discard_all",
    "write",
)
UNGATED_NEVER = ("read", "fail", "set")
DIVISION_BY_ZERO = "22012"
DUPLICATE_CURSOR = "42P03"

# Every spec transition any harness took in this process (the run-scope coverage invariant).
EXERCISED: Exercised = set()

Reply = list[Any]  # ["ok", tag, rows?] | ["notice", [sqlstates], tag] | ["error", sqlstate]


def _reply(tag: str, notices: list[str], rows: list[int] | None = None) -> Reply:
    if notices:
        return ["notice", notices, tag]
    return ["ok", tag] if rows is None else ["ok", tag, rows]


def _read_only_default(settings: dict[str, str]) -> bool:
    return settings["default_transaction_read_only"] == "on"


# --- the reference: PostgreSQL's rules, written out plainly ----------------------------------------


@dataclass
class Reference:
    """The session as PostgreSQL 15 leaves it, where icegres follows it.

    Where icegres knowingly differs it follows icegres: ROLLBACK TO does not undo a SET made after
    the savepoint, and SET TRANSACTION outside a block is silent (PostgreSQL warns).
    """

    savepoints_max: int | None
    status: str = "I"
    read_only: bool = False
    staged: list[int] | None = None  # the block's rows; None outside a block
    marks: list[tuple[str, list[int]]] = field(default_factory=list)
    lake: list[int] = field(default_factory=list)
    settings: dict[str, str] = field(default_factory=lambda: dict(INITIAL_SETTINGS))
    at_begin: dict[str, str] = field(default_factory=dict)
    last_plain: dict[str, str] = field(
        default_factory=dict
    )  # each setting's last plain SET in the block
    portals: set[str] = field(default_factory=set)
    cursors: dict[str, bool] = field(default_factory=dict)  # name -> WITH HOLD

    def apply(self, inp: dict[str, Any]) -> Reply:
        op = inp["op"]
        if op == "script":
            return self._script(inp["statements"])
        if op in ("bind", "sync", "reconnect"):
            return getattr(self, f"_{op}")(inp)
        if self.status == "E" and op not in EXITS:
            return self._error("25P02")  # from the statement gate, or from the event itself
        return getattr(self, f"_{op}")(inp)

    def _error(self, sqlstate: str) -> Reply:
        if self.status == "T":
            self.status = "E"
        return ["error", sqlstate]

    def _end(self, settings: dict[str, str] | None) -> None:
        if settings is not None:
            self.settings = settings
        self.status, self.read_only, self.staged, self.marks = "I", False, None, []
        self.portals = {p for p in self.portals if p == ""}
        self.cursors = {n: hold for n, hold in self.cursors.items() if hold}

    def _begin(self, inp: dict[str, Any]) -> Reply:
        if self.status != "I":
            return _reply("BEGIN", ["25001"])
        asked = inp.get("read_only")
        self.status, self.staged, self.marks = "T", [], []
        self.read_only = _read_only_default(self.settings) if asked is None else asked
        self.at_begin, self.last_plain = dict(self.settings), {}
        return _reply("BEGIN", [])

    def _commit(self, inp: dict[str, Any]) -> Reply:
        if self.status == "I":
            self._end(None)
            return _reply("COMMIT", ["25P01"])
        if self.status == "E":
            self._end(self.at_begin)
            return _reply("ROLLBACK", [])
        assert self.staged is not None
        self.lake += self.staged
        self._end({**self.at_begin, **self.last_plain})
        return _reply("COMMIT", [])

    def _rollback(self, inp: dict[str, Any]) -> Reply:
        if self.status == "I":
            self._end(None)
            return _reply("ROLLBACK", ["25P01"])
        self._end(self.at_begin)
        return _reply("ROLLBACK", [])

    def _savepoint(self, inp: dict[str, Any]) -> Reply:
        if self.status == "I":
            return self._error("25P01")
        if self.savepoints_max is not None and len(self.marks) >= self.savepoints_max:
            return self._error("53400")
        assert self.staged is not None
        self.marks.append((inp["name"], list(self.staged)))
        return _reply("SAVEPOINT", [])

    def _newest(self, name: str) -> int | None:
        found = [i for i, (n, _) in enumerate(self.marks) if n == name]
        return found[-1] if found else None

    def _release(self, inp: dict[str, Any]) -> Reply:
        if self.status == "I":
            return self._error("25P01")
        index = self._newest(inp["name"])
        if index is None:
            return self._error("3B001")
        del self.marks[index:]
        return _reply("RELEASE", [])

    def _rollback_to(self, inp: dict[str, Any]) -> Reply:
        if self.status == "I":
            return self._error("25P01")
        index = self._newest(inp["name"])
        if index is None:
            return self._error("3B001")
        self.staged = list(self.marks[index][1])
        del self.marks[index + 1 :]
        self.status = "T"
        return _reply("ROLLBACK", [])

    def _set(self, inp: dict[str, Any]) -> Reply:
        name, value, local = inp["name"], inp["value"], inp["local"]
        if self.status == "I" and local:
            return _reply("SET", ["25P01"])  # and the value does not last past the statement
        self.settings[name] = value
        if self.status != "I" and not local:
            self.last_plain[name] = value
        return _reply("SET", [])

    def _set_transaction(self, inp: dict[str, Any]) -> Reply:
        if self.status == "T":
            self.read_only = inp["read_only"]
        return _reply("SET", [])

    def _write_refused(self) -> bool:
        return self.read_only if self.status != "I" else _read_only_default(self.settings)

    def _write(self, inp: dict[str, Any]) -> Reply:
        if self._write_refused():
            return self._error("25006")
        if self.staged is None:
            self.lake.append(inp["row"])
        else:
            self.staged.append(inp["row"])
        return _reply("INSERT 0 1", [])

    def _read(self, inp: dict[str, Any]) -> Reply:
        return _reply("SELECT", [], sorted(self.lake + (self.staged or [])))

    def _fail(self, inp: dict[str, Any]) -> Reply:
        return self._error(DIVISION_BY_ZERO)

    def _declare(self, inp: dict[str, Any]) -> Reply:
        if self.status == "I" and not inp["hold"]:
            return self._error("25P01")
        if inp["name"] in self.cursors:
            return self._error(DUPLICATE_CURSOR)
        self.cursors[inp["name"]] = inp["hold"]
        return _reply("DECLARE CURSOR", [])

    def _discard_all(self, inp: dict[str, Any]) -> Reply:
        if self.status != "I":
            return self._error("25001")
        self.cursors.clear()
        self.settings = dict(INITIAL_SETTINGS)
        return _reply("DISCARD ALL", [])

    def _reconnect(self, inp: dict[str, Any]) -> Reply:
        # A new session: only what was committed is still there.
        vars(self).update(vars(Reference(self.savepoints_max, lake=self.lake)))
        return _reply("CONNECTED", [])

    def _bind(self, inp: dict[str, Any]) -> Reply:
        if inp["name"] and inp["name"] in self.portals:
            return self._error(DUPLICATE_CURSOR)
        self.portals.add(inp["name"])
        return _reply("BIND", [])

    def _sync(self, inp: dict[str, Any]) -> Reply:
        if self.status == "I":
            self.portals.clear()
        return _reply("SYNC", [])

    def _script(self, statements: list[list[Any]]) -> Reply:
        """One simple Query of several statements: outside a block, if it writes, one transaction."""
        if (
            self.status != "I"
            or len(statements) < 2
            or not any(s[0] == "write" for s in statements)
        ):
            reply: Reply = _reply("EMPTY", [])
            for statement in statements:
                reply = self.apply(_statement_input(statement))
                if reply[0] == "error":
                    break
            return reply
        read_only, staged, reply = _read_only_default(self.settings), [], _reply("EMPTY", [])
        for statement in statements:
            if statement[0] == "fail" or (statement[0] == "write" and read_only):
                reply = ["error", DIVISION_BY_ZERO if statement[0] == "fail" else "25006"]
                break
            if statement[0] == "write":
                staged.append(statement[1])
                reply = _reply("INSERT 0 1", [])
            else:
                reply = _reply("SELECT", [], sorted(self.lake + staged))
        if reply[0] != "error":
            self.lake += staged
        self.portals = {p for p in self.portals if p == ""}
        self.cursors = {n: hold for n, hold in self.cursors.items() if hold}
        return reply


def _statement_input(statement: list[Any]) -> dict[str, Any]:
    if statement[0] == "write":
        return {"op": "write", "row": statement[1]}
    return {"op": statement[0]}


# --- the harness: the machine driven as pgwire drives it --------------------------------------------


@dataclass
class ModelTxn:
    """The engine's side of a block: staged rows and savepoint marks (`TxnState` in miniature)."""

    staged: list[int] = field(default_factory=list)
    marks: list[tuple[str, list[int]]] = field(default_factory=list)


@dataclass
class BlockEnd:
    """What a block's end left, for `settings_restored_at_block_end`."""

    committed: bool
    at_begin: dict[str, str]
    last_plain: dict[str, str]
    settings_after: dict[str, str]


class Refused(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


class TxBlockHarness:
    def __init__(self, spec: Spec, config: Config = MODEL_CONFIG) -> None:
        self.spec = spec
        self.state: State = initial_state(config)
        self.reference = Reference(config.savepoints_max)
        self.inputs: list[dict[str, Any]] = []
        self.steps: list[tuple[str, str, str, tuple[str, ...]]] = []
        # The world the effects act on.
        self.txn: ModelTxn | None = None
        self.lake: list[int] = []
        self.settings = dict(INITIAL_SETTINGS)
        self.portals: set[str] = set()
        self.cursors: dict[str, bool] = {}
        self.reply: Reply = []
        self.expected: Reply = []
        # What the checkers look at.
        self.violations: list[str] = []
        self.lake_changes: list[tuple[str, str]] = []  # (event, phase before) of each publish
        self.read_only_writes: list[str] = []
        self.started = 0
        self.ended = 0
        self.at_begin: dict[str, str] | None = None
        self.last_plain: dict[str, str] = {}
        self.block_ends: list[BlockEnd] = []
        self._notices: list[str] = []
        self._rolled_back = False

    # The one entry point.

    def apply(self, inp: dict[str, Any]) -> None:
        self.inputs.append(inp)
        op = inp["op"]
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise ValueError(f"unknown input op {op!r}")
        if op == "expect":
            handler(inp)
            return
        self.reply = handler(inp)
        self.expected = self.reference.apply(inp) if op != "raw" else self.reply
        check_step_invariants(self)

    # Stepping the core, checked against the spec, and performing its effects.

    def _step(self, event: Event) -> None:
        before = self.state
        after, effects = step(before, event)
        names = tuple(type(e).__name__ for e in effects)
        transition = self.spec.check_step(
            before.phase.value, type(event).__name__, after.phase.value, names
        )
        EXERCISED.add(("top", transition))
        self.steps.append((before.phase.value, type(event).__name__, after.phase.value, names))
        if any(isinstance(e, Refuse) for e in effects) and (len(effects) != 1 or after != before):
            self.violations.append(
                f"refusal with other effects or a new state: {event} -> {effects}"
            )
        self.state = after
        for effect in effects:
            self._perform(effect, event, before)

    def _perform(self, effect: Effect, event: Event, before: State) -> None:
        cause = (type(event).__name__, before.phase.value)
        match effect:
            case Refuse(sqlstate=sqlstate):
                raise Refused(sqlstate)
            case Notice(sqlstate=sqlstate):
                self._notices.append(sqlstate)
            case StartTransaction():
                if self.txn is not None or not before.idle:
                    self.violations.append(f"a transaction started over another: {cause}")
                self.txn, self.started = ModelTxn(), self.started + 1
                self.at_begin, self.last_plain = dict(self.settings), {}
            case MarkSavepoint(name=name):
                txn = self._txn(cause)
                txn.marks.append((name, list(txn.staged)))
            case ReleaseSavepoint(index=index):
                del self._txn(cause).marks[index:]
            case RestoreSavepoint(index=index):
                txn = self._txn(cause)
                txn.staged = list(txn.marks[index][1])
                del txn.marks[index + 1 :]
            case RestoreSettings(values=values):
                self.settings.update(dict(values))
            case CloseBlockPortals():
                self.portals = {p for p in self.portals if p == ""}
                self.cursors = {n: hold for n, hold in self.cursors.items() if hold}
            case ClosePortals():
                self.portals.clear()
            case PublishWrites():
                txn = self._txn(cause)
                if txn.staged:
                    self.lake += txn.staged
                    self.lake_changes.append(cause)
                self._end_txn(committed=True)
            case DiscardWrites():
                self._txn(cause)
                self._end_txn(committed=False)
            case ReportRolledBack():
                self._rolled_back = True
            case _:
                raise AssertionError(f"unknown effect {effect!r}")

    def _txn(self, cause: tuple[str, str]) -> ModelTxn:
        if self.txn is None:
            self.violations.append(f"an effect on no transaction: {cause}")
            self.txn = ModelTxn()
        return self.txn

    def _end_txn(self, committed: bool) -> None:
        self.txn, self.ended = None, self.ended + 1
        if self.at_begin is not None:
            self.block_ends.append(
                BlockEnd(committed, self.at_begin, self.last_plain, dict(self.settings))
            )
        self.at_begin = None

    def _statement(self, inp: dict[str, Any], exits_block: bool = False) -> None:
        """A statement is about to run: in a failed block only COMMIT and ROLLBACK [TO] do."""
        # Reads and failing statements have no event of their own: the gate is all that stops them.
        if inp.get("gated", True) or inp["op"] in UNGATED_NEVER:
            self._step(StatementStarted(exits_block))

    def _run(self, body: Callable[[], Reply]) -> Reply:
        """A statement's reply; its error, as pgwire's session reports every error, fails a block."""
        self._notices, self._rolled_back = [], False
        try:
            return body()
        except Refused as refused:
            self._step(StatementFailed())
            return ["error", refused.sqlstate]

    # Inputs: one statement or message each.

    def _op_begin(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp)
            asked = inp.get("read_only")
            read_only = _read_only_default(self.settings) if asked is None else asked
            self._step(BeginRequested(None, read_only))
            return _reply("BEGIN", self._notices)

        return self._run(body)

    def _op_commit(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp, exits_block=True)
            self._step(CommitRequested())
            return _reply("ROLLBACK" if self._rolled_back else "COMMIT", self._notices)

        return self._run(body)

    def _op_rollback(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp, exits_block=True)
            self._step(RollbackRequested())
            return _reply("ROLLBACK", self._notices)

        return self._run(body)

    def _op_savepoint(self, inp: dict[str, Any]) -> Reply:
        return self._run(lambda: self._simple(inp, SavepointDeclared(inp["name"]), "SAVEPOINT"))

    def _op_release(self, inp: dict[str, Any]) -> Reply:
        return self._run(lambda: self._simple(inp, SavepointReleased(inp["name"]), "RELEASE"))

    def _op_rollback_to(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp, exits_block=True)
            self._step(RolledBackTo(inp["name"]))
            return _reply("ROLLBACK", self._notices)

        return self._run(body)

    def _op_set_transaction(self, inp: dict[str, Any]) -> Reply:
        return self._run(lambda: self._simple(inp, ReadOnlyRequested(inp["read_only"]), "SET"))

    def _simple(self, inp: dict[str, Any], event: Event, tag: str) -> Reply:
        self._statement(inp)
        self._step(event)
        return _reply(tag, self._notices)

    def _op_set(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._step(StatementStarted(False))  # a SET is always gated: the value is applied first
            name, value = inp["name"], inp["value"]
            old = self.settings[name]
            self.settings[name] = value
            if not self.state.idle:
                if not inp["local"]:
                    self.last_plain[name] = value
            self._step(SettingChanged(inp["local"], ((name, old, value),)))
            return _reply("SET", self._notices)

        return self._run(body)

    def _write_allowed(self) -> None:
        self._step(WriteStarted("INSERT", _read_only_default(self.settings)))
        read_only = _read_only_default(self.settings) if self.state.idle else self.state.read_only
        if read_only:
            self.read_only_writes.append(f"a write passed in {self.state}")

    def _op_write(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp)
            self._write_allowed()
            if self.state.open and self.txn is not None:
                self.txn.staged.append(inp["row"])
            else:
                self.lake.append(inp["row"])
                self.lake_changes.append(("autocommit", self.state.phase.value))
            return _reply("INSERT 0 1", self._notices)

        return self._run(body)

    def _op_read(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp)
            return _reply("SELECT", [], self._visible())

        return self._run(body)

    def _visible(self) -> list[int]:
        staged = self.txn.staged if self.txn is not None and self.state.open else []
        return sorted(self.lake + staged)

    def _op_fail(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp)
            raise Refused(DIVISION_BY_ZERO)  # the statement ran and failed: SELECT 1/0

        return self._run(body)

    def _op_declare(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp)
            self._step(CursorDeclareRequested(inp["hold"]))
            if inp["name"] in self.cursors:
                raise Refused(DUPLICATE_CURSOR)
            self.cursors[inp["name"]] = inp["hold"]
            return _reply("DECLARE CURSOR", self._notices)

        return self._run(body)

    def _op_discard_all(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            self._statement(inp)
            self._step(DiscardAllRequested())
            self.cursors.clear()
            self.settings = dict(INITIAL_SETTINGS)
            return _reply("DISCARD ALL", self._notices)

        return self._run(body)

    def _op_bind(self, inp: dict[str, Any]) -> Reply:
        def body() -> Reply:
            if inp["name"] and inp["name"] in self.portals:
                raise Refused(DUPLICATE_CURSOR)
            self.portals.add(inp["name"])
            return _reply("BIND", [])

        return self._run(body)

    def _op_sync(self, inp: dict[str, Any]) -> Reply:
        self._notices = []
        self._step(SyncReceived())
        return _reply("SYNC", self._notices)

    def _op_script(self, inp: dict[str, Any]) -> Reply:
        """A simple Query of several statements, as pgwire's session runs it."""
        statements = inp["statements"]
        implicit = (
            self.state.idle and len(statements) > 1 and any(s[0] == "write" for s in statements)
        )
        if implicit:
            self._step(ImplicitBlockStarted(_read_only_default(self.settings)))
        reply: Reply = _reply("EMPTY", [])
        for statement in statements:
            reply = getattr(self, f"_op_{statement[0]}")(_statement_input(statement))
            if reply[0] == "error":
                break
        if implicit:
            self._run(lambda: self._step(ImplicitBlockEnded()) or [])
        return reply

    def _op_reconnect(self, inp: dict[str, Any]) -> Reply:
        """The connection is lost and the client connects again: whatever the block staged is
        gone (the engine drops it), and the new session's block is `recover()`'s."""
        if self.txn is not None:
            self.txn, self.ended, self.at_begin = None, self.ended + 1, None
        self.state = recover(self.state.config)
        self.settings, self.portals, self.cursors = dict(INITIAL_SETTINGS), set(), {}
        return _reply("CONNECTED", [])

    def _op_raw(self, inp: dict[str, Any]) -> Reply:
        """An event the current phase does not accept: the core refuses it as a front end's bug."""
        event = RAW_EVENTS[inp["event"]]
        accepted = {(t.source, t.event) for t in self.spec.transitions}
        if (self.state.phase.value, inp["event"]) in accepted:
            raise ValueError(
                f"{inp['event']} is accepted in {self.state.phase.value}: not a raw input"
            )
        before = self.state
        try:
            step(before, event)
        except TxBlockProtocolError:
            return ["protocol_error"]
        raise AssertionError(f"{inp['event']} in {before.phase.value} was accepted")

    def _op_expect(self, inp: dict[str, Any]) -> None:
        """An assertion written into hand-made traces."""
        if "status" in inp:
            assert transaction_status(self.state) == inp["status"], (self.state, inp)
        if "reply" in inp:
            assert self.reply == inp["reply"], (self.reply, inp)
        if "settings" in inp:
            shown = {k: self.settings[k] for k in inp["settings"]}
            assert shown == inp["settings"], (shown, inp)
        if "lake" in inp:
            assert sorted(self.lake) == sorted(inp["lake"]), (self.lake, inp)
        if "savepoints" in inp:
            assert list(self.state.savepoints) == inp["savepoints"], (self.state, inp)

    # Queries the rules of the hypothesis machine and the walks use.

    def savepoint_name(self, which: int) -> str:
        """Mostly an open savepoint (a name nobody declared fails the block, which gets dull)."""
        if self.state.savepoints and which < 6:
            return self.state.savepoints[which % len(self.state.savepoints)]
        return SAVEPOINT_NAMES[which % len(SAVEPOINT_NAMES)]

    def cursor_name(self, which: int) -> str:
        """Mostly a name no open cursor has."""
        free = [n for n in CURSOR_NAMES if n not in self.cursors]
        return (
            free[which % len(free)]
            if free and which < 3
            else CURSOR_NAMES[which % len(CURSOR_NAMES)]
        )

    def rejected_events(self) -> list[str]:
        accepted = {t.event for t in self.spec.transitions if t.source == self.state.phase.value}
        return sorted(set(RAW_EVENTS) - accepted)


# Events with placeholder fields, for `raw` inputs.
RAW_EVENTS: dict[str, Event] = {
    "BeginRequested": BeginRequested(),
    "ImplicitBlockStarted": ImplicitBlockStarted(),
    "ImplicitBlockEnded": ImplicitBlockEnded(),
    "StatementStarted": StatementStarted(),
    "WriteStarted": WriteStarted("INSERT"),
    "StatementFailed": StatementFailed(),
    "CommitRequested": CommitRequested(),
    "RollbackRequested": RollbackRequested(),
    "SavepointDeclared": SavepointDeclared("a"),
    "SavepointReleased": SavepointReleased("a"),
    "RolledBackTo": RolledBackTo("a"),
    "SettingChanged": SettingChanged(False, (("timezone", "UTC", "UTC"),)),
    "ReadOnlyRequested": ReadOnlyRequested(True),
    "CursorDeclareRequested": CursorDeclareRequested(False),
    "DiscardAllRequested": DiscardAllRequested(),
    "SyncReceived": SyncReceived(),
}


# --- invariants ----------------------------------------------------------------------------------


def check_agrees_with_the_reference(h: TxBlockHarness) -> None:
    ref = h.reference
    assert h.reply == h.expected, f"reply {h.reply}, the reference says {h.expected}"
    assert transaction_status(h.state) == ref.status, (h.state, ref.status)
    assert h.settings == ref.settings, (h.settings, ref.settings)
    assert h.lake == ref.lake, (h.lake, ref.lake)
    seen = ref.lake + (ref.staged or []) if ref.status == "T" else ref.lake
    assert h._visible() == sorted(seen), (h._visible(), ref.staged)
    assert h.portals == ref.portals and h.cursors == ref.cursors, (h.portals, h.cursors, ref)


def check_refusal_changes_nothing(h: TxBlockHarness) -> None:
    assert not [v for v in h.violations if v.startswith("refusal")], h.violations


def check_published_only_by_commit(h: TxBlockHarness) -> None:
    allowed = {
        ("CommitRequested", "in_block"),
        ("ImplicitBlockEnded", "implicit"),
        ("autocommit", "idle"),
    }
    stray = [c for c in h.lake_changes if c not in allowed]
    assert not stray, f"the lake changed by {stray}"


def check_one_transaction_per_block(h: TxBlockHarness) -> None:
    assert not [v for v in h.violations if "transaction" in v], h.violations
    assert h.started == h.ended + (h.txn is not None), (h.started, h.ended, h.txn)
    assert (h.txn is not None) == (not h.state.idle), (h.txn, h.state)


def check_savepoints_mirror_marks(h: TxBlockHarness) -> None:
    marks = tuple(name for name, _ in h.txn.marks) if h.txn is not None else ()
    assert h.state.savepoints == marks, (h.state.savepoints, marks)


def check_idle_holds_nothing(h: TxBlockHarness) -> None:
    if h.state.idle:
        s = h.state
        assert h.txn is None and not s.savepoints and not s.before and not s.after_commit, s
        assert not s.read_only, s


def check_read_only_writes_nothing(h: TxBlockHarness) -> None:
    assert not h.read_only_writes, h.read_only_writes


def check_settings_restored_at_block_end(h: TxBlockHarness) -> None:
    for end in h.block_ends:
        expected = {**end.at_begin, **end.last_plain} if end.committed else end.at_begin
        assert end.settings_after == expected, (end, expected)


def check_spec_transitions_only(h: TxBlockHarness) -> None:
    allowed = {(t.source, t.event, t.target, t.effects) for t in h.spec.transitions}
    stray = [s for s in h.steps if s not in allowed]
    assert not stray, f"steps outside the spec: {stray}"


STEP_CHECKERS: dict[str, Callable[[TxBlockHarness], None]] = {
    "agrees_with_the_reference": check_agrees_with_the_reference,
    "refusal_changes_nothing": check_refusal_changes_nothing,
    "published_only_by_commit": check_published_only_by_commit,
    "one_transaction_per_block": check_one_transaction_per_block,
    "savepoints_mirror_marks": check_savepoints_mirror_marks,
    "idle_holds_nothing": check_idle_holds_nothing,
    "read_only_writes_nothing": check_read_only_writes_nothing,
    "settings_restored_at_block_end": check_settings_restored_at_block_end,
    "spec_transitions_only": check_spec_transitions_only,
}
RUN_CHECKERS: dict[str, Callable[..., None]] = {
    "every_transition_exercised": check_every_transition_exercised,
}


def check_step_invariants(h: TxBlockHarness) -> None:
    for check in STEP_CHECKERS.values():
        check(h)
