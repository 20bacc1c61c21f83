"""Run by pgcli's own Python (.tools/pgcli/bin/python), never imported by the tests: what pgcli's
PGExecute answers over the DSN in argv[1], printed as one JSON object.

- "functions": every metadata function pgcli's completion refresher calls (and casing(), which
  it calls when generate_casing_file is on), as lists of rows;
- "commands": the backslash commands, through PGExecute.run() with pgspecial, as pgcli runs
  them at its prompt: each result's title, headers, rows and status.

A function or command that raises is recorded as {"error": "<SQLSTATE>: <message>"}, so the
caller sees every failure at once.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pgcli.pgexecute import PGExecute
from pgspecial.main import PGSpecial

FUNCTIONS = ("search_path", "schemata", "tables", "views", "table_columns", "view_columns",
             "functions", "datatypes", "foreignkeys", "casing", "databases")
COMMANDS = (r"\dt", r"\dv", r"\di", r"\d", r"\dn", r"\df", r"\dT", r"\l",
            r"\dt demo.*", r"\dv demo.*", r"\di demo.*", r"\d demo.*", r"\df demo.*",
            r"\d demo.trips", r"\d demo.cities", r"\d+ demo.trips", r"\d demo.trips_pkey",
            r"\dt sales.*", r"\di sales.*", r"\d sales.orders", r"\df pg_catalog.pg_terminate_backend",
            r"\df pg_catalog.json_build_object", r"\df pg_catalog.generate_subscripts")


def _value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _error(e: Exception) -> dict[str, str]:
    return {"error": f"{getattr(e, 'sqlstate', None)}: {e}"}


def main(dsn: str) -> dict[str, Any]:
    ex = PGExecute(dsn=dsn)
    out: dict[str, Any] = {"functions": {}, "commands": {}}
    for name in FUNCTIONS:
        try:
            out["functions"][name] = _value(list(getattr(ex, name)()))
        except Exception as e:  # noqa: BLE001 - recorded for the caller
            out["functions"][name] = _error(e)
    special = PGSpecial()
    for command in COMMANDS:
        try:
            results = []
            for title, rows, headers, status, *_ in ex.run(command, pgspecial=special):
                results.append({"title": title, "headers": _value(headers),
                                "rows": _value(list(rows)) if rows is not None else None,
                                "status": status})
            out["commands"][command] = results
        except Exception as e:  # noqa: BLE001 - recorded for the caller
            out["commands"][command] = _error(e)
    return out


if __name__ == "__main__":
    json.dump(main(sys.argv[1]), sys.stdout)
