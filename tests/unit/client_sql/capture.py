"""Re-record the client catalog corpus from a real PostgreSQL 15 (not run by the test suite).

Usage (as root, with the Debian postgresql-15 package, Java 17 + pgjdbc in ~/.m2, and
odbc-postgresql + unixodbc installed; pgcli installs itself into .tools/pgcli):

    .venv/bin/python tests/unit/client_sql/capture.py

It starts a throwaway PG 15 as the OS user `postgres` on a free loopback port with
`log_statement=all`, creates demo.trips / demo.cities (plus an enum and a composite type so asyncpg
and psycopg introspect), drives each client, and cuts the server log into one file per client:
entries separated by a line `-- next`, each optionally preceded by a `-- params: {json}` line with
the bind values the log showed. The header records the OIDs the real server gave our objects so the
test can map OID literals (psql's `c.oid = '16390'`) onto icegres's own OIDs.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")
OUT_DIR = Path(__file__).parent
JDBC_JAR = Path.home() / ".m2/repository/org/postgresql/postgresql/42.7.13/postgresql-42.7.13.jar"
DATABASE = "icegres"

SETUP_SQL = """
create schema demo;
create table demo.trips(id bigint not null primary key, city text, fare double precision,
                        pickup_ts timestamptz, paid bool);
create table demo.cities(name text not null, population bigint, area real);
create type demo.mood as enum ('sad', 'ok', 'happy');
create type demo.pt as (x int, y int);
"""

# A log line that starts a new entry; anything else continues the previous entry's text.
ENTRY_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \w+ \[(\d+)\] [^|]*\|(\w+):  (.*)$")
STATEMENT_RE = re.compile(r"^(?:statement|execute [^:]+): (.*)$", re.S)
PARAM_RE = re.compile(r"\$(\d+) = (NULL|'(?:[^']|'')*')")


BIND_ATTEMPTS_MAX = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pgcap."))
        shutil.chown(self.dir, "postgres")
        self.port = free_port()
        self.log = self.dir / "log.txt"

    def as_postgres(self, *argv: str) -> None:
        subprocess.run(["su", "postgres", "-c", " ".join(argv)], check=True, stdout=subprocess.DEVNULL)

    def start(self) -> None:
        data = self.dir / "data"
        self.as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                         "-E", "UTF8", "--locale=C.UTF-8")
        # The port is picked, not reported (postgres cannot bind 0 and say which): an outgoing
        # connection may take it before postgres binds it, so a bind failure is retried.
        for attempt in range(1, BIND_ATTEMPTS_MAX + 1):
            offset = self.log.stat().st_size if self.log.exists() else 0
            opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c log_statement=all "
                    "-c log_line_prefix='%m [%p] %a|'")
            try:
                self.as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(self.log), "-w",
                                 "-o", f'"{opts}"', "start")
                return
            except subprocess.CalledProcessError:
                said = self.log.read_bytes()[offset:].decode(errors="replace") if self.log.exists() else ""
                if attempt == BIND_ATTEMPTS_MAX or "could not bind" not in said:
                    raise
                self.port = free_port()

    def stop(self) -> None:
        self.as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "stop")

    def dsn(self, db: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def psql(self, *args: str, db: str = DATABASE) -> str:
        cmd = ["psql", "-X", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db, *args]
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout

    def log_size(self) -> int:
        time.sleep(0.3)  # the server writes its log asynchronously to us
        return self.log.stat().st_size

    def statements_since(self, offset: int) -> list[tuple[str, dict[str, str | None]]]:
        time.sleep(0.3)
        text = self.log.read_bytes()[offset:].decode()
        entries: list[list[str]] = []
        for line in text.splitlines():
            m = ENTRY_RE.match(line)
            if m:
                entries.append([m.group(2), m.group(3)])
            elif entries:
                entries[-1][1] += "\n" + line
        out: list[tuple[str, dict[str, str | None]]] = []
        for level, body in entries:
            if level == "LOG" and (m := STATEMENT_RE.match(body)):
                out.append((m.group(1), {}))
            elif level == "DETAIL" and body.startswith("parameters: ") and out:
                out[-1] = (out[-1][0], parse_params(body))
        return out


def parse_params(body: str) -> dict[str, str | None]:
    params: dict[str, str | None] = {}
    for num, raw in PARAM_RE.findall(body):
        params[f"${num}"] = None if raw == "NULL" else raw[1:-1].replace("''", "'")
    return params


# --- the clients -----------------------------------------------------------------------------

PSQL_COMMANDS = [r"\d", r"\dt", r"\dt demo.*", r"\dn", r"\l", r"\d demo.trips", r"\d+ demo.trips",
                 r"\d demo.cities", r"\df", r"\dT", r"\du", r"\dv", r"\di", r"\dt+",
                 "select version()"]


def run_psql(srv: Server) -> None:
    for cmd in PSQL_COMMANDS:
        srv.psql("-c", cmd)


def run_psycopg(srv: Server) -> None:
    import psycopg
    from psycopg.types import TypeInfo
    from psycopg.types.composite import CompositeInfo
    from psycopg.types.enum import EnumInfo

    with psycopg.connect(srv.dsn()) as conn:
        conn.execute("SELECT 1").fetchall()
        TypeInfo.fetch(conn, "text")
        EnumInfo.fetch(conn, "demo.mood")
        CompositeInfo.fetch(conn, "demo.pt")
        conn.execute("SELECT id, city FROM demo.trips WHERE id > %s", [1]).fetchall()


def run_psycopg2(srv: Server) -> None:
    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(srv.dsn())
    psycopg2.extras.register_composite("demo.pt", conn)
    try:
        psycopg2.extras.register_hstore(conn)
    except psycopg2.ProgrammingError:
        pass  # no hstore: the probe query is what we wanted
    conn.rollback()
    with conn.cursor() as cur:
        cur.execute("SELECT id, city FROM demo.trips WHERE id > %s", [1])
        cur.fetchall()
    conn.close()


def run_asyncpg(srv: Server) -> None:
    import asyncpg

    async def main() -> None:
        conn = await asyncpg.connect(srv.dsn())
        await conn.fetch("SELECT id, city FROM demo.trips WHERE id > $1", 1)
        await conn.fetchval("SELECT 'ok'::demo.mood")
        await conn.fetchval("SELECT ROW(1, 2)::demo.pt")
        await conn.fetch("SELECT $1::demo.mood[]", ["sad"])
        await conn.close()
        pool = await asyncpg.create_pool(srv.dsn(), min_size=1, max_size=1)
        async with pool.acquire() as c:
            await c.fetchval("SELECT 1")
        await pool.close()

    asyncio.run(main())


def inspect_with(url: str, sync: bool = True) -> None:
    import sqlalchemy as sa

    def reflect(conn) -> None:
        insp = sa.inspect(conn)
        insp.get_schema_names()
        insp.get_table_names(schema="demo")
        insp.get_table_names()
        insp.get_view_names(schema="demo")
        insp.has_table("trips", schema="demo")
        insp.has_table("nope")
        insp.get_columns("trips", schema="demo")
        insp.get_pk_constraint("trips", schema="demo")
        insp.get_indexes("trips", schema="demo")
        insp.get_foreign_keys("trips", schema="demo")
        insp.get_unique_constraints("trips", schema="demo")
        insp.get_check_constraints("trips", schema="demo")
        insp.get_table_comment("trips", schema="demo")
        md = sa.MetaData()
        sa.Table("cities", md, schema="demo", autoload_with=conn)
        sa.MetaData().reflect(conn, schema="demo")

    if sync:
        with sa.create_engine(url).connect() as conn:
            reflect(conn)
    else:
        from sqlalchemy.ext.asyncio import create_async_engine

        async def main() -> None:
            engine = create_async_engine(url)
            async with engine.connect() as conn:
                await conn.run_sync(reflect)
            await engine.dispose()

        asyncio.run(main())


def run_sqlalchemy_psycopg(srv: Server) -> None:
    inspect_with(srv.dsn().replace("postgresql://", "postgresql+psycopg://"))


def run_sqlalchemy_psycopg2(srv: Server) -> None:
    inspect_with(srv.dsn().replace("postgresql://", "postgresql+psycopg2://"))


def run_sqlalchemy_asyncpg(srv: Server) -> None:
    inspect_with(srv.dsn().replace("postgresql://", "postgresql+asyncpg://"), sync=False)


def run_pandas(srv: Server) -> None:
    import pandas as pd
    import sqlalchemy as sa

    engine = sa.create_engine(srv.dsn().replace("postgresql://", "postgresql+psycopg://"))
    pd.read_sql("SELECT * FROM demo.trips", engine)
    pd.read_sql_table("trips", engine, schema="demo")
    pd.read_sql_query("SELECT name FROM demo.cities", engine)


def run_pgjdbc(srv: Server) -> None:
    build = Path(tempfile.mkdtemp(prefix="jdbc."))
    src = build / "JdbcMeta.java"
    src.write_text(JDBC_PROGRAM)
    subprocess.run(["javac", str(src)], check=True)
    url = f"jdbc:postgresql://127.0.0.1:{srv.port}/{DATABASE}"
    subprocess.run(["java", "-cp", f"{build}:{JDBC_JAR}", "JdbcMeta", url], check=True,
                   stdout=subprocess.DEVNULL)


def run_psqlodbc(srv: Server) -> None:
    import pyodbc

    conn = pyodbc.connect(f"DRIVER={{PostgreSQL Unicode}};SERVER=127.0.0.1;PORT={srv.port};"
                          f"DATABASE={DATABASE};UID=postgres;")
    cur = conn.cursor()
    cur.tables(schema="demo").fetchall()
    cur.tables().fetchall()
    cur.columns(table="trips", schema="demo").fetchall()
    cur.primaryKeys("trips", schema="demo").fetchall()
    cur.statistics("trips", schema="demo").fetchall()
    cur.foreignKeys(table="trips", schema="demo").fetchall()
    cur.getTypeInfo().fetchall()
    cur.execute("SELECT id, city FROM demo.trips WHERE id > ?", 1).fetchall()
    conn.close()


def run_ibis(srv: Server) -> None:
    import ibis

    con = ibis.postgres.connect(host="127.0.0.1", port=srv.port, user="postgres", database=DATABASE)
    con.list_tables()
    con.list_tables(database="demo")
    t = con.table("trips", database="demo")
    t.schema()
    t.filter(t.id > 1).select("id", "city").execute()
    con.sql("SELECT name FROM demo.cities").schema()


def run_pg8000(srv: Server) -> None:
    import pg8000.dbapi

    conn = pg8000.dbapi.connect(user="postgres", host="127.0.0.1", port=srv.port, database=DATABASE)
    cur = conn.cursor()
    cur.execute("SELECT id, city FROM demo.trips WHERE id > %s", (1,))
    cur.fetchall()
    conn.close()


PGCLI_COMMANDS = [r"\dt", r"\dv", r"\di", r"\d", r"\dn", r"\df", r"\dT", r"\l", r"\dt demo.*",
                  r"\di demo.*", r"\d demo.trips", r"\d+ demo.trips", r"\d demo.cities",
                  r"\d demo.trips_pkey", "select version()"]


def run_pgcli(srv: Server) -> None:
    """The real pgcli (its own venv: infra/tool-venv.sh) at a prompt, as a person uses it:
    its start-up, the completion refresher's queries (waited for by completing a table name),
    the backslash commands; then PGExecute's metadata functions, casing() among them, which the
    refresher runs only when generate_casing_file is on."""
    sys.path.insert(0, str(OUT_DIR.parents[2]))
    from tests.support.pgcli_tool import PgcliSession, metadata, pgcli_venv

    venv = pgcli_venv()
    home = Path(tempfile.mkdtemp(prefix="pgcli."))
    # in another zone than the server's, so that pgcli sets its own (SET TIME ZONE "Europe/Berlin")
    with PgcliSession(venv, home, host="127.0.0.1", port=srv.port, user="postgres", dbname=DATABASE,
                      tz="Europe/Berlin") as cli:
        cli.complete("SELECT count(*) FROM demo.cit", "")
        for command in PGCLI_COMMANDS:
            cli.run(command)
    metadata(venv, srv.dsn())


CLIENTS = {
    "psql": run_psql,
    "psycopg": run_psycopg,
    "psycopg2": run_psycopg2,
    "asyncpg": run_asyncpg,
    "sqlalchemy_psycopg": run_sqlalchemy_psycopg,
    "sqlalchemy_psycopg2": run_sqlalchemy_psycopg2,
    "sqlalchemy_asyncpg": run_sqlalchemy_asyncpg,
    "pandas": run_pandas,
    "pgjdbc": run_pgjdbc,
    "psqlodbc": run_psqlodbc,
    "ibis": run_ibis,
    "pg8000": run_pg8000,
    "pgcli": run_pgcli,
}

JDBC_PROGRAM = r"""
import java.sql.*;
public class JdbcMeta {
  static void dump(ResultSet rs) throws SQLException {
    ResultSetMetaData md = rs.getMetaData();
    while (rs.next()) {
      StringBuilder sb = new StringBuilder();
      for (int i = 1; i <= md.getColumnCount(); i++)
        sb.append(md.getColumnLabel(i)).append('=').append(rs.getString(i)).append(' ');
      System.out.println(sb);
    }
  }
  public static void main(String[] a) throws Exception {
    try (Connection c = DriverManager.getConnection(a[0], "postgres", "")) {
      DatabaseMetaData m = c.getMetaData();
      System.out.println(m.getDatabaseProductVersion());
      dump(m.getSchemas());
      dump(m.getSchemas(null, "demo"));
      dump(m.getCatalogs());
      dump(m.getTableTypes());
      dump(m.getTables(null, "demo", "%", new String[]{"TABLE"}));
      dump(m.getTables(null, null, "%", null));
      dump(m.getColumns(null, "demo", "trips", "%"));
      dump(m.getPrimaryKeys(null, "demo", "trips"));
      dump(m.getIndexInfo(null, "demo", "trips", false, true));
      dump(m.getImportedKeys(null, "demo", "trips"));
      dump(m.getExportedKeys(null, "demo", "trips"));
      dump(m.getTypeInfo());
      dump(m.getFunctions(null, "demo", "%"));
      try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("select * from demo.trips")) {
        ResultSetMetaData md = rs.getMetaData();
        for (int i = 1; i <= md.getColumnCount(); i++)
          System.out.println(md.getColumnName(i) + " " + md.getColumnTypeName(i) + " null=" + md.isNullable(i)
              + " auto=" + md.isAutoIncrement(i) + " tbl=" + md.getTableName(i));
      }
      for (int i = 0; i < 7; i++) {
        try (PreparedStatement ps = c.prepareStatement("select id, city from demo.trips where id > ?")) {
          ps.setLong(1, i);
          try (ResultSet rs = ps.executeQuery()) { while (rs.next()) {} }
        }
      }
    }
  }
}
"""


def object_oids(srv: Server) -> dict[str, int]:
    """The OIDs the real server gave our objects, so the test can translate OID literals."""
    rows = srv.psql("-At", "-F", "|", "-c",
                    "select 'class.' || n.nspname || '.' || c.relname, c.oid from pg_class c "
                    "join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'demo' "
                    "union all select 'type.' || n.nspname || '.' || t.typname, t.oid from pg_type t "
                    "join pg_namespace n on n.oid = t.typnamespace where n.nspname = 'demo' "
                    "union all select 'namespace.' || nspname, oid from pg_namespace "
                    "where nspname in ('demo', 'public')")
    return {name: int(oid) for name, oid in (line.split("|") for line in rows.splitlines())}


def write_corpus(client: str, statements, oids: dict[str, int]) -> int:
    seen: set[str] = set()
    chunks = [f"-- Catalog/session SQL sent by {client}, captured from PostgreSQL 15 "
              "(tests/unit/client_sql/capture.py).\n"
              f"-- oids: {json.dumps(oids, sort_keys=True)}\n"]
    for text, params in statements:
        if text in seen:
            continue
        seen.add(text)
        head = f"-- params: {json.dumps(params)}\n" if params else ""
        chunks.append(head + text.strip() + "\n")
    (OUT_DIR / f"{client}.sql").write_text("-- next\n".join(chunks))
    return len(seen)


def main(only: list[str]) -> None:
    srv = Server()
    srv.start()
    try:
        srv.psql("-c", f"create database {DATABASE}", db="postgres")
        srv.psql("-c", SETUP_SQL)
        oids = object_oids(srv)
        for client, run in CLIENTS.items():
            if only and client not in only:
                continue
            offset = srv.log_size()
            run(srv)
            count = write_corpus(client, srv.statements_since(offset), oids)
            print(f"{client}: {count} distinct statements")
    finally:
        srv.stop()


if __name__ == "__main__":
    os.umask(0o022)
    main(sys.argv[1:])
