"""Snapshot expiry and orphan GC on the real stack: SeaweedFS's Iceberg REST catalog (SigV4) and
its S3. Expiry there asserts every ref (the REST spec's requirements); orphan GC lists and deletes
objects through pyiceberg's S3 file system."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest

from tests.support.icegres_server import running_icegres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_expiry_and_orphan_gc_on_seaweedfs(stack, tmp_path: Path) -> None:
    from pyarrow import fs
    from pyiceberg.catalog import load_catalog

    ns = f"m_{uuid.uuid4().hex[:8]}"
    data_dir = tmp_path / "data"
    with running_icegres(data_dir, env=stack.env()) as srv, psycopg.connect(srv.dsn(), autocommit=True) as conn:
        conn.execute(f"create schema {ns}")
        conn.execute(f"create table {ns}.t (id bigint)")
        for i in range(4):
            conn.execute(f"insert into {ns}.t values ({i})")
        conn.execute(f"delete from {ns}.t where id = 0")
        row = conn.execute(f"call system.expire_snapshots('{ns}.t', TIMESTAMP '2999-01-01 00:00', 1)").fetchone()
        assert row[0] == 1 and row[4] >= 4, row
        assert conn.execute(f"select count(*) from {ns}.t").fetchone() == (3,)

        catalog = load_catalog("sw", **stack.pyiceberg_properties())
        table = catalog.load_table((ns, "t"))
        assert len(table.metadata.snapshots) == 1
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
        scheme, netloc, base = table.io.parse_location(table.metadata.location)
        s3 = table.io.fs_by_scheme(scheme, netloc)
        stray = f"{base}/data/00000-crashed-statement.parquet"
        with s3.open_output_stream(stray) as out:
            out.write(b"s" * 321)
        assert s3.get_file_info(stray).type == fs.FileType.File

        listed = conn.execute(f"call system.remove_orphan_files(table => '{ns}.t', "
                              "older_than => TIMESTAMP '2999-01-01 00:00')").fetchall()
        assert listed == [(f"s3://{stray}", 321)]
        assert s3.get_file_info(stray).type == fs.FileType.File  # a dry run
        kept = conn.execute(f"alter table {ns}.t execute remove_orphan_files(retention_threshold => '1h', "
                            "dry_run => false)").fetchall()
        assert kept == []  # younger than the grace period
        deleted = conn.execute(f"call system.remove_orphan_files(table => '{ns}.t', "
                               "older_than => TIMESTAMP '2999-01-01 00:00', dry_run => false)").fetchall()
        assert deleted == [(f"s3://{stray}", 321)]
        assert s3.get_file_info(stray).type == fs.FileType.NotFound
        assert conn.execute(f"select count(*) from {ns}.t").fetchone() == (3,)
        assert sorted(catalog.load_table((ns, "t")).scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
