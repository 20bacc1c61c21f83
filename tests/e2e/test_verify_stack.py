"""`icegres verify` on the real stack: SeaweedFS's REST catalog and S3, a PostgreSQL 15 tail, and
three keepers verify starts itself. Every claim runs and passes; the scratch namespace is gone
afterwards and the demo namespace untouched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support.stack import Stack
from tests.support.stack_fixtures import stack  # noqa: F401  (the session's stack)
from tests.support.verify import SCRATCH, run_verify, verdicts, verify_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]


def _tables(catalog: RestCatalog) -> dict[str, str]:
    """Every table outside the scratch namespace and its metadata file."""
    out = {}
    for (namespace,) in catalog.list_namespaces():
        if namespace == SCRATCH:
            continue
        for identifier in catalog.list_tables(namespace):
            out[".".join(identifier)] = catalog.load_table(identifier).metadata_location
    return out


def test_every_claim_passes_on_seaweedfs_with_a_postgres_tail_and_local_keepers(stack: Stack,  # noqa: F811
                                                                                   tmp_path: Path) -> None:
    env = stack.env()
    subprocess.run([sys.executable, "-m", "icegres", "seed", "--data-dir", str(tmp_path / "seed"), "--rows", "500"],
                   check=True, timeout=600, capture_output=True, stdin=subprocess.DEVNULL, env=verify_env(env))
    catalog = RestCatalog("verify-test", **stack.pyiceberg_properties())
    before = _tables(catalog)
    proc = run_verify("--data-dir", str(tmp_path / "d"), "--write-buffer-ms", "50", "--tail-url", stack.pg_url,
                      "--local-keepers", "--rounds", "1", "--json", env=env, timeout_s=1100)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = verdicts(proc)
    assert {name: c["result"] for name, c in results.items()} == {name: "PASS" for name in results}, results
    assert len(results) >= 3
    assert _tables(catalog) == before
    assert SCRATCH not in [ns[0] for ns in catalog.list_namespaces()]
