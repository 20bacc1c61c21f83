"""One module per suite; each exposes `run(opts) -> list of reports` (see bench/__main__.py)."""
