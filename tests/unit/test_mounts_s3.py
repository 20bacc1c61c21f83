"""Session contexts that plan on their own and execute in the engine's shared runtime (mounts.py),
and the object-store read settings (engine.session_config)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from icegres.engine.lake import DEFAULT_CATALOG, session_config
from icegres.engine.mounts import shared_runtime_context


def _setting(config, name: str) -> str:
    from datafusion import SessionContext

    probe = SessionContext(config.with_information_schema(True))
    rows = probe.sql(f"select value from information_schema.df_settings where name = '{name}'")
    return rows.to_pylist()[0]["value"]


def test_row_level_filter_pushdown_stays_off() -> None:
    # Measured slower on scans with several conjuncts and on object stores (engine.session_config).
    assert _setting(session_config(), "datafusion.execution.parquet.pushdown_filters") == "false"


@pytest.fixture
def runner(tmp_path):
    from datafusion import SessionContext
    from datafusion.catalog import Schema

    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"id": pa.array(range(100), pa.int64()), "v": [f"r{i}" for i in range(100)]}), path
    )
    master = SessionContext(session_config())
    master.catalog(DEFAULT_CATALOG).register_schema("demo", Schema.memory_schema())
    df = master.read_parquet(str(path))
    master.catalog(DEFAULT_CATALOG).schema("demo").register_table("t", df.into_view())
    return master


def _session(master, schema: str = "public"):
    ctx = shared_runtime_context(session_config(schema), master)
    ctx.register_catalog_provider(DEFAULT_CATALOG, master.catalog(DEFAULT_CATALOG))
    return ctx


def test_session_plans_with_its_own_schema_udfs_and_params(runner) -> None:
    from datafusion import udf

    ctx = _session(runner, "demo")  # unqualified `t` resolves in the session's default schema
    ctx.register_udf(
        udf(
            lambda a: pa.array([f"s:{x}" for x in a.to_pylist()]),
            [pa.int64()],
            pa.string(),
            "immutable",
            "session_tag",
        )
    )
    df = ctx.sql("select session_tag(id) as tag, v from t where id = $1", param_values={"1": 42})
    assert df.to_pylist() == [{"tag": "s:42", "v": "r42"}]
    # The master never had the session's UDF nor its default schema, yet it executed the plan.
    with pytest.raises(Exception, match="session_tag"):
        runner.sql("select session_tag(1)")


def test_two_sessions_answer_alike_and_errors_surface_at_planning(runner) -> None:
    a, b = _session(runner), _session(runner)
    q = "select count(*) as n, sum(id) as s from demo.t where id between 10 and 19"
    assert a.sql(q).to_pylist() == b.sql(q).to_pylist() == [{"n": 10, "s": 145}]
    with pytest.raises(Exception, match="missing"):
        a.sql("select * from demo.missing")


class _RecordingContext:
    """Stands in for a SessionContext: records the object stores registered on it."""

    def __init__(self) -> None:
        self.registered: list[str] = []

    def register_object_store(self, scheme: str, store: object, bucket: str) -> None:
        self.registered.append(bucket)


def test_vended_credentials_replace_the_buckets_store_when_they_change() -> None:
    from icegres.engine.mounts import ObjectStores

    base = {"s3.endpoint": "http://127.0.0.1:1", "s3.region": "us-east-1"}
    stores = ObjectStores(base)
    ctx = _RecordingContext()
    first = {"s3.access-key-id": "AK1", "s3.secret-access-key": "S1", "s3.session-token": "T1"}
    stores.ensure(ctx, "s3://lake/t/data/a.parquet", first)
    stores.ensure(ctx, "s3://lake/t/data/b.parquet", first)  # same credentials: nothing new
    assert ctx.registered == ["lake"] and stores.generation == 1
    renewed = {**first, "s3.session-token": "T2"}  # a later loadTable vended fresh credentials
    stores.ensure(ctx, "s3://lake/t/data/a.parquet", renewed)
    assert ctx.registered == ["lake", "lake"] and stores.generation == 2
    stores.ensure(ctx, "s3://lake/t/data/a.parquet", None)  # a table without vended ones keeps it
    assert stores.generation == 2
    session = _RecordingContext()
    assert stores.register_all(session) == 2
    assert session.registered == ["lake", "lake"]  # the newer store is registered last, so it wins
