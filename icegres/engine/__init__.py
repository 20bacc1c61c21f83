"""The query side of icegres: catalogs, the DataFusion session, mounts, SQL routing, pg_catalog.

`connect()` gives Python users an ibis backend over the same mounted lakehouse the servers use:

    import icegres.engine
    con = icegres.engine.connect(".icegres")
    con.table("trips", database="demo").group_by("city").agg(n=lambda t: t.count()).execute()
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from icegres.engine.ibis_backend import IcegresBackend


def connect(data_dir: str | Path = ".icegres") -> IcegresBackend:
    """An ibis backend over the embedded lakehouse in `data_dir`, fresh as of this call."""
    from icegres.engine.catalog import Lakehouse
    from icegres.engine.ibis_backend import ibis_connect
    from icegres.engine.lake import Engine

    engine = Engine(Lakehouse.embedded(Path(data_dir)))
    engine.refresh()  # every table: ibis looks tables up in DataFusion's catalog by name
    return ibis_connect(engine)
