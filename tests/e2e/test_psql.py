"""The psql binary, driven for real: a query, \\d, \\dt, \\dn, \\l and \\copy."""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.expected import city_counts, trip

pytestmark = pytest.mark.e2e


def psql(server, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["psql", "-X", "-v", "ON_ERROR_STOP=1", server.dsn(), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={"PGAPPNAME": "psql", "PATH": "/usr/bin:/bin", "PGTZ": "UTC"})
    if check and proc.returncode != 0:
        raise AssertionError(f"psql failed ({proc.returncode}): {proc.stderr}\n{server.log_tail()}")
    return proc


def test_group_by_from_readme(server):
    out = psql(server, "-A", "-t", "-F", "|", "-c", "select city, count(*) from demo.trips group by city").stdout
    got = {line.split("|")[0]: int(line.split("|")[1]) for line in out.strip().splitlines()}
    assert got == city_counts()


def test_point_lookup_values(server):
    out = psql(server, "-A", "-t", "-F", "|", "-c",
               "select id, city, fare, passengers, vendor, paid, pickup_ts from demo.trips where id = 777").stdout
    expected = trip(777)
    fields = out.strip().split("|")
    assert fields[0] == "777"
    assert fields[1] == expected["city"]
    assert float(fields[2]) == expected["fare"]
    assert int(fields[3]) == expected["passengers"]
    assert fields[4] == expected["vendor"]
    assert fields[5] == ("t" if expected["paid"] else "f")
    ts = expected["pickup_ts"]
    assert fields[6].startswith(ts.strftime("%Y-%m-%d %H:%M:%S")) and fields[6].endswith("+00")


def test_a_select_without_columns_returns_its_rows(server):
    # PostgreSQL answers `SELECT FROM t` with one zero-field DataRow per row; psql counts them.
    # A small result and a larger one: they are encoded by different paths.
    assert psql(server, "-c", "select from demo.cities limit 3").stdout.strip().endswith("(3 rows)")
    out = psql(server, "-c", "select from demo.trips where id <= 1000").stdout
    assert out.strip().endswith("(1000 rows)")


def test_describe_table(server):
    out = psql(server, "-c", r"\d demo.trips").stdout
    assert 'Table "demo.trips"' in out
    for column, typ in [("id", "bigint"), ("city", "text"), ("fare", "double precision"),
                        ("pickup_ts", "timestamp with time zone"), ("passengers", "integer"), ("paid", "boolean")]:
        assert any(line.split("|")[0].strip() == column and line.split("|")[1].strip() == typ
                   for line in out.splitlines() if "|" in line), (column, out)
    id_line = next(line for line in out.splitlines() if line.split("|")[0].strip() == "id")
    assert "not null" in id_line


def test_list_tables_and_schemas(server):
    out = psql(server, "-c", r"\dt demo.*").stdout
    assert "trips" in out and "cities" in out
    out = psql(server, "-c", r"\dn").stdout
    assert "demo" in out
    out = psql(server, "-l").stdout
    assert "icegres" in out


def test_copy_to_file(server, tmp_path):
    target = tmp_path / "cities.csv"
    psql(server, "-c", rf"\copy (select city, country, population from demo.cities order by city) to '{target}' with csv header")
    lines = target.read_text().splitlines()
    assert lines[0] == "city,country,population"
    assert lines[1] == "Amsterdam,Netherlands,931298"
    assert len(lines) == 21
    text_target = tmp_path / "trips.txt"
    psql(server, "-c", rf"\copy (select id, city, paid from demo.trips where id <= 3 order by id) to '{text_target}'")
    rows = [line.split("\t") for line in text_target.read_text().splitlines()]
    assert [r[0] for r in rows] == ["1", "2", "3"] and all(r[2] in ("t", "f") for r in rows)


def test_errors_have_sqlstate(server):
    proc = psql(server, "-v", "VERBOSITY=verbose", "-c", "select * from demo.nope", check=False)
    assert proc.returncode != 0
    assert "42P01" in proc.stderr
    proc = psql(server, "-v", "VERBOSITY=verbose", "-c", "select nope from demo.cities", check=False)
    assert "42703" in proc.stderr
    proc = psql(server, "-v", "VERBOSITY=verbose", "-c", "selec 1", check=False)
    assert "42601" in proc.stderr


def test_multi_statement_and_session_commands(server):
    out = psql(server, "-A", "-t", "-c",
               "set search_path to demo; select count(*) from cities; show search_path; select current_schema()").stdout
    # psql 15 prints every result of a multi-statement -c, the SET's command tag included.
    assert out.split() == ["SET", "20", "demo", "demo"]


def test_backend_is_the_one_named(server, request):
    """The parametrised server really is the backend its test id names."""
    backend = request.node.callspec.params["server"]
    expected = {"embedded": "serving sqlite catalog", "seaweedfs": "serving rest catalog at http://127.0.0.1"}[backend]
    assert expected in server.log_tail(100_000)
    if backend == "seaweedfs":
        assert "(sigv4 (s3tables))" in server.log_tail(100_000)


_VIEWS_SETUP = """
create schema {schema};
create table {schema}.orders (id bigint, city text, amount double precision);
create view {schema}.by_city as select city, count(*) as n, sum(amount) as total
  from {schema}.orders group by city;
create view {schema}.ids (order_id) as select id from {schema}.orders;
"""


def _owner_free(text: str, owner: str) -> str:
    """psql's output with the owner column's name and its width taken out."""
    lines = []
    for line in text.splitlines():
        if line and set(line) <= {"-", "+"}:
            lines.append("+".join("-" for _ in line.split("+")))
            continue
        cells = line.split("|")
        lines.append("|".join(c.strip() if c.strip() != owner else "OWNER" for c in cells).strip())
    return "\n".join(lines)


def test_views_list_and_describe_as_in_postgres(server, real_postgres, request):
    """\\dv, \\dv+, \\d and \\d+ of views: the same output as PostgreSQL 15's, but for the owner
    and the text of the view definition (PostgreSQL prints its own deparse of the query)."""
    schema = f"psql_views_{request.node.callspec.id.replace('-', '_')}"
    psql(server, "-q", "-c", f"drop schema if exists {schema} cascade")
    pg = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", real_postgres.dsn()]
    subprocess.run([*pg, "-c", f"drop schema if exists {schema} cascade"], check=True, capture_output=True)
    setup = _VIEWS_SETUP.format(schema=schema)
    psql(server, "-q", "-c", setup)
    subprocess.run([*pg, "-c", setup], check=True, capture_output=True)
    try:
        for command in (rf"\dv {schema}.*", rf"\dv+ {schema}.*", rf"\d {schema}.by_city",
                        rf"\d+ {schema}.by_city"):
            ours = psql(server, "-c", command).stdout
            theirs = subprocess.run([*pg, "-c", command], check=True, capture_output=True, text=True).stdout
            if command.startswith(r"\d+ "):
                head, _, definition = ours.partition("View definition:\n")
                theirs = theirs.partition("View definition:\n")[0]
                ours = head
                assert definition.strip() == (f"select city, count(*) as n, sum(amount) as total\n"
                                              f"  from {schema}.orders group by city;")
            assert _owner_free(ours, server.user) == _owner_free(theirs, real_postgres.user), command
    finally:
        psql(server, "-q", "-c", f"drop schema {schema} cascade")
        subprocess.run([*pg, "-c", f"drop schema {schema} cascade"], check=True, capture_output=True)
