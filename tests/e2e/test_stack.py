"""The real stack itself (infra/up.sh): SeaweedFS's Iceberg REST catalog and S3, and PostgreSQL 15.

Proves what the icegres e2e tests build on: pyiceberg over REST + SigV4 round-trips a table through
SeaweedFS's S3; the catalog really enforces its auth (SigV4 with signing name `s3tables`, OAuth2
client credentials at /v1/oauth/tokens, bearer tokens) and refuses wrong credentials; the
PostgreSQL catalog database answers; everything listens on loopback only; SeaweedFS can be stopped
and restarted on the same ports without losing data.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import ForbiddenError, OAuthError

from tests.support.stack import Stack, listening_tcp

# `stack` is the session fixture of tests/support/stack_fixtures.py, imported by tests/conftest.py.

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, body = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    return status, (json.loads(body) if body else {})


def _sigv4_get(stack: Stack, url: str, secret_key: str) -> tuple[int, dict]:
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method="GET", url=url)
    SigV4Auth(
        Credentials(stack.s3_access_key, secret_key), stack.signing_name, stack.signing_region
    ).add_auth(req)
    return _get(url, dict(req.headers.items()))


def _rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.Table.from_pylist([{"id": i, "name": f"row-{i}"} for i in ids], schema=SCHEMA)


def _create_table_with_rows(stack: Stack, n: int) -> tuple[str, pa.Table]:
    catalog = load_catalog("stack", **stack.pyiceberg_properties())
    ns = _unique("stack")
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.t", schema=SCHEMA)
    data = _rows(n)
    table.append(data)
    return f"{ns}.t", data


# ---------------------------------------------------------------- catalog + S3 through pyiceberg


def test_pyiceberg_rest_sigv4_roundtrip_through_s3(stack: Stack) -> None:
    import boto3
    from botocore.config import Config

    ident, data = _create_table_with_rows(stack, 1000)

    # A second, fresh catalog client sees the committed table and reads it back from S3.
    table = load_catalog("fresh", **stack.pyiceberg_properties()).load_table(ident)
    assert table.metadata_location.startswith(f"{stack.warehouse}/")
    got = table.scan().to_arrow().sort_by("id")
    assert got.to_pylist() == data.to_pylist()

    # The data files are real objects in SeaweedFS's S3 (path-style, the same key pair).
    s3 = boto3.client(
        "s3",
        endpoint_url=stack.s3_endpoint,
        aws_access_key_id=stack.s3_access_key,
        aws_secret_access_key=stack.s3_secret_key,
        region_name=stack.s3_region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    paths = [task.file.file_path for task in table.scan().plan_files()]
    assert paths and all(p.startswith(f"{stack.warehouse}/") for p in paths)
    for path in paths + [table.metadata_location]:
        bucket, _, key = path.removeprefix("s3://").partition("/")
        assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] > 0


def test_rest_config_advertises_the_warehouse_prefix(stack: Stack) -> None:
    status, body = _sigv4_get(
        stack, f"{stack.catalog_uri}/v1/config?warehouse={stack.warehouse}", stack.s3_secret_key
    )
    assert status == 200
    assert body["overrides"]["prefix"] == stack.catalog_prefix


# ---------------------------------------------------------------- auth, enforced


def test_wrong_sigv4_secret_is_refused_with_403(stack: Stack) -> None:
    url = f"{stack.catalog_uri}/v1/{stack.catalog_prefix}/namespaces"
    assert _sigv4_get(stack, url, stack.s3_secret_key)[0] == 200
    status, body = _sigv4_get(stack, url, "not-the-secret")
    assert status == 403
    assert body["error"]["type"] == "ForbiddenException"
    assert _get(url)[0] == 403  # unsigned

    # pyiceberg: SeaweedFS serves /v1/config without auth, so a wrong secret only shows on the
    # first real call. A start-up check must make one (e.g. list namespaces), not just load_catalog.
    props = {**stack.pyiceberg_properties(), "client.secret-access-key": "not-the-secret"}
    catalog = load_catalog("wrong", **props)
    with pytest.raises(ForbiddenError):
        catalog.list_namespaces()


def test_oauth2_client_credentials_token_is_a_working_bearer(stack: Stack) -> None:
    ident, data = _create_table_with_rows(stack, 10)
    ns = ident.split(".")[0]
    token = stack.oauth2_token()
    bearer = {"Authorization": f"Bearer {token}"}

    status, config = _get(f"{stack.catalog_uri}/v1/config?warehouse={stack.warehouse}", bearer)
    assert status == 200 and config["overrides"]["prefix"] == stack.catalog_prefix
    status, listing = _get(f"{stack.catalog_uri}/v1/{stack.catalog_prefix}/namespaces", bearer)
    assert status == 200 and [ns] in listing["namespaces"]

    # pyiceberg's own OAuth2 flow (credential = id:secret, token endpoint) works end to end.
    catalog = load_catalog("oauth2", **stack.pyiceberg_oauth2_properties())
    assert (ns,) in catalog.list_namespaces()
    assert catalog.load_table(ident).scan().to_arrow().num_rows == data.num_rows


def test_oauth2_wrong_credentials_are_invalid_client(stack: Stack) -> None:
    for client_id, secret in [
        (stack.s3_access_key, "not-the-secret"),
        ("no-such-client", stack.s3_secret_key),
    ]:
        status, body = stack.oauth2_token_request(client_id, secret)
        assert status == 401
        assert json.loads(body)["error"] == "invalid_client"

    props = {**stack.pyiceberg_oauth2_properties(), "credential": "no-such-client:nope"}
    with pytest.raises(OAuthError, match="invalid_client"):
        load_catalog("wrong-oauth2", **props)


def test_invalid_bearer_token_is_refused(stack: Stack) -> None:
    status, body = _get(
        f"{stack.catalog_uri}/v1/{stack.catalog_prefix}/namespaces",
        {"Authorization": f"Bearer {stack.oauth2_token()}x"},
    )
    assert status == 401
    assert "Bearer token is invalid or expired" in body["error"]["message"]


# ---------------------------------------------------------------- PostgreSQL


def test_postgres_catalog_database_answers(stack: Stack) -> None:
    import psycopg

    with psycopg.connect(stack.pg_url, connect_timeout=10, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_database(), current_setting('server_version_num')::int / 10000,"
            " host(inet_server_addr())"
        ).fetchone()
        assert row == ("icegres_catalog", 15, "127.0.0.1")
        name = _unique("stack_probe")
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY)")
        conn.execute(f"INSERT INTO {name} VALUES (1)")
        assert conn.execute(f"SELECT count(*) FROM {name}").fetchone() == (1,)
        conn.execute(f"DROP TABLE {name}")


# ---------------------------------------------------------------- loopback only


def test_everything_listens_on_loopback_only(stack: Stack) -> None:
    weed = listening_tcp(stack.weed_pid)
    pg = listening_tcp(stack.pg_pid)
    assert {addr for addr, _ in weed | pg} == {"127.0.0.1"}
    assert {port for _, port in weed} == set(stack.weed_ports.values())
    assert {port for _, port in pg} == {int(stack.pg_url.rsplit(":", 1)[1].split("/")[0])}


# ---------------------------------------------------------------- restart (fault tests build on this)


@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
def test_seaweed_restarts_on_the_same_ports_with_its_data(stack: Stack, graceful: bool) -> None:
    ident, data = _create_table_with_rows(stack, 50)
    catalog = load_catalog("restart", **stack.pyiceberg_properties())
    old_pid = stack.weed_pid

    stack.stop_seaweed(graceful=graceful)
    try:
        assert not stack.s3_answers() and not stack.catalog_answers()
        with pytest.raises(Exception):  # noqa: B017  (connection refused, whatever the wrapper)
            catalog.load_table(ident)
    finally:
        stack.start_seaweed()

    assert stack.weed_pid != old_pid
    assert set(listening_tcp(stack.weed_pid)) == {
        ("127.0.0.1", p) for p in stack.weed_ports.values()
    }
    # The same catalog object (same URI) works again, and the data survived.
    assert catalog.load_table(ident).scan().to_arrow().sort_by("id").to_pylist() == data.to_pylist()
