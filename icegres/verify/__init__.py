"""`icegres verify`: re-prove icegres's durability and isolation claims on a live deployment.

The command runs against the operator's own catalog, object store, tails and keepers, in a
scratch namespace it creates and drops (`scratch.py`), with scratch `icegres serve` processes of
its own on loopback (`nodes.py`) that it kills and restarts as the claims need. Each claim is a
module of `claims/` that proves one property a docs section makes (`claims.CLAIMS` lists them in
order); `run.py` checks the configuration, runs the selected claims and reports (`report.py`).
docs/verify.md says what each claim proves and how to read a FAIL.

This package sits on top: it starts servers as child processes and talks to them over pgwire
(psycopg), the way an operator's client would. Nothing below imports it.
"""
