"""Iceberg views in the catalog: read, create, replace, rename and drop them.

A view is a catalog object beside the tables, so every engine reading the catalog sees it:

- SQL catalogs (the embedded SQLite one, PostgreSQL): as Iceberg's own JDBC catalog keeps views
  (schema V1), a row in `iceberg_tables` with `iceberg_type = 'VIEW'` pointing at a view metadata
  JSON file written per the Iceberg view spec. pyiceberg 0.12's SqlCatalog raises
  NotImplementedError for every view method, so the rows and files are ours; its table methods
  filter on `iceberg_type`, so they never see a view row. Tables and views share the row's key
  (catalog, namespace, name): one name is a table or a view, never both.
- REST catalogs: the spec's view endpoints, called directly. pyiceberg calls them only when the
  server lists them in its config's `endpoints`, and SeaweedFS serves them without listing them.

Everything here blocks (SQL, file or HTTP I/O): callers run it in worker threads.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from icegres.pg.errors import PgError

VIEW_TYPE = "VIEW"
DIALECT = "postgres"
ENGINE_NAME = "icegres"
# How many versions a view keeps (the spec's `version.history.num-entries` default).
VERSIONS_KEPT = 10

Key = tuple[str, str]


class ViewExists(Exception):
    """A table or view of that name exists already."""


class NoSuchView(Exception):
    """No view of that name (it may have been dropped meanwhile)."""


class ViewChanged(Exception):
    """The view moved on since it was read (a concurrent replace): nothing was applied."""


@dataclass(frozen=True)
class ViewEntry:
    namespace: str
    name: str
    metadata_location: str


# --- the view metadata document (Iceberg view spec, format-version 1) --------------------------


def new_metadata(location: str, namespace: str, sql: str, schema: Any, properties: dict[str, str],
                 version_summary: dict[str, str]) -> dict[str, Any]:
    """The metadata of a new view: one version of one SQL representation over `schema` (a
    pyiceberg Schema; its ids are kept)."""
    now = int(time.time() * 1000)
    return {
        "view-uuid": str(uuid.uuid4()),
        "format-version": 1,
        "location": location,
        "current-version-id": 1,
        "properties": dict(properties),
        "versions": [_version(1, 0, now, namespace, sql, version_summary)],
        "schemas": [_schema_json(schema, 0)],
        "version-log": [{"timestamp-ms": now, "version-id": 1}],
    }


def replaced_metadata(old: dict[str, Any], namespace: str, sql: str, schema: Any,
                      version_summary: dict[str, str]) -> dict[str, Any]:
    """`old` with a new current version (CREATE OR REPLACE VIEW): the schema is reused when it is
    the current one, else added; the version log grows; at most VERSIONS_KEPT versions stay."""
    now = int(time.time() * 1000)
    meta = json.loads(json.dumps(old))
    schema_json = _schema_json(schema, 0)
    schema_id = None
    for known in meta["schemas"]:
        if _fields_of(known) == _fields_of(schema_json):
            schema_id = known["schema-id"]
    if schema_id is None:
        schema_id = max((s["schema-id"] for s in meta["schemas"]), default=-1) + 1
        meta["schemas"].append(_schema_json(schema, schema_id))
    version_id = max((v["version-id"] for v in meta["versions"]), default=0) + 1
    meta["versions"].append(_version(version_id, schema_id, now, namespace, sql, version_summary))
    meta["versions"] = meta["versions"][-VERSIONS_KEPT:]
    meta["current-version-id"] = version_id
    meta["version-log"].append({"timestamp-ms": now, "version-id": version_id})
    live = {v["schema-id"] for v in meta["versions"]}
    meta["schemas"] = [s for s in meta["schemas"] if s["schema-id"] in live]
    return meta


def _version(version_id: int, schema_id: int, now_ms: int, namespace: str, sql: str,
             summary: dict[str, str]) -> dict[str, Any]:
    return {
        "version-id": version_id,
        "schema-id": schema_id,
        "timestamp-ms": now_ms,
        "summary": {"engine-name": ENGINE_NAME, **summary},
        "default-namespace": namespace.split("."),
        "representations": [{"type": "sql", "sql": sql, "dialect": DIALECT}],
    }


def _schema_json(schema: Any, schema_id: int) -> dict[str, Any]:
    body = json.loads(schema.model_dump_json())
    body["schema-id"] = schema_id
    body.pop("identifier-field-ids", None)
    return body


def _fields_of(schema_json: dict[str, Any]) -> Any:
    return json.dumps(schema_json.get("fields"), sort_keys=True)


def current_version(meta: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in meta["versions"] if v["version-id"] == meta["current-version-id"])


def current_sql(meta: dict[str, Any]) -> str | None:
    """The current version's SQL for our dialect (None: the view has no postgres representation,
    e.g. one Spark or Trino made)."""
    for rep in current_version(meta).get("representations", ()):
        if rep.get("type") == "sql" and str(rep.get("dialect", "")).lower() in (DIALECT, "postgresql"):
            return str(rep["sql"])
    return None


def current_schema(meta: dict[str, Any]) -> Any:
    """The current version's schema as a pyiceberg Schema."""
    from pyiceberg.schema import Schema

    schema_id = current_version(meta)["schema-id"]
    body = next(s for s in meta["schemas"] if s["schema-id"] == schema_id)
    return Schema.model_validate(body)


def read_metadata(io: Any, location: str) -> dict[str, Any]:
    with io.new_input(location).open() as f:
        return json.loads(f.read())


def _write_metadata(io: Any, location: str, meta: dict[str, Any]) -> None:
    out = io.new_output(location)
    with out.create(overwrite=False) as f:
        f.write(json.dumps(meta, indent=None).encode())


def _metadata_path(view_location: str, version: int) -> str:
    # Iceberg's own naming for table and view metadata files: 00000-<uuid>.metadata.json
    return f"{view_location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"


def _next_version(location: str) -> int:
    name = location.rsplit("/", 1)[-1]
    head = name.split("-", 1)[0]
    return int(head) + 1 if head.isdigit() else 0


# --- SQL catalogs ---------------------------------------------------------------------------


def sql_list(catalog: Any) -> list[ViewEntry]:
    from sqlalchemy import text

    with catalog.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables "
            "WHERE catalog_name = :c AND iceberg_type = :v"), {"c": catalog.name, "v": VIEW_TYPE}).all()
    return [ViewEntry(ns, name, loc) for ns, name, loc in rows if loc]


def sql_location(catalog: Any, namespace: str, name: str) -> str | None:
    from sqlalchemy import text

    with catalog.engine.connect() as conn:
        row = conn.execute(text(
            "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :c AND "
            "table_namespace = :ns AND table_name = :t AND iceberg_type = :v"),
            {"c": catalog.name, "ns": namespace, "t": name, "v": VIEW_TYPE}).first()
    return row[0] if row else None


def sql_create(catalog: Any, namespace: str, name: str, meta_of: Any) -> str:
    """Write the metadata `meta_of(location)` makes and insert the view's row; ViewExists if a
    table or view holds the name (the row's key)."""
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    location = catalog._resolve_table_location(None, namespace, name)
    meta = meta_of(location)
    path = _metadata_path(location, 0)
    io = catalog._load_file_io(location=path)
    _write_metadata(io, path, meta)
    try:
        with catalog.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, "
                "metadata_location, previous_metadata_location, iceberg_type) "
                "VALUES (:c, :ns, :t, :loc, NULL, :v)"),
                {"c": catalog.name, "ns": namespace, "t": name, "loc": path, "v": VIEW_TYPE})
    except IntegrityError:
        io.delete(path)
        raise ViewExists(f"{namespace}.{name}") from None
    return path


def sql_replace(catalog: Any, namespace: str, name: str, old_location: str,
                meta: dict[str, Any]) -> str:
    """A new metadata file and a compare-and-set of the row on `old_location`."""
    from sqlalchemy import text

    path = _metadata_path(meta["location"], _next_version(old_location))
    io = catalog._load_file_io(location=path)
    _write_metadata(io, path, meta)
    with catalog.engine.begin() as conn:
        result = conn.execute(text(
            "UPDATE iceberg_tables SET metadata_location = :new, previous_metadata_location = :old "
            "WHERE catalog_name = :c AND table_namespace = :ns AND table_name = :t "
            "AND metadata_location = :old AND iceberg_type = :v"),
            {"new": path, "old": old_location, "c": catalog.name, "ns": namespace, "t": name,
             "v": VIEW_TYPE})
        if result.rowcount != 1:
            raise ViewChanged(f"{namespace}.{name}")
    return path


def sql_rename(catalog: Any, namespace: str, name: str, new_name: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    try:
        with catalog.engine.begin() as conn:
            result = conn.execute(text(
                "UPDATE iceberg_tables SET table_name = :new WHERE catalog_name = :c AND "
                "table_namespace = :ns AND table_name = :t AND iceberg_type = :v"),
                {"new": new_name, "c": catalog.name, "ns": namespace, "t": name, "v": VIEW_TYPE})
    except IntegrityError:
        raise ViewExists(f"{namespace}.{new_name}") from None
    if result.rowcount != 1:
        raise NoSuchView(f"{namespace}.{name}")


def sql_drop(catalog: Any, namespace: str, name: str) -> None:
    """Remove the view's row. Its metadata files stay in storage, as a dropped table's do."""
    from sqlalchemy import text

    with catalog.engine.begin() as conn:
        result = conn.execute(text(
            "DELETE FROM iceberg_tables WHERE catalog_name = :c AND table_namespace = :ns AND "
            "table_name = :t AND iceberg_type = :v"),
            {"c": catalog.name, "ns": namespace, "t": name, "v": VIEW_TYPE})
    if result.rowcount != 1:
        raise NoSuchView(f"{namespace}.{name}")


# --- REST catalogs --------------------------------------------------------------------------


def _rest_url(catalog: Any, namespace: str, name: str | None = None) -> str:
    ns = catalog._encode_namespace_path(tuple(namespace.split(".")))
    if name is None:
        return catalog.url("namespaces/{namespace}/views", prefixed=True, namespace=ns)
    from urllib.parse import quote

    return catalog.url("namespaces/{namespace}/views/{view}", prefixed=True, namespace=ns,
                       view=quote(name, safe=""))


def _rest_error(response: Any, what: str) -> Exception:
    status = response.status_code
    detail = response.text[:300]
    if status == 404:
        return NoSuchView(what)
    if status == 409:
        return ViewExists(what)
    if status in (400, 405, 406, 501) and "view" not in detail.lower():
        return PgError("0A000", f"the REST catalog does not serve Iceberg views (HTTP {status}): {detail}")
    return RuntimeError(f"REST catalog answered HTTP {status} for view {what}: {detail}")


def rest_list(catalog: Any, namespace: str) -> list[ViewEntry]:
    """The namespace's views with their metadata locations (one loadView each)."""
    names: list[str] = []
    params: dict[str, str] = {}
    while True:
        response = catalog._session.get(_rest_url(catalog, namespace), params=params)
        if response.status_code in (404, 400, 405, 406, 501):
            return []  # no such namespace, or a catalog without views
        if response.status_code != 200:
            raise _rest_error(response, namespace)
        body = json.loads(response.content)
        names += [i["name"] for i in body.get("identifiers", ())]
        token = body.get("next-page-token")
        if not token:
            break
        params["pageToken"] = token
    entries = []
    for name in names:
        loaded = rest_load(catalog, namespace, name)
        if loaded is not None:
            entries.append(ViewEntry(namespace, name, loaded[0]))
    return entries


def rest_load(catalog: Any, namespace: str, name: str) -> tuple[str, dict[str, Any]] | None:
    """(metadata location, metadata) of the view, or None if there is none."""
    response = catalog._session.get(_rest_url(catalog, namespace, name))
    if response.status_code in (404, 400, 405, 406, 501):
        return None
    if response.status_code != 200:
        raise _rest_error(response, f"{namespace}.{name}")
    body = json.loads(response.content)
    return body["metadata-location"], body["metadata"]


def rest_create(catalog: Any, namespace: str, name: str, meta: dict[str, Any]) -> str:
    version = current_version(meta)
    schema = next(s for s in meta["schemas"] if s["schema-id"] == version["schema-id"])
    request = {"name": name, "schema": schema, "view-version": version,
               "properties": meta.get("properties", {})}
    response = catalog._session.post(_rest_url(catalog, namespace), data=json.dumps(request).encode())
    if response.status_code in (404, 405, 501):
        if "namespace" in response.text.lower():
            raise PgError("3F000", f'schema "{namespace}" does not exist')
        raise PgError("0A000", f"the REST catalog does not serve Iceberg views (HTTP {response.status_code})")
    if response.status_code != 200:
        raise _rest_error(response, f"{namespace}.{name}")
    return json.loads(response.content)["metadata-location"]


def rest_replace(catalog: Any, namespace: str, name: str, old: dict[str, Any],
                 new: dict[str, Any]) -> str:
    """The spec's replaceView: the new version (and its schema, if new) as updates, asserting
    the view's uuid."""
    version = current_version(new)
    updates: list[dict[str, Any]] = []
    known = {s["schema-id"] for s in old["schemas"]}
    if version["schema-id"] not in known:
        schema = next(s for s in new["schemas"] if s["schema-id"] == version["schema-id"])
        updates.append({"action": "add-schema", "schema": schema})
    updates.append({"action": "add-view-version", "view-version": version})
    updates.append({"action": "set-current-view-version", "view-version-id": -1})
    request = {"requirements": [{"type": "assert-view-uuid", "uuid": old["view-uuid"]}],
               "updates": updates}
    response = catalog._session.post(_rest_url(catalog, namespace, name), data=json.dumps(request).encode())
    if response.status_code == 409:
        raise ViewChanged(f"{namespace}.{name}")
    if response.status_code != 200:
        raise _rest_error(response, f"{namespace}.{name}")
    return json.loads(response.content)["metadata-location"]


def rest_rename(catalog: Any, namespace: str, name: str, new_name: str) -> None:
    ns = namespace.split(".")
    request = {"source": {"namespace": ns, "name": name}, "destination": {"namespace": ns, "name": new_name}}
    response = catalog._session.post(catalog.url("views/rename", prefixed=True),
                                      data=json.dumps(request).encode())
    if response.status_code not in (200, 204):
        raise _rest_error(response, f"{namespace}.{name}")


def rest_drop(catalog: Any, namespace: str, name: str) -> None:
    response = catalog._session.delete(_rest_url(catalog, namespace, name))
    if response.status_code not in (200, 204):
        raise _rest_error(response, f"{namespace}.{name}")
