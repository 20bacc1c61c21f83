"""pgcli, the real binary, driven as a person drives it; and its own metadata functions.

pgcli lives in a virtualenv of its own (`infra/tool-venv.sh pgcli` -> .tools/pgcli, pinned by
infra/tools/pgcli.txt), so its dependencies never meet the project's. `pgcli_venv()` installs it
when missing (quick when present) and returns the venv.

`PgcliSession` spawns `pgcli` on a pseudo-terminal (pexpect, TERM=xterm) with everything it
would write under $HOME pointed at a temporary directory: its config file (pgcli's own defaults,
with the pager turned off and the history and log files moved), history and log. What it prints
is read back without the terminal's escape sequences.

`metadata(venv, dsn)` runs pgcli's PGExecute metadata functions (the ones its completion
refresher calls) and the backslash commands through PGExecute.run() in pgcli's own Python, and
returns what they answered as JSON values (tests/support/pgcli_metadata.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.tool_venv import tool_venv

# CSI sequences (colours, cursor moves), OSC titles, and the two-byte escapes prompt_toolkit uses.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
_TIME = re.compile(r"Time: \d+\.\d+s")
_RED = re.compile(r"\x1b\[31m")


def pgcli_venv() -> Path:
    """The venv pgcli is installed in, installing it first if it is missing or stale."""
    return tool_venv("pgcli")


def plain(text: str) -> str:
    """Terminal output as the lines a person reads: escapes removed, line ends normalised."""
    text = _ANSI.sub("", text)
    text = text.replace("\r\r\n", "\n").replace("\r\n", "\n")
    return "\n".join(line.split("\r")[-1] for line in text.split("\n"))


def table_rows(text: str) -> list[tuple[str, ...]]:
    """The rows of the table pgcli drew (its default `psql` format), each cell stripped."""
    rows: list[tuple[str, ...]] = []
    in_body = False
    for line in text.splitlines():
        line = line.rstrip()
        if re.fullmatch(r"\|[-+|]+\|", line):  # under the header
            in_body = True
        elif line.startswith("+"):  # the top or bottom border
            in_body = False
        elif in_body and line.startswith("|") and line.endswith("|"):
            rows.append(tuple(cell.strip() for cell in line[1:-1].split("|")))
    return rows


def metadata(venv: Path, dsn: str, *, timeout_s: float = 300) -> dict[str, Any]:
    """What pgcli's PGExecute answers over `dsn`: every metadata function and backslash command."""
    script = Path(__file__).with_name("pgcli_metadata.py")
    proc = subprocess.run([str(venv / "bin" / "python"), str(script), dsn], capture_output=True,
                          text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "Etc/UTC"})
    if proc.returncode != 0:
        raise AssertionError(f"pgcli's metadata functions failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout)


class PgcliSession:
    """One interactive pgcli over a pseudo-terminal. Use as a context manager."""

    def __init__(self, venv: Path, home: Path, *, host: str, port: int, user: str, dbname: str,
                 timeout_s: float = 60, tz: str = "Etc/UTC") -> None:
        self.venv, self.home, self.timeout_s = venv, home, timeout_s
        self.args = ["-h", host, "-p", str(port), "-U", user, "-w", dbname]
        self.prompt = f"{user}@{host}:{dbname}>"
        self.config = home / "config"
        self.log_file = home / "pgcli.log"
        self.tz = tz
        self.transcript: list[str] = []
        self.child: Any = None

    def _env(self) -> dict[str, str]:
        return {"TERM": "xterm", "HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / "xdg"),
                "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PAGER": "cat", "TZ": self.tz,
                # prompt_toolkit asks the terminal where its cursor is; a pty has nobody to answer
                "PROMPT_TOOLKIT_NO_CPR": "1"}

    def _write_config(self) -> None:
        """pgcli's own default config (the file it copies to ~/.config/pgcli/config on first
        start), changed only so: no pager, history and log in our directory, and the log at
        DEBUG (it then records every statement it sends)."""
        (default,) = self.venv.glob("lib/python*/site-packages/pgcli/pgclirc")
        text = default.read_text()
        for key, value in (("enable_pager", "False"), ("history_file", str(self.home / "history")),
                           ("log_file", str(self.log_file)), ("log_level", "DEBUG")):
            text, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
            assert count == 1, f"pgcli's default config has no single {key} line"
        self.config.write_text(text)

    def __enter__(self) -> PgcliSession:
        import pexpect

        self.home.mkdir(parents=True, exist_ok=True)
        if not self.config.exists():
            self._write_config()
        self.child = pexpect.spawn(str(self.venv / "bin" / "pgcli"), ["--pgclirc", str(self.config), *self.args],
                                   env=self._env(), encoding="utf-8", timeout=self.timeout_s,
                                   dimensions=(60, 220), cwd=str(self.home))
        self._expect(re.escape(self.prompt))
        return self

    def __exit__(self, *exc: object) -> None:
        import pexpect

        if self.child is None:
            return
        try:
            if self.child.isalive():
                self.child.sendline(r"\q")
                self.child.expect(pexpect.EOF, timeout=15)
                self.transcript.append(self.child.before or "")
        except Exception:  # noqa: BLE001 - a hung client is killed below, the test reports its own failure
            pass
        finally:
            self.child.close(force=True)

    def _expect(self, pattern: str | re.Pattern[str], timeout_s: float | None = None) -> str:
        try:
            self.child.expect(pattern, timeout=timeout_s or self.timeout_s)
        except Exception as e:
            raise AssertionError(f"pgcli did not show {pattern!r}: {e.__class__.__name__}\n"
                                 f"--- screen so far ---\n{self.screen()[-6000:]}\n"
                                 f"--- what it had not matched ---\n{plain(self.child.before or '')}") from None
        self.transcript.append(self.child.before + self.child.after)
        return plain(self.child.before + self.child.after)

    def screen(self) -> str:
        """Everything pgcli printed so far, as plain text."""
        return plain("".join(self.transcript))

    def run(self, command: str) -> str:
        """Type `command` and Enter; return what pgcli printed up to its `Time: ...s` line.
        An error (pgcli prints it in red) fails, with what was printed."""
        self.child.sendline(command)
        out, ok = self._outcome()
        if not ok:
            raise AssertionError(f"pgcli printed an error for {command!r}:\n{out[-4000:]}")
        return out

    def _outcome(self) -> tuple[str, bool]:
        """(what was printed, succeeded) for the statement just sent: its `Time:` line, or an
        error, which click prints in red (the terminal's own red, which syntax highlighting never
        uses: it colours in 256 colours)."""
        index = self._expect_any([_TIME, _RED])
        out = plain(self.child.before + self.child.after)
        if index == 1:  # the message, then a `Time:` line if the statement itself failed
            with contextlib.suppress(AssertionError):
                out += self._expect(_TIME, timeout_s=3)
        return out, index == 0

    def _expect_any(self, patterns: list[re.Pattern[str]]) -> int:
        try:
            index = self.child.expect(patterns, timeout=self.timeout_s)
        except Exception as e:
            raise AssertionError(f"pgcli showed none of {patterns}: {e.__class__.__name__}\n"
                                 f"--- screen so far ---\n{self.screen()[-6000:]}\n"
                                 f"--- what it had not matched ---\n{plain(self.child.before or '')}") from None
        self.transcript.append(self.child.before + self.child.after)
        return index

    def complete(self, before: str, after: str, within_s: float = 60) -> str:
        """Type `before`, press Tab, type a space, `after` and Enter, until the statement runs: the
        completion refresh runs in the background after connecting, and until it is done Tab
        has nothing to offer and the statement fails. Returns what the statement printed."""
        deadline = time.monotonic() + within_s
        while True:
            self.child.send(before)
            time.sleep(0.5)
            self.child.send("\t")
            time.sleep(0.5)
            # a space leaves the completion Tab selected (Enter would only accept it)
            self.child.send(" " + after + "\r")
            out, ok = self._outcome()
            if ok:
                return out
            if time.monotonic() > deadline:
                raise AssertionError(f"Tab after {before!r} never completed it:\n{out[-4000:]}")
            time.sleep(1)
