import pytest

from icegres.sql.pieces import split_statements
from icegres.sql.statement import Kind, classify

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "sql,expected",
    [
        ("select 1; select 2", ["select 1", "select 2"]),
        ("select ';' ; select 2;", ["select ';'", "select 2"]),
        ("select $$a;b$$; select $tag$x;$tag$", ["select $$a;b$$", "select $tag$x;$tag$"]),
        ("select 1 -- c;\n; /* a; /* nested; */ b */ select 2", ["select 1 -- c;", "/* a; /* nested; */ b */ select 2"]),
        ('select "a;b" from t', ['select "a;b" from t']),
        ("select E'\\';' ; select 3", ["select E'\\';'", "select 3"]),
        ("   ;;  ", []),
        ("-- only a comment", []),
        ("SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL;",
         ["SELECT pg_advisory_unlock_all()", "CLOSE ALL", "UNLISTEN *", "RESET ALL"]),
    ],
)
def test_split(sql, expected):
    assert split_statements(sql) == expected


@pytest.mark.parametrize(
    "sql,kind,name,value",
    [
        ("SET DateStyle = 'ISO'", Kind.SET, "datestyle", "ISO"),
        ("set client_encoding to 'utf-8'", Kind.SET, "client_encoding", "utf-8"),
        ("SET TIME ZONE 'Europe/Paris'", Kind.SET, "timezone", "Europe/Paris"),
        ("SET TIMEZONE = UTC", Kind.SET, "timezone", "UTC"),
        ("SET search_path TO demo, public", Kind.SET, "search_path", "demo, public"),
        ("SET SESSION statement_timeout = 100", Kind.SET, "statement_timeout", "100"),
        # a double-quoted identifier is its text (pgcli: SET TIME ZONE "Etc/UTC"), except in a
        # list setting, which keeps it quoted as PostgreSQL does
        ('SET TIME ZONE "Etc/UTC"', Kind.SET, "timezone", "Etc/UTC"),
        ('SET timezone = "Etc/UTC"', Kind.SET, "timezone", "Etc/UTC"),
        ('SET search_path = "My Schema", public', Kind.SET, "search_path", '"My Schema", public'),
        ("SET application_name = DEFAULT", Kind.SET, "application_name", None),
        ("show transaction isolation level", Kind.SHOW, "transaction_isolation", None),
        ("SHOW standard_conforming_strings", Kind.SHOW, "standard_conforming_strings", None),
        ("RESET ALL", Kind.RESET, None, None),
        ("BEGIN", Kind.BEGIN, None, None),
        ("START TRANSACTION ISOLATION LEVEL REPEATABLE READ", Kind.BEGIN, None, "repeatable read"),
        ("COMMIT", Kind.COMMIT, None, None),
        ("END", Kind.COMMIT, None, None),
        ("ABORT", Kind.ROLLBACK, None, None),
        ("ROLLBACK TO SAVEPOINT _pg3_1", Kind.ROLLBACK_TO, "_pg3_1", None),
        ('SAVEPOINT "_pg3_1"', Kind.SAVEPOINT, "_pg3_1", None),
        ("RELEASE _per_query_svp_", Kind.RELEASE, "_per_query_svp_", None),
        ('DECLARE "c" CURSOR WITHOUT HOLD FOR SELECT 1', Kind.DECLARE, "c", "SELECT 1"),
        ('FETCH FORWARD 100 FROM "c"', Kind.FETCH, "c", "FORWARD 100"),
        ("MOVE 5 IN c", Kind.MOVE, "c", "5"),
        ("CLOSE ALL", Kind.CLOSE, None, None),
        ("DEALLOCATE _PLAN0x1", Kind.DEALLOCATE, "_plan0x1", None),
        ("DISCARD ALL", Kind.DISCARD, None, "ALL"),
        ("UNLISTEN *", Kind.LISTEN, None, None),
        ("select 1", Kind.QUERY, None, None),
        ("  -- hi\n WITH x AS (select 1) select * from x", Kind.QUERY, None, None),
        ("insert into t values (1)", Kind.WRITE, None, None),
        ("frobnicate", Kind.UNSUPPORTED, None, None),
    ],
)
def test_classify(sql, kind, name, value):
    st = classify(sql)
    assert st.kind is kind
    assert st.name == name
    if value is not None or kind in (Kind.SET,):
        assert st.value == value


def test_copy_options():
    st = classify("COPY (select 1) TO STDOUT WITH (FORMAT csv, HEADER true, DELIMITER ';')")
    assert st.kind is Kind.COPY_TO
    assert st.value == "(select 1)"
    assert dict(st.options) == {"format": "csv", "header": "true", "delimiter": ";"}
    legacy = classify("COPY demo.cities TO STDOUT CSV HEADER")
    assert legacy.value == "demo.cities" and dict(legacy.options) == {"format": "csv", "header": "true"}
