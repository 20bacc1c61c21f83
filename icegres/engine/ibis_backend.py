"""The mounted lakehouse as an ibis DataFusion backend, for Python users and our own tools.

ibis 12.0.0 calls `datafusion.udf(..., input_types=..., return_type=...)` by keyword, and DataFusion
>= 52 renamed those keywords (`input_fields` / `return_field`). Upstream fixed it in ibis PR #12028,
not yet released; until a release carries the fix this subclass overrides the three methods that
build UDFs and passes the arguments positionally, which both spellings accept.
"""

from __future__ import annotations

import inspect
import typing
from typing import TYPE_CHECKING

import datafusion as df
import ibis.expr.datatypes as dt
from ibis.backends.datafusion import Backend as _DataFusionBackend
from ibis.formats.pyarrow import PyArrowType

if TYPE_CHECKING:
    from icegres.engine.lake import Engine


class IcegresBackend(_DataFusionBackend):
    # ibis reads these from DataFusion's information_schema.df_settings; icegres registers a
    # PostgreSQL-shaped information_schema instead, so answer from the session's own defaults.
    default_schema = "public"
    # The engine (and its catalog) the backend reads: kept alive with it, and refreshed through
    # it to see new commits.
    icegres_engine: Engine | None = None

    @property
    def current_catalog(self) -> str:
        from icegres.engine.lake import DEFAULT_CATALOG

        return DEFAULT_CATALOG

    @property
    def current_database(self) -> str:
        return self.default_schema

    def list_catalogs(self, *, like: str | None = None) -> list[str]:
        from icegres.engine.lake import DEFAULT_CATALOG

        return self._filter_with_like([DEFAULT_CATALOG], like)

    def _register_builtin_udfs(self):
        from ibis.backends.datafusion import udfs

        for name, func in inspect.getmembers(
            udfs,
            predicate=lambda m: callable(m) and not m.__name__.startswith("_") and m.__module__ == udfs.__name__,
        ):
            annotations = typing.get_type_hints(func)
            argnames = list(inspect.signature(func).parameters)
            input_types = [PyArrowType.from_ibis(dt.dtype(annotations.get(a))) for a in argnames]
            return_type = PyArrowType.from_ibis(dt.dtype(annotations["return"]))
            self.con.register_udf(df.udf(func, input_types, return_type, "immutable", name))

    def _compile_pyarrow_udf(self, udf_node):
        volatility = getattr(udf_node, "__config__", {}).get("volatility", "volatile")
        return df.udf(
            udf_node.__func__,
            [PyArrowType.from_ibis(arg.dtype) for arg in udf_node.args],
            PyArrowType.from_ibis(udf_node.dtype),
            volatility,
            udf_node.__func_name__,
        )

    def _compile_elementwise_udf(self, udf_node):
        return df.udf(
            udf_node.func,
            list(map(PyArrowType.from_ibis, udf_node.input_type)),
            PyArrowType.from_ibis(udf_node.return_type),
            "volatile",
            udf_node.func.__name__,
        )


def ibis_connect(engine: Engine) -> IcegresBackend:
    """An ibis backend over the engine's shared catalog (call engine.refresh() to see new commits)."""
    backend = IcegresBackend()
    backend.do_connect(engine.new_context("public")[0])
    backend.icegres_engine = engine
    return backend
