"""pg_catalog and information_schema, built from the live lakehouse as Arrow tables.

Every Postgres client learns what a database holds by querying the system catalogs (CLIENTS.md:
pg_attribute, pg_class, pg_namespace and pg_type are read by 7 of 10 client families). icegres has
no catalog of its own, so each time the lakehouse changes the engine hands `register_catalog` a
`CatalogSnapshot` and gets back PostgreSQL 15 shaped relations in the DataFusion schemas
`pg_catalog` and `information_schema`. Column names and meanings follow PostgreSQL 15; OIDs are
Int64, `"char"`/`name` are text, arrays are Arrow lists, and int2vector/oidvector columns (indkey,
indclass, ...) are lists too but PostgreSQL subscripts them from 0 (engine/rewrite knows).

OIDs: system objects keep PostgreSQL's own (pg_class = 1259, int8 = 20, public = 2200) because
clients hard-code some of them (psqlODBC asks for `c.oid = 1259`). Lakehouse objects get OIDs
derived from their names, so they are stable across restarts and equal on every server of a
fleet; the rare crc32 collision is settled deterministically by `_allocate`.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from icegres.pg.types import pg_type_for_arrow

if TYPE_CHECKING:
    import datafusion

# --- the snapshot the engine hands us -----------------------------------------------------------


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    arrow_type: pa.DataType
    nullable: bool
    field_id: int
    comment: str = ""  # COMMENT ON COLUMN: the Iceberg field's doc


@dataclass(frozen=True)
class TableInfo:
    schema: str
    name: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...] = ()
    comment: str = ""  # COMMENT ON TABLE: the Iceberg table's `comment` property


@dataclass(frozen=True)
class CatalogSnapshot:
    database: str
    user: str
    schemas: tuple[str, ...]
    tables: tuple[TableInfo, ...]

    @cached_property
    def index(self) -> CatalogIndex:
        """Every object of this snapshot with its OID (collisions settled)."""
        return CatalogIndex(self)

    def relation_oid(self, schema: str, name: str) -> int | None:
        """The OID of relation schema.name in this snapshot, or None if there is none."""
        entry = self.index.relations.get((schema, name))
        return entry.oid if entry else None


# --- OIDs ---------------------------------------------------------------------------------------

FIRST_NORMAL_OID = 16384  # PostgreSQL's FirstNormalObjectId: below it lives the system
_OID_LIMIT = 2**31  # stay positive in an int4, which is how some clients read OIDs
BOOTSTRAP_SUPERUSER_OID = 10
PG_CATALOG_OID = 11
PG_CLASS_OID = 1259  # pg_description.classoid of a relation's comment
PG_TOAST_OID = 99
PUBLIC_OID = 2200
INFORMATION_SCHEMA_OID = 13207  # PostgreSQL 15's value (it varies by build; no client relies on it)
DEFAULT_COLLATION_OID = 100
HEAP_AM_OID = 2
BTREE_AM_OID = 403
_FIXED_NAMESPACES = {
    "pg_catalog": PG_CATALOG_OID,
    "pg_toast": PG_TOAST_OID,
    "public": PUBLIC_OID,
    "information_schema": INFORMATION_SCHEMA_OID,
}


def _stable_oid(key: str) -> int:
    return FIRST_NORMAL_OID + zlib.crc32(key.encode()) % (_OID_LIMIT - FIRST_NORMAL_OID)


def relation_oid(schema: str, name: str) -> int:
    """The OID of relation schema.name: stable across restarts, in [16384, 2**31).

    System relations answer with PostgreSQL's own OIDs. For a lakehouse relation this is the OID
    the most recently registered catalog gave it (which differs from the plain name hash only in
    the rare case of a crc32 collision), else the name hash.
    """
    fixed = _SYSTEM_RELATION_OIDS.get((schema, name))
    if fixed is not None:
        return fixed
    latest = _LATEST.snapshot
    if latest is not None:
        found = latest.relation_oid(schema, name)
        if found is not None:
            return found
    return _stable_oid(f"relation:{schema}.{name}")


def _allocate(keys: Iterable[str], taken: set[int]) -> dict[str, int]:
    """OIDs for keys: each its name hash unless taken, then the next free one, in key order.

    Processing keys sorted makes the outcome independent of listing order; only a colliding key
    that sorts later ever moves.
    """
    out: dict[str, int] = {}
    for key in sorted(set(keys)):
        oid = _stable_oid(key)
        while oid in taken:
            oid = oid + 1 if oid + 1 < _OID_LIMIT else FIRST_NORMAL_OID
        taken.add(oid)
        out[key] = oid
    return out


# --- builtin types (generated from PostgreSQL 15.18's pg_type) ----------------------------------


@dataclass(frozen=True)
class BuiltinType:
    oid: int
    typname: str
    typlen: int
    typbyval: bool
    typtype: str
    typcategory: str
    typispreferred: bool
    typdelim: str
    typelem: int
    typarray: int
    typinput: str
    typoutput: str
    typreceive: str
    typsend: str
    typalign: str
    typstorage: str
    typcollation: int
    sql_name: str  # format_type(oid, NULL)


# oid|typname|typlen|typbyval|typtype|typcategory|typispreferred|typdelim|typelem|typarray|
# typinput|typoutput|typreceive|typsend|typalign|typstorage|typcollation|format_type(oid, NULL)
_TYPES_TABLE = """
16|bool|1|t|b|B|t|,|0|1000|boolin|boolout|boolrecv|boolsend|c|p|0|boolean
17|bytea|-1|f|b|U|f|,|0|1001|byteain|byteaout|bytearecv|byteasend|i|x|0|bytea
18|char|1|t|b|Z|f|,|0|1002|charin|charout|charrecv|charsend|c|p|0|"char"
19|name|64|f|b|S|f|,|18|1003|namein|nameout|namerecv|namesend|c|p|950|name
20|int8|8|t|b|N|f|,|0|1016|int8in|int8out|int8recv|int8send|d|p|0|bigint
21|int2|2|t|b|N|f|,|0|1005|int2in|int2out|int2recv|int2send|s|p|0|smallint
22|int2vector|-1|f|b|A|f|,|21|1006|int2vectorin|int2vectorout|int2vectorrecv|int2vectorsend|i|p|0|int2vector
23|int4|4|t|b|N|f|,|0|1007|int4in|int4out|int4recv|int4send|i|p|0|integer
24|regproc|4|t|b|N|f|,|0|1008|regprocin|regprocout|regprocrecv|regprocsend|i|p|0|regproc
25|text|-1|f|b|S|t|,|0|1009|textin|textout|textrecv|textsend|i|x|100|text
26|oid|4|t|b|N|t|,|0|1028|oidin|oidout|oidrecv|oidsend|i|p|0|oid
27|tid|6|f|b|U|f|,|0|1010|tidin|tidout|tidrecv|tidsend|s|p|0|tid
28|xid|4|t|b|U|f|,|0|1011|xidin|xidout|xidrecv|xidsend|i|p|0|xid
29|cid|4|t|b|U|f|,|0|1012|cidin|cidout|cidrecv|cidsend|i|p|0|cid
30|oidvector|-1|f|b|A|f|,|26|1013|oidvectorin|oidvectorout|oidvectorrecv|oidvectorsend|i|p|0|oidvector
114|json|-1|f|b|U|f|,|0|199|json_in|json_out|json_recv|json_send|i|x|0|json
142|xml|-1|f|b|U|f|,|0|143|xml_in|xml_out|xml_recv|xml_send|i|x|0|xml
143|_xml|-1|f|b|A|f|,|142|0|array_in|array_out|array_recv|array_send|i|x|0|xml[]
194|pg_node_tree|-1|f|b|Z|f|,|0|0|pg_node_tree_in|pg_node_tree_out|pg_node_tree_recv|pg_node_tree_send|i|x|100|pg_node_tree
199|_json|-1|f|b|A|f|,|114|0|array_in|array_out|array_recv|array_send|i|x|0|json[]
271|_xid8|-1|f|b|A|f|,|5069|0|array_in|array_out|array_recv|array_send|d|x|0|xid8[]
600|point|16|f|b|G|f|,|701|1017|point_in|point_out|point_recv|point_send|d|p|0|point
601|lseg|32|f|b|G|f|,|600|1018|lseg_in|lseg_out|lseg_recv|lseg_send|d|p|0|lseg
602|path|-1|f|b|G|f|,|0|1019|path_in|path_out|path_recv|path_send|d|x|0|path
603|box|32|f|b|G|f|;|600|1020|box_in|box_out|box_recv|box_send|d|p|0|box
604|polygon|-1|f|b|G|f|,|0|1027|poly_in|poly_out|poly_recv|poly_send|d|x|0|polygon
628|line|24|f|b|G|f|,|701|629|line_in|line_out|line_recv|line_send|d|p|0|line
629|_line|-1|f|b|A|f|,|628|0|array_in|array_out|array_recv|array_send|d|x|0|line[]
650|cidr|-1|f|b|I|f|,|0|651|cidr_in|cidr_out|cidr_recv|cidr_send|i|m|0|cidr
651|_cidr|-1|f|b|A|f|,|650|0|array_in|array_out|array_recv|array_send|i|x|0|cidr[]
700|float4|4|t|b|N|f|,|0|1021|float4in|float4out|float4recv|float4send|i|p|0|real
701|float8|8|t|b|N|t|,|0|1022|float8in|float8out|float8recv|float8send|d|p|0|double precision
705|unknown|-2|f|p|X|f|,|0|0|unknownin|unknownout|unknownrecv|unknownsend|c|p|0|unknown
718|circle|24|f|b|G|f|,|0|719|circle_in|circle_out|circle_recv|circle_send|d|p|0|circle
719|_circle|-1|f|b|A|f|,|718|0|array_in|array_out|array_recv|array_send|d|x|0|circle[]
774|macaddr8|8|f|b|U|f|,|0|775|macaddr8_in|macaddr8_out|macaddr8_recv|macaddr8_send|i|p|0|macaddr8
775|_macaddr8|-1|f|b|A|f|,|774|0|array_in|array_out|array_recv|array_send|i|x|0|macaddr8[]
790|money|8|t|b|N|f|,|0|791|cash_in|cash_out|cash_recv|cash_send|d|p|0|money
791|_money|-1|f|b|A|f|,|790|0|array_in|array_out|array_recv|array_send|d|x|0|money[]
829|macaddr|6|f|b|U|f|,|0|1040|macaddr_in|macaddr_out|macaddr_recv|macaddr_send|i|p|0|macaddr
869|inet|-1|f|b|I|t|,|0|1041|inet_in|inet_out|inet_recv|inet_send|i|m|0|inet
1000|_bool|-1|f|b|A|f|,|16|0|array_in|array_out|array_recv|array_send|i|x|0|boolean[]
1001|_bytea|-1|f|b|A|f|,|17|0|array_in|array_out|array_recv|array_send|i|x|0|bytea[]
1002|_char|-1|f|b|A|f|,|18|0|array_in|array_out|array_recv|array_send|i|x|0|"char"[]
1003|_name|-1|f|b|A|f|,|19|0|array_in|array_out|array_recv|array_send|i|x|950|name[]
1005|_int2|-1|f|b|A|f|,|21|0|array_in|array_out|array_recv|array_send|i|x|0|smallint[]
1006|_int2vector|-1|f|b|A|f|,|22|0|array_in|array_out|array_recv|array_send|i|x|0|int2vector[]
1007|_int4|-1|f|b|A|f|,|23|0|array_in|array_out|array_recv|array_send|i|x|0|integer[]
1008|_regproc|-1|f|b|A|f|,|24|0|array_in|array_out|array_recv|array_send|i|x|0|regproc[]
1009|_text|-1|f|b|A|f|,|25|0|array_in|array_out|array_recv|array_send|i|x|100|text[]
1010|_tid|-1|f|b|A|f|,|27|0|array_in|array_out|array_recv|array_send|i|x|0|tid[]
1011|_xid|-1|f|b|A|f|,|28|0|array_in|array_out|array_recv|array_send|i|x|0|xid[]
1012|_cid|-1|f|b|A|f|,|29|0|array_in|array_out|array_recv|array_send|i|x|0|cid[]
1013|_oidvector|-1|f|b|A|f|,|30|0|array_in|array_out|array_recv|array_send|i|x|0|oidvector[]
1014|_bpchar|-1|f|b|A|f|,|1042|0|array_in|array_out|array_recv|array_send|i|x|100|character[]
1015|_varchar|-1|f|b|A|f|,|1043|0|array_in|array_out|array_recv|array_send|i|x|100|character varying[]
1016|_int8|-1|f|b|A|f|,|20|0|array_in|array_out|array_recv|array_send|d|x|0|bigint[]
1017|_point|-1|f|b|A|f|,|600|0|array_in|array_out|array_recv|array_send|d|x|0|point[]
1018|_lseg|-1|f|b|A|f|,|601|0|array_in|array_out|array_recv|array_send|d|x|0|lseg[]
1019|_path|-1|f|b|A|f|,|602|0|array_in|array_out|array_recv|array_send|d|x|0|path[]
1020|_box|-1|f|b|A|f|;|603|0|array_in|array_out|array_recv|array_send|d|x|0|box[]
1021|_float4|-1|f|b|A|f|,|700|0|array_in|array_out|array_recv|array_send|i|x|0|real[]
1022|_float8|-1|f|b|A|f|,|701|0|array_in|array_out|array_recv|array_send|d|x|0|double precision[]
1027|_polygon|-1|f|b|A|f|,|604|0|array_in|array_out|array_recv|array_send|d|x|0|polygon[]
1028|_oid|-1|f|b|A|f|,|26|0|array_in|array_out|array_recv|array_send|i|x|0|oid[]
1033|aclitem|12|f|b|U|f|,|0|1034|aclitemin|aclitemout|-|-|i|p|0|aclitem
1034|_aclitem|-1|f|b|A|f|,|1033|0|array_in|array_out|array_recv|array_send|i|x|0|aclitem[]
1040|_macaddr|-1|f|b|A|f|,|829|0|array_in|array_out|array_recv|array_send|i|x|0|macaddr[]
1041|_inet|-1|f|b|A|f|,|869|0|array_in|array_out|array_recv|array_send|i|x|0|inet[]
1042|bpchar|-1|f|b|S|f|,|0|1014|bpcharin|bpcharout|bpcharrecv|bpcharsend|i|x|100|character
1043|varchar|-1|f|b|S|f|,|0|1015|varcharin|varcharout|varcharrecv|varcharsend|i|x|100|character varying
1082|date|4|t|b|D|f|,|0|1182|date_in|date_out|date_recv|date_send|i|p|0|date
1083|time|8|t|b|D|f|,|0|1183|time_in|time_out|time_recv|time_send|d|p|0|time without time zone
1114|timestamp|8|t|b|D|f|,|0|1115|timestamp_in|timestamp_out|timestamp_recv|timestamp_send|d|p|0|timestamp without time zone
1115|_timestamp|-1|f|b|A|f|,|1114|0|array_in|array_out|array_recv|array_send|d|x|0|timestamp without time zone[]
1182|_date|-1|f|b|A|f|,|1082|0|array_in|array_out|array_recv|array_send|i|x|0|date[]
1183|_time|-1|f|b|A|f|,|1083|0|array_in|array_out|array_recv|array_send|d|x|0|time without time zone[]
1184|timestamptz|8|t|b|D|t|,|0|1185|timestamptz_in|timestamptz_out|timestamptz_recv|timestamptz_send|d|p|0|timestamp with time zone
1185|_timestamptz|-1|f|b|A|f|,|1184|0|array_in|array_out|array_recv|array_send|d|x|0|timestamp with time zone[]
1186|interval|16|f|b|T|t|,|0|1187|interval_in|interval_out|interval_recv|interval_send|d|p|0|interval
1187|_interval|-1|f|b|A|f|,|1186|0|array_in|array_out|array_recv|array_send|d|x|0|interval[]
1231|_numeric|-1|f|b|A|f|,|1700|0|array_in|array_out|array_recv|array_send|i|x|0|numeric[]
1263|_cstring|-1|f|b|A|f|,|2275|0|array_in|array_out|array_recv|array_send|i|x|0|cstring[]
1266|timetz|12|f|b|D|f|,|0|1270|timetz_in|timetz_out|timetz_recv|timetz_send|d|p|0|time with time zone
1270|_timetz|-1|f|b|A|f|,|1266|0|array_in|array_out|array_recv|array_send|d|x|0|time with time zone[]
1560|bit|-1|f|b|V|f|,|0|1561|bit_in|bit_out|bit_recv|bit_send|i|x|0|bit
1561|_bit|-1|f|b|A|f|,|1560|0|array_in|array_out|array_recv|array_send|i|x|0|bit[]
1562|varbit|-1|f|b|V|t|,|0|1563|varbit_in|varbit_out|varbit_recv|varbit_send|i|x|0|bit varying
1563|_varbit|-1|f|b|A|f|,|1562|0|array_in|array_out|array_recv|array_send|i|x|0|bit varying[]
1700|numeric|-1|f|b|N|f|,|0|1231|numeric_in|numeric_out|numeric_recv|numeric_send|i|m|0|numeric
1790|refcursor|-1|f|b|U|f|,|0|2201|textin|textout|textrecv|textsend|i|x|0|refcursor
2201|_refcursor|-1|f|b|A|f|,|1790|0|array_in|array_out|array_recv|array_send|i|x|0|refcursor[]
2202|regprocedure|4|t|b|N|f|,|0|2207|regprocedurein|regprocedureout|regprocedurerecv|regproceduresend|i|p|0|regprocedure
2203|regoper|4|t|b|N|f|,|0|2208|regoperin|regoperout|regoperrecv|regopersend|i|p|0|regoper
2204|regoperator|4|t|b|N|f|,|0|2209|regoperatorin|regoperatorout|regoperatorrecv|regoperatorsend|i|p|0|regoperator
2205|regclass|4|t|b|N|f|,|0|2210|regclassin|regclassout|regclassrecv|regclasssend|i|p|0|regclass
2206|regtype|4|t|b|N|f|,|0|2211|regtypein|regtypeout|regtyperecv|regtypesend|i|p|0|regtype
2207|_regprocedure|-1|f|b|A|f|,|2202|0|array_in|array_out|array_recv|array_send|i|x|0|regprocedure[]
2208|_regoper|-1|f|b|A|f|,|2203|0|array_in|array_out|array_recv|array_send|i|x|0|regoper[]
2209|_regoperator|-1|f|b|A|f|,|2204|0|array_in|array_out|array_recv|array_send|i|x|0|regoperator[]
2210|_regclass|-1|f|b|A|f|,|2205|0|array_in|array_out|array_recv|array_send|i|x|0|regclass[]
2211|_regtype|-1|f|b|A|f|,|2206|0|array_in|array_out|array_recv|array_send|i|x|0|regtype[]
2249|record|-1|f|p|P|f|,|0|2287|record_in|record_out|record_recv|record_send|d|x|0|record
2275|cstring|-2|f|p|P|f|,|0|1263|cstring_in|cstring_out|cstring_recv|cstring_send|c|p|0|cstring
2276|any|4|t|p|P|f|,|0|0|any_in|any_out|-|-|i|p|0|"any"
2277|anyarray|-1|f|p|P|f|,|0|0|anyarray_in|anyarray_out|anyarray_recv|anyarray_send|d|x|0|anyarray
2278|void|4|t|p|P|f|,|0|0|void_in|void_out|void_recv|void_send|i|p|0|void
2279|trigger|4|t|p|P|f|,|0|0|trigger_in|trigger_out|-|-|i|p|0|trigger
2283|anyelement|4|t|p|P|f|,|0|0|anyelement_in|anyelement_out|-|-|i|p|0|anyelement
2287|_record|-1|f|p|P|f|,|2249|0|array_in|array_out|array_recv|array_send|d|x|0|record[]
2776|anynonarray|4|t|p|P|f|,|0|0|anynonarray_in|anynonarray_out|-|-|i|p|0|anynonarray
2950|uuid|16|f|b|U|f|,|0|2951|uuid_in|uuid_out|uuid_recv|uuid_send|c|p|0|uuid
2951|_uuid|-1|f|b|A|f|,|2950|0|array_in|array_out|array_recv|array_send|i|x|0|uuid[]
2970|txid_snapshot|-1|f|b|U|f|,|0|2949|txid_snapshot_in|txid_snapshot_out|txid_snapshot_recv|txid_snapshot_send|d|x|0|txid_snapshot
3220|pg_lsn|8|t|b|U|f|,|0|3221|pg_lsn_in|pg_lsn_out|pg_lsn_recv|pg_lsn_send|d|p|0|pg_lsn
3221|_pg_lsn|-1|f|b|A|f|,|3220|0|array_in|array_out|array_recv|array_send|d|x|0|pg_lsn[]
3500|anyenum|4|t|p|P|f|,|0|0|anyenum_in|anyenum_out|-|-|i|p|0|anyenum
3614|tsvector|-1|f|b|U|f|,|0|3643|tsvectorin|tsvectorout|tsvectorrecv|tsvectorsend|i|x|0|tsvector
3615|tsquery|-1|f|b|U|f|,|0|3645|tsqueryin|tsqueryout|tsqueryrecv|tsquerysend|i|p|0|tsquery
3643|_tsvector|-1|f|b|A|f|,|3614|0|array_in|array_out|array_recv|array_send|i|x|0|tsvector[]
3645|_tsquery|-1|f|b|A|f|,|3615|0|array_in|array_out|array_recv|array_send|i|x|0|tsquery[]
3734|regconfig|4|t|b|N|f|,|0|3735|regconfigin|regconfigout|regconfigrecv|regconfigsend|i|p|0|regconfig
3769|regdictionary|4|t|b|N|f|,|0|3770|regdictionaryin|regdictionaryout|regdictionaryrecv|regdictionarysend|i|p|0|regdictionary
3802|jsonb|-1|f|b|U|f|,|0|3807|jsonb_in|jsonb_out|jsonb_recv|jsonb_send|i|x|0|jsonb
3807|_jsonb|-1|f|b|A|f|,|3802|0|array_in|array_out|array_recv|array_send|i|x|0|jsonb[]
3904|int4range|-1|f|r|R|f|,|0|3905|range_in|range_out|range_recv|range_send|i|x|0|int4range
3905|_int4range|-1|f|b|A|f|,|3904|0|array_in|array_out|array_recv|array_send|i|x|0|int4range[]
3906|numrange|-1|f|r|R|f|,|0|3907|range_in|range_out|range_recv|range_send|i|x|0|numrange
3907|_numrange|-1|f|b|A|f|,|3906|0|array_in|array_out|array_recv|array_send|i|x|0|numrange[]
3908|tsrange|-1|f|r|R|f|,|0|3909|range_in|range_out|range_recv|range_send|d|x|0|tsrange
3909|_tsrange|-1|f|b|A|f|,|3908|0|array_in|array_out|array_recv|array_send|d|x|0|tsrange[]
3910|tstzrange|-1|f|r|R|f|,|0|3911|range_in|range_out|range_recv|range_send|d|x|0|tstzrange
3911|_tstzrange|-1|f|b|A|f|,|3910|0|array_in|array_out|array_recv|array_send|d|x|0|tstzrange[]
3912|daterange|-1|f|r|R|f|,|0|3913|range_in|range_out|range_recv|range_send|i|x|0|daterange
3913|_daterange|-1|f|b|A|f|,|3912|0|array_in|array_out|array_recv|array_send|i|x|0|daterange[]
3926|int8range|-1|f|r|R|f|,|0|3927|range_in|range_out|range_recv|range_send|d|x|0|int8range
3927|_int8range|-1|f|b|A|f|,|3926|0|array_in|array_out|array_recv|array_send|d|x|0|int8range[]
4072|jsonpath|-1|f|b|U|f|,|0|4073|jsonpath_in|jsonpath_out|jsonpath_recv|jsonpath_send|i|x|0|jsonpath
4073|_jsonpath|-1|f|b|A|f|,|4072|0|array_in|array_out|array_recv|array_send|i|x|0|jsonpath[]
4089|regnamespace|4|t|b|N|f|,|0|4090|regnamespacein|regnamespaceout|regnamespacerecv|regnamespacesend|i|p|0|regnamespace
4090|_regnamespace|-1|f|b|A|f|,|4089|0|array_in|array_out|array_recv|array_send|i|x|0|regnamespace[]
4096|regrole|4|t|b|N|f|,|0|4097|regrolein|regroleout|regrolerecv|regrolesend|i|p|0|regrole
4097|_regrole|-1|f|b|A|f|,|4096|0|array_in|array_out|array_recv|array_send|i|x|0|regrole[]
5069|xid8|8|t|b|U|f|,|0|271|xid8in|xid8out|xid8recv|xid8send|d|p|0|xid8
"""


def _parse_types(table: str) -> dict[int, BuiltinType]:
    out: dict[int, BuiltinType] = {}
    for line in table.strip().splitlines():
        f = line.split("|")
        out[int(f[0])] = BuiltinType(
            int(f[0]), f[1], int(f[2]), f[3] == "t", f[4], f[5], f[6] == "t", f[7], int(f[8]),
            int(f[9]), f[10], f[11], f[12], f[13], f[14], f[15], int(f[16]), f[17],
        )
    return out


BUILTIN_TYPES: dict[int, BuiltinType] = _parse_types(_TYPES_TABLE)

# Names PostgreSQL's type-name parser accepts besides typname (for ::regtype and to_regtype()).
_TYPE_ALIASES = {
    "int": 23, "integer": 23, "smallint": 21, "bigint": 20, "real": 700, "float": 701,
    "double precision": 701, "boolean": 16, "character varying": 1043, "character": 1042,
    "char": 1042, "decimal": 1700, "dec": 1700, "timestamp without time zone": 1114,
    "timestamp with time zone": 1184, "time without time zone": 1083,
    "time with time zone": 1266, "bit varying": 1562, '"char"': 18,
}


def type_oid_by_name(name: str) -> int | None:
    """Resolve a type name the way ::regtype does (builtin types only; 'text[]' works too)."""
    text = " ".join(name.strip().lower().split())
    for prefix in ("pg_catalog.", '"pg_catalog".'):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if text.endswith("[]"):
        elem = BUILTIN_TYPES.get(type_oid_by_name(text[:-2]) or 0)
        return elem.typarray if elem is not None and elem.typarray else None
    if text in _TYPE_ALIASES:
        return _TYPE_ALIASES[text]
    text = text.strip('"')
    return _TYPE_OIDS_BY_NAME.get(text)


_TYPE_OIDS_BY_NAME = {t.typname: t.oid for t in BUILTIN_TYPES.values()}


def format_type(oid: int, typmod: int | None) -> str | None:
    """PostgreSQL's format_type(oid, typmod): the SQL spelling of a type, with its modifier."""
    t = BUILTIN_TYPES.get(oid)
    if t is None:
        return "???"
    if t.typcategory == "A" and t.typelem in BUILTIN_TYPES:
        return f"{format_type(t.typelem, typmod)}[]"
    if typmod is None and oid == 1042:
        return "bpchar"  # format_type(1042, NULL) is special-cased the same way in PostgreSQL
    modifier = _TYPMOD_FORMATTERS.get(oid)
    if modifier is None or typmod is None or typmod < 0:
        return t.sql_name
    return modifier(t.sql_name, typmod)


def _with_precision(sql_name: str, typmod: int) -> str:
    # timestamp(3) with time zone: the precision goes after the first word
    head, _, tail = sql_name.partition(" ")
    return f"{head}({typmod}) {tail}".rstrip()


def _numeric_typmod(sql_name: str, typmod: int) -> str:
    value = typmod - 4
    return f"{sql_name}({(value >> 16) & 0xFFFF},{value & 0xFFFF})"


_TYPMOD_FORMATTERS: dict[int, Callable[[str, int], str]] = {
    1700: _numeric_typmod,
    1043: lambda name, typmod: f"{name}({typmod - 4})",
    1042: lambda name, typmod: f"{name}({typmod - 4})",
    1560: lambda name, typmod: f"{name}({typmod})",
    1562: lambda name, typmod: f"{name}({typmod})",
    1114: _with_precision,
    1184: _with_precision,
    1083: _with_precision,
    1266: _with_precision,
}


def arrow_typmod(dt: pa.DataType) -> int:
    """The atttypmod PostgreSQL would store for a column of this Arrow type."""
    if pa.types.is_decimal(dt):
        return ((dt.precision << 16) | dt.scale) + 4
    return -1


# --- functions pg_proc lists (generated from PostgreSQL 15.18's pg_proc) ------------------------

# oid|proname|prokind|provolatile|prorettype|proargtypes|proretset
_PROCS_TABLE = """
2091|array_lower|f|i|23|2277,23|f
2092|array_upper|f|i|23|2277,23|f
1216|col_description|f|s|25|26,23|f
861|current_database|f|s|19||f
1402|current_schema|f|s|19||f
1403|current_schemas|f|s|1003|16|f
2077|current_setting|f|s|25|25|f
3294|current_setting|f|s|25|25,16|f
745|current_user|f|s|19||f
1081|format_type|f|s|25|26,23|f
1191|generate_subscripts|f|i|23|2277,23,16|t
1192|generate_subscripts|f|i|23|2277,23|t
3024|has_any_column_privilege|f|s|16|19,25,25|f
3025|has_any_column_privilege|f|s|16|19,26,25|f
3026|has_any_column_privilege|f|s|16|26,25,25|f
3027|has_any_column_privilege|f|s|16|26,26,25|f
3028|has_any_column_privilege|f|s|16|25,25|f
3029|has_any_column_privilege|f|s|16|26,25|f
3012|has_column_privilege|f|s|16|19,25,25,25|f
3013|has_column_privilege|f|s|16|19,25,21,25|f
3014|has_column_privilege|f|s|16|19,26,25,25|f
3015|has_column_privilege|f|s|16|19,26,21,25|f
3016|has_column_privilege|f|s|16|26,25,25,25|f
3017|has_column_privilege|f|s|16|26,25,21,25|f
3018|has_column_privilege|f|s|16|26,26,25,25|f
3019|has_column_privilege|f|s|16|26,26,21,25|f
3020|has_column_privilege|f|s|16|25,25,25|f
3021|has_column_privilege|f|s|16|25,21,25|f
3022|has_column_privilege|f|s|16|26,25,25|f
3023|has_column_privilege|f|s|16|26,21,25|f
2250|has_database_privilege|f|s|16|19,25,25|f
2251|has_database_privilege|f|s|16|19,26,25|f
2252|has_database_privilege|f|s|16|26,25,25|f
2253|has_database_privilege|f|s|16|26,26,25|f
2254|has_database_privilege|f|s|16|25,25|f
2255|has_database_privilege|f|s|16|26,25|f
2256|has_function_privilege|f|s|16|19,25,25|f
2257|has_function_privilege|f|s|16|19,26,25|f
2258|has_function_privilege|f|s|16|26,25,25|f
2259|has_function_privilege|f|s|16|26,26,25|f
2260|has_function_privilege|f|s|16|25,25|f
2261|has_function_privilege|f|s|16|26,25|f
2268|has_schema_privilege|f|s|16|19,25,25|f
2269|has_schema_privilege|f|s|16|19,26,25|f
2270|has_schema_privilege|f|s|16|26,25,25|f
2271|has_schema_privilege|f|s|16|26,26,25|f
2272|has_schema_privilege|f|s|16|25,25|f
2273|has_schema_privilege|f|s|16|26,25|f
1922|has_table_privilege|f|s|16|19,25,25|f
1923|has_table_privilege|f|s|16|19,26,25|f
1924|has_table_privilege|f|s|16|26,25,25|f
1925|has_table_privilege|f|s|16|26,26,25|f
1926|has_table_privilege|f|s|16|25,25|f
1927|has_table_privilege|f|s|16|26,25|f
2198|inet_server_addr|f|s|869||f
2199|inet_server_port|f|s|23||f
3200|json_build_object|f|s|114|2276|f
3201|json_build_object|f|s|114||f
1215|obj_description|f|s|25|26,19|f
1348|obj_description|f|s|25|26|f
2892|pg_advisory_unlock_all|f|v|2278||f
2026|pg_backend_pid|f|s|23||f
2171|pg_cancel_backend|f|v|16|23|f
3815|pg_collation_is_visible|f|s|16|26|f
1269|pg_column_size|f|s|23|2276|f
2093|pg_conversion_is_visible|f|s|16|26|f
1597|pg_encoding_to_char|f|s|19|23|f
2081|pg_function_is_visible|f|s|16|26|f
1387|pg_get_constraintdef|f|s|25|26|f
2508|pg_get_constraintdef|f|s|25|26,16|f
1716|pg_get_expr|f|s|25|194,26|f
2509|pg_get_expr|f|s|25|194,26,16|f
2162|pg_get_function_arguments|f|s|25|26|f
2165|pg_get_function_result|f|s|25|26|f
2098|pg_get_functiondef|f|s|25|26|f
1643|pg_get_indexdef|f|s|25|26|f
2507|pg_get_indexdef|f|s|25|26,23,16|f
1686|pg_get_keywords|f|s|2249||t
3352|pg_get_partkeydef|f|s|25|26|f
1573|pg_get_ruledef|f|s|25|26|f
2504|pg_get_ruledef|f|s|25|26,16|f
1665|pg_get_serial_sequence|f|s|25|25,25|f
6174|pg_get_statisticsobjdef_columns|f|s|25|26|f
1662|pg_get_triggerdef|f|s|25|26|f
2730|pg_get_triggerdef|f|s|25|26,16|f
1642|pg_get_userbyid|f|s|19|26|f
1640|pg_get_viewdef|f|s|25|25|f
1641|pg_get_viewdef|f|s|25|26|f
2505|pg_get_viewdef|f|s|25|25,16|f
2506|pg_get_viewdef|f|s|25|26,16|f
3159|pg_get_viewdef|f|s|25|26,23|f
2998|pg_indexes_size|f|v|20|2205|f
3810|pg_is_in_recovery|f|v|16||f
2854|pg_my_temp_schema|f|s|26||f
2083|pg_opclass_is_visible|f|s|16|26|f
2082|pg_operator_is_visible|f|s|16|26|f
2560|pg_postmaster_start_time|f|s|1184||f
6121|pg_relation_is_publishable|f|s|16|2205|f
2325|pg_relation_size|f|v|20|2205|f
2332|pg_relation_size|f|v|20|2205,25|f
2288|pg_size_pretty|f|i|25|20|f
3166|pg_size_pretty|f|i|25|1700|f
2626|pg_sleep|f|v|2278|701|f
3403|pg_statistics_obj_is_visible|f|s|16|26|f
2079|pg_table_is_visible|f|s|16|26|f
2997|pg_table_size|f|v|20|2205|f
2096|pg_terminate_backend|f|v|16|23,20|f
2286|pg_total_relation_size|f|v|20|2205|f
3758|pg_ts_config_is_visible|f|s|16|26|f
2080|pg_type_is_visible|f|s|16|26|f
1282|quote_ident|f|i|25|25|f
746|session_user|f|s|19||f
2078|set_config|f|v|25|25,25,16|f
1993|shobj_description|f|s|25|26,19|f
3495|to_regclass|f|s|2205|25|f
4086|to_regnamespace|f|s|4089|25|f
3493|to_regtype|f|s|2206|25|f
2943|txid_current|f|s|20||f
89|version|f|s|25||f
"""


@dataclass(frozen=True)
class BuiltinFunction:
    oid: int
    name: str
    kind: str
    volatile: str
    rettype: int
    argtypes: tuple[int, ...]
    retset: bool


def _parse_procs(table: str) -> tuple[BuiltinFunction, ...]:
    out = []
    for line in table.strip().splitlines():
        oid, name, kind, volatile, rettype, argtypes, retset = line.split("|")
        args = tuple(int(a) for a in argtypes.split(",") if a)
        out.append(BuiltinFunction(int(oid), name, kind, volatile, int(rettype), args, retset == "t"))
    return tuple(out)


BUILTIN_FUNCTIONS: tuple[BuiltinFunction, ...] = _parse_procs(_PROCS_TABLE)

# --- relation definitions -----------------------------------------------------------------------

_LIST = pa.list_
_ARROW_BY_KIND: dict[str, pa.DataType] = {
    "oid": pa.int64(), "name": pa.string(), "text": pa.string(), "char": pa.string(),
    "bool": pa.bool_(), "int2": pa.int16(), "int4": pa.int32(), "int8": pa.int64(),
    "float4": pa.float32(), "float8": pa.float64(), "regproc": pa.string(), "node": pa.string(),
    "xid": pa.int64(), "timestamptz": pa.timestamp("us", tz="UTC"), "bytea": pa.binary(),
    "anyarray": pa.string(),
    "oid[]": _LIST(pa.int64()), "text[]": _LIST(pa.string()), "name[]": _LIST(pa.string()),
    "char[]": _LIST(pa.string()), "int2[]": _LIST(pa.int16()), "aclitem[]": _LIST(pa.string()),
    # int2vector / oidvector are 0-based in PostgreSQL; see ZERO_BASED_ARRAY_COLUMNS.
    "int2vector": _LIST(pa.int16()), "oidvector": _LIST(pa.int64()),
}

# The PostgreSQL type of catalog columns whose Arrow type alone would say otherwise (an OID is
# Int64 here, a name is text). Carried as Arrow field metadata, which DataFusion keeps through
# projections, joins and aliases, so the wire layer can describe and encode such a column as
# PostgreSQL does: psqlODBC splits pg_index.indkey's int2vector text ("1 2") on spaces.
PG_TYPE_OID_KEY = b"pg_type_oid"
_PG_TYPE_BY_KIND: dict[str, int] = {
    "oid": 26, "name": 19, "char": 18, "regproc": 24, "xid": 28, "node": 194,
    "int2vector": 22, "oidvector": 30, "oid[]": 1028, "name[]": 1003, "char[]": 1002,
    "aclitem[]": 1034,
}

# Columns a fresh row gets when its builder doesn't say: PostgreSQL's "nothing here" values.
_DEFAULT_BY_KIND: dict[str, Any] = {
    "oid": 0, "bool": False, "int2": 0, "int4": 0, "int8": 0, "float4": 0.0, "float8": 0.0,
    "char": "", "xid": 0,
}


@dataclass(frozen=True)
class RelationDef:
    schema: str
    name: str
    relkind: str  # 'r' table, 'v' view
    spec: str  # "column:kind ..." in PostgreSQL 15's column order
    fixed_oid: int | None = None

    @cached_property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return tuple(tuple(item.split(":", 1)) for item in self.spec.split())  # type: ignore[misc]

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([_catalog_field(name, kind) for name, kind in self.columns])

    @property
    def key(self) -> str:
        return f"{self.schema}.{self.name}"


def _catalog_field(name: str, kind: str) -> pa.Field:
    pg_oid = _PG_TYPE_BY_KIND.get(kind)
    metadata = {PG_TYPE_OID_KEY: str(pg_oid).encode()} if pg_oid is not None else None
    return pa.field(name, _ARROW_BY_KIND[kind], metadata=metadata)


def pg_type_oid(field: pa.Field) -> int:
    """The PostgreSQL type of a result column: its catalog annotation, else by Arrow type."""
    annotated = (field.metadata or {}).get(PG_TYPE_OID_KEY)
    return int(annotated) if annotated is not None else pg_type_for_arrow(field.type).oid


def _pg(name: str, oid: int, spec: str, relkind: str = "r") -> RelationDef:
    return RelationDef("pg_catalog", name, relkind, spec, oid)


def _info(name: str, spec: str) -> RelationDef:
    return RelationDef("information_schema", name, "v", spec)


_ACL = "aclitem[]"
RELATIONS: tuple[RelationDef, ...] = (
    _pg("pg_namespace", 2615, f"oid:oid nspname:name nspowner:oid nspacl:{_ACL}"),
    _pg("pg_class", 1259, "oid:oid relname:name relnamespace:oid reltype:oid reloftype:oid "
        "relowner:oid relam:oid relfilenode:oid reltablespace:oid relpages:int4 reltuples:float4 "
        "relallvisible:int4 reltoastrelid:oid relhasindex:bool relisshared:bool "
        "relpersistence:char relkind:char relnatts:int2 relchecks:int2 relhasrules:bool "
        "relhastriggers:bool relhassubclass:bool relrowsecurity:bool relforcerowsecurity:bool "
        "relispopulated:bool relreplident:char relispartition:bool relrewrite:oid "
        f"relfrozenxid:xid relminmxid:xid relacl:{_ACL} reloptions:text[] relpartbound:node"),
    _pg("pg_attribute", 1249, "attrelid:oid attname:name atttypid:oid attstattarget:int4 "
        "attlen:int2 attnum:int2 attndims:int4 attcacheoff:int4 atttypmod:int4 attbyval:bool "
        "attalign:char attstorage:char attcompression:char attnotnull:bool atthasdef:bool "
        "atthasmissing:bool attidentity:char attgenerated:char attisdropped:bool attislocal:bool "
        f"attinhcount:int4 attcollation:oid attacl:{_ACL} attoptions:text[] attfdwoptions:text[] "
        "attmissingval:anyarray"),
    _pg("pg_type", 1247, "oid:oid typname:name typnamespace:oid typowner:oid typlen:int2 "
        "typbyval:bool typtype:char typcategory:char typispreferred:bool typisdefined:bool "
        "typdelim:char typrelid:oid typsubscript:regproc typelem:oid typarray:oid "
        "typinput:regproc typoutput:regproc typreceive:regproc typsend:regproc typmodin:regproc "
        "typmodout:regproc typanalyze:regproc typalign:char typstorage:char typnotnull:bool "
        "typbasetype:oid typtypmod:int4 typndims:int4 typcollation:oid typdefaultbin:node "
        f"typdefault:text typacl:{_ACL}"),
    _pg("pg_attrdef", 2604, "oid:oid adrelid:oid adnum:int2 adbin:node"),
    _pg("pg_constraint", 2606, "oid:oid conname:name connamespace:oid contype:char "
        "condeferrable:bool condeferred:bool convalidated:bool conrelid:oid contypid:oid "
        "conindid:oid conparentid:oid confrelid:oid confupdtype:char confdeltype:char "
        "confmatchtype:char conislocal:bool coninhcount:int4 connoinherit:bool conkey:int2[] "
        "confkey:int2[] conpfeqop:oid[] conppeqop:oid[] conffeqop:oid[] confdelsetcols:int2[] "
        "conexclop:oid[] conbin:node"),
    _pg("pg_index", 2610, "indexrelid:oid indrelid:oid indnatts:int2 indnkeyatts:int2 "
        "indisunique:bool indnullsnotdistinct:bool indisprimary:bool indisexclusion:bool "
        "indimmediate:bool indisclustered:bool indisvalid:bool indcheckxmin:bool "
        "indisready:bool indislive:bool indisreplident:bool indkey:int2vector "
        "indcollation:oidvector indclass:oidvector indoption:int2vector indexprs:node "
        "indpred:node"),
    _pg("pg_am", 2601, "oid:oid amname:name amhandler:regproc amtype:char"),
    _pg("pg_collation", 3456, "oid:oid collname:name collnamespace:oid collowner:oid "
        "collprovider:char collisdeterministic:bool collencoding:int4 collcollate:text "
        "collctype:text colliculocale:text collversion:text"),
    _pg("pg_description", 2609, "objoid:oid classoid:oid objsubid:int4 description:text"),
    _pg("pg_shdescription", 2396, "objoid:oid classoid:oid description:text"),
    _pg("pg_inherits", 2611, "inhrelid:oid inhparent:oid inhseqno:int4 inhdetachpending:bool"),
    _pg("pg_opclass", 2616, "oid:oid opcmethod:oid opcname:name opcnamespace:oid opcowner:oid "
        "opcfamily:oid opcintype:oid opcdefault:bool opckeytype:oid"),
    _pg("pg_sequence", 2224, "seqrelid:oid seqtypid:oid seqstart:int8 seqincrement:int8 "
        "seqmax:int8 seqmin:int8 seqcache:int8 seqcycle:bool"),
    _pg("pg_database", 1262, "oid:oid datname:name datdba:oid encoding:int4 datlocprovider:char "
        "datistemplate:bool datallowconn:bool datconnlimit:int4 datfrozenxid:xid datminmxid:xid "
        "dattablespace:oid datcollate:text datctype:text daticulocale:text datcollversion:text "
        f"datacl:{_ACL}"),
    _pg("pg_authid", 1260, "oid:oid rolname:name rolsuper:bool rolinherit:bool "
        "rolcreaterole:bool rolcreatedb:bool rolcanlogin:bool rolreplication:bool "
        "rolbypassrls:bool rolconnlimit:int4 rolpassword:text rolvaliduntil:timestamptz"),
    _pg("pg_roles", 12000, "rolname:name rolsuper:bool rolinherit:bool rolcreaterole:bool "
        "rolcreatedb:bool rolcanlogin:bool rolreplication:bool rolconnlimit:int4 "
        "rolpassword:text rolvaliduntil:timestamptz rolbypassrls:bool rolconfig:text[] oid:oid",
        "v"),
    _pg("pg_user", 12014, "usename:name usesysid:oid usecreatedb:bool usesuper:bool "
        "userepl:bool usebypassrls:bool passwd:text valuntil:timestamptz useconfig:text[]", "v"),
    _pg("pg_auth_members", 1261, "roleid:oid member:oid grantor:oid admin_option:bool"),
    _pg("pg_policy", 3256, "oid:oid polname:name polrelid:oid polcmd:char polpermissive:bool "
        "polroles:oid[] polqual:node polwithcheck:node"),
    _pg("pg_trigger", 2620, "oid:oid tgrelid:oid tgparentid:oid tgname:name tgfoid:oid "
        "tgtype:int2 tgenabled:char tgisinternal:bool tgconstrrelid:oid tgconstrindid:oid "
        "tgconstraint:oid tgdeferrable:bool tginitdeferred:bool tgnargs:int2 tgattr:int2vector "
        "tgargs:bytea tgqual:node tgoldtable:name tgnewtable:name"),
    _pg("pg_rewrite", 2618, "oid:oid rulename:name ev_class:oid ev_type:char ev_enabled:char "
        "is_instead:bool ev_qual:node ev_action:node"),
    _pg("pg_depend", 2608, "classid:oid objid:oid objsubid:int4 refclassid:oid refobjid:oid "
        "refobjsubid:int4 deptype:char"),
    _pg("pg_statistic_ext", 3381, "oid:oid stxrelid:oid stxname:name stxnamespace:oid "
        "stxowner:oid stxstattarget:int4 stxkeys:int2vector stxkind:char[] stxexprs:node"),
    _pg("pg_publication", 6104, "oid:oid pubname:name pubowner:oid puballtables:bool "
        "pubinsert:bool pubupdate:bool pubdelete:bool pubtruncate:bool pubviaroot:bool"),
    _pg("pg_publication_rel", 6106, "oid:oid prpubid:oid prrelid:oid prqual:node "
        "prattrs:int2vector"),
    _pg("pg_publication_namespace", 6237, "oid:oid pnpubid:oid pnnspid:oid"),
    _pg("pg_publication_tables", 12068, "pubname:name schemaname:name tablename:name "
        "attnames:name[] rowfilter:text", "v"),
    _pg("pg_enum", 3501, "oid:oid enumtypid:oid enumsortorder:float4 enumlabel:name"),
    _pg("pg_range", 3541, "rngtypid:oid rngsubtype:oid rngmultitypid:oid rngcollation:oid "
        "rngsubopc:oid rngcanonical:regproc rngsubdiff:regproc"),
    _pg("pg_tablespace", 1213, f"oid:oid spcname:name spcowner:oid spcacl:{_ACL} "
        "spcoptions:text[]"),
    _pg("pg_language", 2612, "oid:oid lanname:name lanowner:oid lanispl:bool lanpltrusted:bool "
        f"lanplcallfoid:oid laninline:oid lanvalidator:oid lanacl:{_ACL}"),
    _pg("pg_proc", 1255, "oid:oid proname:name pronamespace:oid proowner:oid prolang:oid "
        "procost:float4 prorows:float4 provariadic:oid prosupport:regproc prokind:char "
        "prosecdef:bool proleakproof:bool proisstrict:bool proretset:bool provolatile:char "
        "proparallel:char pronargs:int2 pronargdefaults:int2 prorettype:oid "
        "proargtypes:oidvector proallargtypes:oid[] proargmodes:char[] proargnames:text[] "
        "proargdefaults:node protrftypes:oid[] prosrc:text probin:text prosqlbody:node "
        f"proconfig:text[] proacl:{_ACL}"),
    _pg("pg_settings", 12104, "name:text setting:text unit:text category:text short_desc:text "
        "extra_desc:text context:text vartype:text source:text min_val:text max_val:text "
        "enumvals:text[] boot_val:text reset_val:text sourcefile:text sourceline:int4 "
        "pending_restart:bool", "v"),
    _pg("pg_extension", 3079, "oid:oid extname:name extowner:oid extnamespace:oid "
        "extrelocatable:bool extversion:text extconfig:oid[] extcondition:text[]"),
    _pg("pg_foreign_table", 3118, "ftrelid:oid ftserver:oid ftoptions:text[]"),
    _pg("pg_partitioned_table", 3350, "partrelid:oid partstrat:char partnatts:int2 "
        "partdefid:oid partattrs:int2vector partclass:oidvector partcollation:oidvector "
        "partexprs:node"),
    _pg("pg_views", 12028, "schemaname:name viewname:name viewowner:name definition:text", "v"),
    _pg("pg_matviews", 12038, "schemaname:name matviewname:name matviewowner:name "
        "tablespace:name hasindexes:bool ispopulated:bool definition:text", "v"),
    _pg("pg_tables", 12033, "schemaname:name tablename:name tableowner:name tablespace:name "
        "hasindexes:bool hasrules:bool hastriggers:bool rowsecurity:bool", "v"),
    _pg("pg_indexes", 12043, "schemaname:name tablename:name indexname:name tablespace:name "
        "indexdef:text", "v"),
    _info("schemata", "catalog_name:name schema_name:name schema_owner:name "
          "default_character_set_catalog:name default_character_set_schema:name "
          "default_character_set_name:name sql_path:text"),
    _info("tables", "table_catalog:name table_schema:name table_name:name table_type:text "
          "self_referencing_column_name:name reference_generation:text "
          "user_defined_type_catalog:name user_defined_type_schema:name "
          "user_defined_type_name:name is_insertable_into:text is_typed:text "
          "commit_action:text"),
    _info("columns", "table_catalog:name table_schema:name table_name:name column_name:name "
          "ordinal_position:int4 column_default:text is_nullable:text data_type:text "
          "character_maximum_length:int4 character_octet_length:int4 numeric_precision:int4 "
          "numeric_precision_radix:int4 numeric_scale:int4 datetime_precision:int4 "
          "interval_type:text interval_precision:int4 character_set_catalog:name "
          "character_set_schema:name character_set_name:name collation_catalog:name "
          "collation_schema:name collation_name:name domain_catalog:name domain_schema:name "
          "domain_name:name udt_catalog:name udt_schema:name udt_name:name scope_catalog:name "
          "scope_schema:name scope_name:name maximum_cardinality:int4 dtd_identifier:name "
          "is_self_referencing:text is_identity:text identity_generation:text "
          "identity_start:text identity_increment:text identity_maximum:text "
          "identity_minimum:text identity_cycle:text is_generated:text "
          "generation_expression:text is_updatable:text"),
    _info("views", "table_catalog:name table_schema:name table_name:name view_definition:text "
          "check_option:text is_updatable:text is_insertable_into:text "
          "is_trigger_updatable:text is_trigger_deletable:text "
          "is_trigger_insertable_into:text"),
    _info("table_constraints", "constraint_catalog:name constraint_schema:name "
          "constraint_name:name table_catalog:name table_schema:name table_name:name "
          "constraint_type:text is_deferrable:text initially_deferred:text enforced:text "
          "nulls_distinct:text"),
    _info("key_column_usage", "constraint_catalog:name constraint_schema:name "
          "constraint_name:name table_catalog:name table_schema:name table_name:name "
          "column_name:name ordinal_position:int4 position_in_unique_constraint:int4"),
    _info("referential_constraints", "constraint_catalog:name constraint_schema:name "
          "constraint_name:name unique_constraint_catalog:name unique_constraint_schema:name "
          "unique_constraint_name:name match_option:text update_rule:text delete_rule:text"),
)
RELATIONS_BY_KEY: dict[str, RelationDef] = {r.key: r for r in RELATIONS}
CATALOG_RELATION_NAMES: frozenset[str] = frozenset(r.name for r in RELATIONS if r.schema == "pg_catalog")
INFORMATION_SCHEMA_NAMES: frozenset[str] = frozenset(
    r.name for r in RELATIONS if r.schema == "information_schema"
)
_SYSTEM_RELATION_OIDS = {(r.schema, r.name): r.fixed_oid for r in RELATIONS if r.fixed_oid}

# PostgreSQL subscripts these from 0 (int2vector / oidvector); Arrow lists and every other
# PostgreSQL array start at 1. The rewrite (arrays.py) shifts subscripts on them.
ZERO_BASED_ARRAY_COLUMNS: frozenset[str] = frozenset(
    name for r in RELATIONS for name, kind in r.columns if kind in ("int2vector", "oidvector")
)
# Columns holding OIDs: clients compare them with quoted literals (psql: c.oid = '16386').
OID_COLUMNS: frozenset[str] = frozenset(
    name for r in RELATIONS for name, kind in r.columns if kind == "oid"
)

def _unambiguous_kinds() -> dict[str, str]:
    kinds: dict[str, set[str]] = {}
    for r in RELATIONS:
        for name, kind in r.columns:
            kinds.setdefault(name, set()).add(kind)
    return {name: next(iter(k)) for name, k in kinds.items() if len(k) == 1}


# Column name -> its kind ("oid", "name", ...), for names that mean one kind in every relation.
COLUMN_KINDS: dict[str, str] = _unambiguous_kinds()

# Boolean columns: psqlODBC compares them with 't'.
BOOL_COLUMNS: frozenset[str] = frozenset(
    name for r in RELATIONS for name, kind in r.columns if kind == "bool"
)

# Default btree operator classes by column type, for pg_index.indclass (from PostgreSQL 15).
_BTREE_OPCLASS = {
    23: (1978, "int4_ops", 1976), 21: (1979, "int2_ops", 1976), 26: (1981, "oid_ops", 1989),
    1082: (3122, "date_ops", 434), 701: (3123, "float8_ops", 1970), 20: (3124, "int8_ops", 1976),
    1700: (3125, "numeric_ops", 1988), 25: (3126, "text_ops", 1994),
    1184: (3127, "timestamptz_ops", 434), 1114: (3128, "timestamp_ops", 434),
    16: (10003, "bool_ops", 424), 17: (10006, "bytea_ops", 428), 700: (10012, "float4_ops", 1970),
    1186: (10022, "interval_ops", 1982), 1083: (10038, "time_ops", 1996),
    2950: (10065, "uuid_ops", 2968),
}


# --- the index of one snapshot: every object and its OID ----------------------------------------


@dataclass(frozen=True)
class ColumnEntry:
    attnum: int
    name: str
    type_oid: int
    typmod: int
    not_null: bool
    arrow_type: pa.DataType


@dataclass(frozen=True)
class RelationEntry:
    oid: int
    schema: str
    name: str
    relkind: str  # 'r' table, 'v' view, 'i' index
    columns: tuple[ColumnEntry, ...]
    table: TableInfo | None = None  # the lakehouse table (for 'r' and its 'i')
    indexed_oid: int | None = None  # for an index: its table's OID
    key_attnums: tuple[int, ...] = ()  # for an index: the indexed columns


@dataclass(frozen=True)
class ConstraintEntry:
    oid: int
    name: str
    schema: str
    contype: str
    table_oid: int
    index_oid: int
    key_attnums: tuple[int, ...]
    key_names: tuple[str, ...]


class CatalogIndex:
    """All objects of a snapshot, by name and by OID."""

    def __init__(self, snap: CatalogSnapshot) -> None:
        self.snapshot = snap
        schemas = sorted(set(snap.schemas) | {t.schema for t in snap.tables} | {"public"})
        user_schemas = [s for s in schemas if s not in _FIXED_NAMESPACES]
        keys = [f"namespace:{s}" for s in user_schemas]
        keys.append(f"database:{snap.database}")
        keys += [f"relation:{r.key}" for r in RELATIONS if r.fixed_oid is None]
        for t in snap.tables:
            keys.append(f"relation:{t.schema}.{t.name}")
            if t.primary_key:
                keys.append(f"relation:{t.schema}.{_pkey_name(t)}")
                keys.append(f"constraint:{t.schema}.{_pkey_name(t)}")
        oids = _allocate(keys, taken=set(_SYSTEM_RELATION_OIDS.values()))

        self.database_oid = oids[f"database:{snap.database}"]
        self.namespaces: dict[str, int] = {**_FIXED_NAMESPACES}
        self.namespaces.update({s: oids[f"namespace:{s}"] for s in user_schemas})
        self.namespace_names: dict[int, str] = {v: k for k, v in self.namespaces.items()}
        self.lakehouse_schemas: tuple[str, ...] = tuple(schemas)

        self.relations: dict[tuple[str, str], RelationEntry] = {}
        self.constraints: dict[int, ConstraintEntry] = {}
        for rel in RELATIONS:
            oid = rel.fixed_oid or oids[f"relation:{rel.key}"]
            self._add(RelationEntry(oid, rel.schema, rel.name, rel.relkind, _system_columns(rel)))
        for t in sorted(snap.tables, key=lambda t: (t.schema, t.name)):
            self._add_table(t, oids)
        self.by_oid: dict[int, RelationEntry] = {e.oid: e for e in self.relations.values()}
        # COMMENT ON: (relation OID, attnum or 0 for the table) -> description, as pg_description.
        self.descriptions: dict[tuple[int, int], str] = {}
        for e in self.relations.values():
            if e.table is None or e.relkind != "r":
                continue
            if e.table.comment:
                self.descriptions[(e.oid, 0)] = e.table.comment
            docs = {c.name: c.comment for c in e.table.columns if c.comment}
            for c in e.columns:
                if c.name in docs:
                    self.descriptions[(e.oid, c.attnum)] = docs[c.name]

    def _add(self, entry: RelationEntry) -> None:
        self.relations[(entry.schema, entry.name)] = entry

    def _add_table(self, t: TableInfo, oids: dict[str, int]) -> None:
        columns = tuple(_lakehouse_column(i, c) for i, c in enumerate(t.columns, start=1))
        table = RelationEntry(oids[f"relation:{t.schema}.{t.name}"], t.schema, t.name, "r",
                              columns, table=t)
        self._add(table)
        if not t.primary_key:
            return
        by_name = {c.name: c for c in columns}
        key_cols = tuple(by_name[n] for n in t.primary_key if n in by_name)
        name = _pkey_name(t)
        index = RelationEntry(oids[f"relation:{t.schema}.{name}"], t.schema, name, "i",
                              key_cols, table=t, indexed_oid=table.oid,
                              key_attnums=tuple(c.attnum for c in key_cols))
        self._add(index)
        con_oid = oids[f"constraint:{t.schema}.{name}"]
        self.constraints[con_oid] = ConstraintEntry(
            con_oid, name, t.schema, "p", table.oid, index.oid,
            index.key_attnums, tuple(c.name for c in key_cols),
        )

    # lookups the catalog functions need

    def relation_name(self, oid: int, search_path: list[str]) -> str | None:
        """regclass output: the name, schema-qualified unless search_path finds it."""
        entry = self.by_oid.get(oid)
        if entry is None:
            return None
        if self.resolve(entry.name, search_path) == oid:
            return _quote_ident(entry.name)
        return f"{_quote_ident(entry.schema)}.{_quote_ident(entry.name)}"

    def resolve(self, name: str, search_path: list[str]) -> int | None:
        """regclass input: 'schema.name' or 'name' looked up along pg_catalog + search_path."""
        parts = _split_qualified(name)
        if parts is None:
            return None
        if len(parts) == 2:
            entry = self.relations.get((parts[0], parts[1]))
            return entry.oid if entry else None
        path = search_path if "pg_catalog" in search_path else ["pg_catalog", *search_path]
        for schema in path:
            entry = self.relations.get((schema, parts[0]))
            if entry is not None:
                return entry.oid
        return None

    def is_visible(self, oid: int, search_path: list[str]) -> bool:
        entry = self.by_oid.get(oid)
        return entry is not None and self.resolve(_quote_ident(entry.name), search_path) == oid


def _pkey_name(t: TableInfo) -> str:
    return f"{t.name}_pkey"


def _lakehouse_column(attnum: int, c: ColumnInfo) -> ColumnEntry:
    return ColumnEntry(attnum, c.name, _type_oid(c.arrow_type), arrow_typmod(c.arrow_type),
                       not c.nullable, c.arrow_type)


@lru_cache(maxsize=1024)
def _type_oid(dt: pa.DataType) -> int:
    return pg_type_for_arrow(dt).oid


def _system_columns(rel: RelationDef) -> tuple[ColumnEntry, ...]:
    return tuple(
        ColumnEntry(i, f.name, pg_type_oid(f), -1, False, f.type)
        for i, f in enumerate(rel.arrow_schema, start=1)
    )


def _split_qualified(name: str) -> list[str] | None:
    """'a.b', '"A".b', 'b' -> identifier parts, folded like PostgreSQL (None if malformed)."""
    parts: list[str] = []
    i, text = 0, name.strip()
    while i < len(text):
        if text[i] == '"':
            j = i + 1
            buf = []
            while j < len(text):
                if text[j] == '"':
                    if j + 1 < len(text) and text[j + 1] == '"':
                        buf.append('"')
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            parts.append("".join(buf))
            i = j + 1
        else:
            j = text.find(".", i)
            j = len(text) if j < 0 else j
            parts.append(text[i:j].strip().lower())
            i = j
        if i < len(text):
            if text[i] != ".":
                return None
            i += 1
    if not parts or len(parts) > 3 or any(p == "" for p in parts):
        return None
    return parts[-2:]


def _quote_ident(name: str) -> str:
    if name and (name[0].isalpha() or name[0] == "_") and all(
        ch.islower() or ch.isdigit() or ch == "_" for ch in name
    ):
        return name
    return '"' + name.replace('"', '""') + '"'


quote_ident = _quote_ident


# --- building the relations ---------------------------------------------------------------------

Rows = list[dict[str, Any]]


def _rows_pg_namespace(ix: CatalogIndex) -> Rows:
    return [{"oid": oid, "nspname": name, "nspowner": BOOTSTRAP_SUPERUSER_OID}
            for name, oid in sorted(ix.namespaces.items(), key=lambda kv: kv[1])]


def _rows_pg_class(ix: CatalogIndex) -> Rows:
    rows = []
    indexed = {e.indexed_oid for e in ix.relations.values() if e.indexed_oid is not None}
    for e in ix.relations.values():
        rows.append({
            "oid": e.oid, "relname": e.name, "relnamespace": ix.namespaces[e.schema],
            "relowner": BOOTSTRAP_SUPERUSER_OID,
            "relam": {"r": HEAP_AM_OID, "i": BTREE_AM_OID}.get(e.relkind, 0),
            "relfilenode": e.oid if e.relkind != "v" else 0,
            # what PostgreSQL shows before the first VACUUM: -1 for a table, 0 and the
            # metapage for a btree (pgjdbc getIndexInfo reports them as CARDINALITY, PAGES)
            "reltuples": 0.0 if e.relkind == "i" else -1.0, "relpages": 1 if e.relkind == "i" else 0,
            "relhasindex": e.oid in indexed, "relpersistence": "p", "relkind": e.relkind,
            "relnatts": len(e.columns) if e.relkind != "i" else len(e.key_attnums),
            "relispopulated": True, "relreplident": "d" if e.relkind == "r" else "n",
            "relfrozenxid": 0,
        })
    return rows


def _rows_pg_attribute(ix: CatalogIndex) -> Rows:
    rows = []
    for e in ix.relations.values():
        for position, c in enumerate(e.columns, start=1):
            t = BUILTIN_TYPES.get(c.type_oid)
            rows.append({
                "attrelid": e.oid, "attname": c.name, "atttypid": c.type_oid,
                "attstattarget": -1, "attlen": t.typlen if t else -1,
                # an index numbers its own columns 1..n; pg_index.indkey maps them to the table
                "attnum": position if e.relkind == "i" else c.attnum,
                "attndims": 1 if t and t.typcategory == "A" else 0, "attcacheoff": -1,
                "atttypmod": c.typmod, "attbyval": bool(t and t.typbyval),
                "attalign": t.typalign if t else "i", "attstorage": t.typstorage if t else "x",
                # system catalogs declare their fixed-width columns NOT NULL, as PostgreSQL's do
                "attnotnull": c.not_null or (e.table is None and t is not None and t.typlen > 0),
                "attislocal": True,
                "attcollation": t.typcollation if t else 0,
            })
    return rows


def _rows_pg_description(ix: CatalogIndex) -> Rows:
    return [{"objoid": oid, "classoid": PG_CLASS_OID, "objsubid": sub, "description": text}
            for (oid, sub), text in sorted(ix.descriptions.items())]


def object_description(env: Any, oid: int | None, catalog: str | None) -> str | None:
    """obj_description(oid, 'pg_class'): a table's COMMENT ON (None for anything else)."""
    ix = current_index(env)
    if ix is None or oid is None or (catalog or "pg_class") != "pg_class":
        return None
    return ix.descriptions.get((oid, 0))


def column_description(env: Any, oid: int | None, attnum: int | None) -> str | None:
    """col_description(table oid, attnum): a column's COMMENT ON."""
    ix = current_index(env)
    if ix is None or oid is None or attnum is None:
        return None
    return ix.descriptions.get((oid, attnum))


def _rows_pg_type(ix: CatalogIndex) -> Rows:
    return [{
        "oid": t.oid, "typname": t.typname, "typnamespace": PG_CATALOG_OID,
        "typowner": BOOTSTRAP_SUPERUSER_OID, "typlen": t.typlen, "typbyval": t.typbyval,
        "typtype": t.typtype, "typcategory": t.typcategory, "typispreferred": t.typispreferred,
        "typisdefined": True, "typdelim": t.typdelim,
        "typsubscript": "array_subscript_handler" if t.typcategory == "A" else "-",
        "typelem": t.typelem, "typarray": t.typarray, "typinput": t.typinput,
        "typoutput": t.typoutput, "typreceive": t.typreceive, "typsend": t.typsend,
        "typmodin": "-", "typmodout": "-", "typanalyze": "-", "typalign": t.typalign,
        "typstorage": t.typstorage, "typtypmod": -1, "typcollation": t.typcollation,
    } for t in _all_types()]


def _all_types() -> list[BuiltinType]:
    return sorted(BUILTIN_TYPES.values(), key=lambda t: t.oid)


def _rows_pg_constraint(ix: CatalogIndex) -> Rows:
    return [{
        "oid": c.oid, "conname": c.name, "connamespace": ix.namespaces[c.schema],
        "contype": c.contype, "convalidated": True, "conrelid": c.table_oid,
        "conindid": c.index_oid, "conislocal": True, "connoinherit": True,
        "conkey": list(c.key_attnums),
    } for c in ix.constraints.values()]


def _rows_pg_index(ix: CatalogIndex) -> Rows:
    rows = []
    for e in ix.relations.values():
        if e.relkind != "i":
            continue
        n = len(e.key_attnums)
        rows.append({
            "indexrelid": e.oid, "indrelid": e.indexed_oid, "indnatts": n, "indnkeyatts": n,
            "indisunique": True, "indisprimary": True, "indimmediate": True,
            "indisvalid": True, "indisready": True, "indislive": True,
            "indkey": list(e.key_attnums),
            "indcollation": [BUILTIN_TYPES[c.type_oid].typcollation
                             if c.type_oid in BUILTIN_TYPES else 0 for c in e.columns],
            "indclass": [_BTREE_OPCLASS.get(c.type_oid, (0,))[0] for c in e.columns],
            "indoption": [0] * n,
        })
    return rows


def _rows_pg_am(ix: CatalogIndex) -> Rows:
    ams = [(2, "heap", "heap_tableam_handler", "t"), (403, "btree", "bthandler", "i"),
           (405, "hash", "hashhandler", "i"), (783, "gist", "gisthandler", "i"),
           (2742, "gin", "ginhandler", "i"), (4000, "spgist", "spghandler", "i"),
           (3580, "brin", "brinhandler", "i")]
    return [{"oid": o, "amname": n, "amhandler": h, "amtype": t} for o, n, h, t in ams]


def _rows_pg_collation(ix: CatalogIndex) -> Rows:
    return [
        {"oid": 100, "collname": "default", "collprovider": "d", "collencoding": -1},
        {"oid": 950, "collname": "C", "collprovider": "c", "collencoding": -1,
         "collcollate": "C", "collctype": "C"},
        {"oid": 951, "collname": "POSIX", "collprovider": "c", "collencoding": -1,
         "collcollate": "POSIX", "collctype": "POSIX"},
    ]


def _collation_defaults(rows: Rows) -> Rows:
    for row in rows:
        row.update(collnamespace=PG_CATALOG_OID, collowner=BOOTSTRAP_SUPERUSER_OID,
                   collisdeterministic=True)
    return rows


def _rows_pg_opclass(ix: CatalogIndex) -> Rows:
    return [{"oid": oid, "opcmethod": BTREE_AM_OID, "opcname": name,
             "opcnamespace": PG_CATALOG_OID, "opcowner": BOOTSTRAP_SUPERUSER_OID,
             "opcfamily": family, "opcintype": intype, "opcdefault": True}
            for intype, (oid, name, family) in sorted(_BTREE_OPCLASS.items())]


def _rows_pg_database(ix: CatalogIndex) -> Rows:
    return [{"oid": ix.database_oid, "datname": ix.snapshot.database,
             "datdba": BOOTSTRAP_SUPERUSER_OID, "encoding": 6, "datlocprovider": "c",
             "datallowconn": True, "datconnlimit": -1, "dattablespace": 1663,
             "datcollate": "C.UTF-8", "datctype": "C.UTF-8"}]


def _role(ix: CatalogIndex) -> dict[str, Any]:
    return {"oid": BOOTSTRAP_SUPERUSER_OID, "rolname": ix.snapshot.user, "rolsuper": True,
            "rolinherit": True, "rolcreaterole": True, "rolcreatedb": True, "rolcanlogin": True,
            "rolreplication": True, "rolbypassrls": True, "rolconnlimit": -1}


def _rows_pg_authid(ix: CatalogIndex) -> Rows:
    return [_role(ix)]


def _rows_pg_roles(ix: CatalogIndex) -> Rows:
    return [{**_role(ix), "rolpassword": "********"}]


def _rows_pg_user(ix: CatalogIndex) -> Rows:
    return [{"usename": ix.snapshot.user, "usesysid": BOOTSTRAP_SUPERUSER_OID,
             "usecreatedb": True, "usesuper": True, "userepl": True, "usebypassrls": True,
             "passwd": "********"}]


def _rows_pg_tablespace(ix: CatalogIndex) -> Rows:
    return [{"oid": 1663, "spcname": "pg_default", "spcowner": BOOTSTRAP_SUPERUSER_OID},
            {"oid": 1664, "spcname": "pg_global", "spcowner": BOOTSTRAP_SUPERUSER_OID}]


def _rows_pg_language(ix: CatalogIndex) -> Rows:
    return [{"oid": 12, "lanname": "internal", "lanowner": BOOTSTRAP_SUPERUSER_OID},
            {"oid": 13, "lanname": "c", "lanowner": BOOTSTRAP_SUPERUSER_OID},
            {"oid": 14, "lanname": "sql", "lanowner": BOOTSTRAP_SUPERUSER_OID,
             "lanpltrusted": True}]


def _rows_pg_proc(ix: CatalogIndex) -> Rows:
    return [{
        "oid": p.oid, "proname": p.name, "pronamespace": PG_CATALOG_OID,
        "proowner": BOOTSTRAP_SUPERUSER_OID, "prolang": 12, "procost": 1.0,
        "prorows": 1000.0 if p.retset else 0.0, "prosupport": "-", "prokind": p.kind,
        "proisstrict": True, "proretset": p.retset, "provolatile": p.volatile,
        "proparallel": "s", "pronargs": len(p.argtypes), "prorettype": p.rettype,
        "proargtypes": list(p.argtypes), "prosrc": p.name,
    } for p in BUILTIN_FUNCTIONS]


def _rows_pg_extension(ix: CatalogIndex) -> Rows:
    # plpgsql is there in every PostgreSQL database; tools that list extensions expect it.
    return [{"oid": 13559, "extname": "plpgsql", "extowner": BOOTSTRAP_SUPERUSER_OID,
             "extnamespace": PG_CATALOG_OID, "extversion": "1.0"}]


def _rows_pg_settings(ix: CatalogIndex) -> Rows:
    return [{"name": name, "setting": value, "context": "user", "vartype": "string",
             "source": "default", "boot_val": value, "reset_val": value}
            for name, value in sorted(server_settings(ix.snapshot.user).items())]


def server_settings(user: str) -> dict[str, str]:
    """Server-wide defaults as pg_settings shows them (sessions' own values: current_setting)."""
    from icegres.pg import settings

    shown = {}
    for key, value in settings.defaults("15.0", user).items():
        shown[settings.reported_name(key) or key] = value
    return shown


def _lakehouse_tables(ix: CatalogIndex) -> list[RelationEntry]:
    return [e for e in ix.relations.values() if e.relkind == "r" and e.table is not None]


def _rows_pg_tables(ix: CatalogIndex) -> Rows:
    return [{"schemaname": e.schema, "tablename": e.name, "tableowner": ix.snapshot.user,
             "hasindexes": bool(e.table and e.table.primary_key)}
            for e in _lakehouse_tables(ix)]


def _rows_pg_indexes(ix: CatalogIndex) -> Rows:
    return [{"schemaname": e.schema, "tablename": e.table.name, "indexname": e.name,
             "indexdef": index_definition(ix, e.oid)}
            for e in ix.relations.values() if e.relkind == "i" and e.table is not None]


def index_definition(ix: CatalogIndex, oid: int, column: int = 0) -> str | None:
    """pg_get_indexdef(oid, column): the CREATE INDEX statement, or one column's name."""
    e = ix.by_oid.get(oid)
    if e is None or e.relkind != "i" or e.table is None:
        return None
    names = [_quote_ident(c.name) for c in e.columns]
    if column:
        return names[column - 1] if 0 < column <= len(names) else ""
    table = f"{_quote_ident(e.schema)}.{_quote_ident(e.table.name)}"
    return (f"CREATE UNIQUE INDEX {_quote_ident(e.name)} ON {table} "
            f"USING btree ({', '.join(names)})")


def constraint_definition(ix: CatalogIndex, oid: int) -> str | None:
    """pg_get_constraintdef(oid)."""
    c = ix.constraints.get(oid)
    if c is None:
        return None
    kind = {"p": "PRIMARY KEY", "u": "UNIQUE"}[c.contype]
    return f"{kind} ({', '.join(_quote_ident(n) for n in c.key_names)})"


# information_schema ----------------------------------------------------------------------------


def _rows_schemata(ix: CatalogIndex) -> Rows:
    return [{"catalog_name": ix.snapshot.database, "schema_name": name,
             "schema_owner": ix.snapshot.user}
            for name, _ in sorted(ix.namespaces.items(), key=lambda kv: kv[1])]


def _rows_tables(ix: CatalogIndex) -> Rows:
    kinds = {"r": "BASE TABLE", "v": "VIEW"}
    return [{"table_catalog": ix.snapshot.database, "table_schema": e.schema,
             "table_name": e.name, "table_type": kinds[e.relkind],
             "is_insertable_into": "YES" if e.relkind == "r" else "NO", "is_typed": "NO"}
            for e in ix.relations.values() if e.relkind in kinds]


# information_schema.columns: (numeric_precision, radix, scale) for the fixed-precision types
_NUMERIC_SHAPE = {21: (16, 2, 0), 23: (32, 2, 0), 20: (64, 2, 0), 700: (24, 2, None),
                  701: (53, 2, None)}
_DATETIME_PRECISION = {1082: 0, 1083: 6, 1266: 6, 1114: 6, 1184: 6, 1186: 6}


def _data_type(type_oid: int) -> str:
    t = BUILTIN_TYPES.get(type_oid)
    if t is None:
        return "USER-DEFINED"
    if t.typcategory == "A":
        return "ARRAY"
    return t.sql_name if type_oid != 1042 else "character"


def _char_length(c: ColumnEntry) -> int | None:
    return c.typmod - 4 if c.type_oid in (1042, 1043) and c.typmod > 4 else None


def _rows_columns(ix: CatalogIndex) -> Rows:
    rows = []
    for e in ix.relations.values():
        if e.relkind == "i":
            continue
        for c in e.columns:
            t = BUILTIN_TYPES.get(c.type_oid)
            precision, radix, scale = _NUMERIC_SHAPE.get(c.type_oid, (None, None, None))
            if c.type_oid == 1700 and c.typmod >= 4:
                precision, radix, scale = ((c.typmod - 4) >> 16) & 0xFFFF, 10, (c.typmod - 4) & 0xFFFF
            rows.append({
                "table_catalog": ix.snapshot.database, "table_schema": e.schema,
                "table_name": e.name, "column_name": c.name, "ordinal_position": c.attnum,
                "is_nullable": "NO" if c.not_null else "YES", "data_type": _data_type(c.type_oid),
                "character_maximum_length": _char_length(c),
                "character_octet_length": 1073741824 if t and t.typcategory == "S" else None,
                "numeric_precision": precision, "numeric_precision_radix": radix,
                "numeric_scale": scale,
                "datetime_precision": _DATETIME_PRECISION.get(c.type_oid),
                "udt_catalog": ix.snapshot.database, "udt_schema": "pg_catalog",
                "udt_name": t.typname if t else None, "dtd_identifier": str(c.attnum),
                "is_self_referencing": "NO", "is_identity": "NO", "identity_cycle": "NO",
                "is_generated": "NEVER", "is_updatable": "YES" if e.relkind == "r" else "NO",
            })
    return rows


def _rows_table_constraints(ix: CatalogIndex) -> Rows:
    db = ix.snapshot.database
    return [{"constraint_catalog": db, "constraint_schema": c.schema, "constraint_name": c.name,
             "table_catalog": db, "table_schema": c.schema,
             "table_name": ix.by_oid[c.table_oid].name, "constraint_type": "PRIMARY KEY",
             "is_deferrable": "NO", "initially_deferred": "NO", "enforced": "YES"}
            for c in ix.constraints.values()]


def _rows_key_column_usage(ix: CatalogIndex) -> Rows:
    db = ix.snapshot.database
    return [{"constraint_catalog": db, "constraint_schema": c.schema, "constraint_name": c.name,
             "table_catalog": db, "table_schema": c.schema,
             "table_name": ix.by_oid[c.table_oid].name, "column_name": name,
             "ordinal_position": position}
            for c in ix.constraints.values() for position, name in enumerate(c.key_names, 1)]


# Relations not listed here are empty: a lakehouse has no triggers, policies, sequences, ...
_BUILDERS: dict[str, Callable[[CatalogIndex], Rows]] = {
    "pg_catalog.pg_namespace": _rows_pg_namespace,
    "pg_catalog.pg_class": _rows_pg_class,
    "pg_catalog.pg_attribute": _rows_pg_attribute,
    "pg_catalog.pg_type": _rows_pg_type,
    "pg_catalog.pg_description": _rows_pg_description,
    "pg_catalog.pg_constraint": _rows_pg_constraint,
    "pg_catalog.pg_index": _rows_pg_index,
    "pg_catalog.pg_am": _rows_pg_am,
    "pg_catalog.pg_collation": lambda ix: _collation_defaults(_rows_pg_collation(ix)),
    "pg_catalog.pg_opclass": _rows_pg_opclass,
    "pg_catalog.pg_database": _rows_pg_database,
    "pg_catalog.pg_authid": _rows_pg_authid,
    "pg_catalog.pg_roles": _rows_pg_roles,
    "pg_catalog.pg_user": _rows_pg_user,
    "pg_catalog.pg_tablespace": _rows_pg_tablespace,
    "pg_catalog.pg_language": _rows_pg_language,
    "pg_catalog.pg_proc": _rows_pg_proc,
    "pg_catalog.pg_extension": _rows_pg_extension,
    "pg_catalog.pg_settings": _rows_pg_settings,
    "pg_catalog.pg_tables": _rows_pg_tables,
    "pg_catalog.pg_indexes": _rows_pg_indexes,
    "information_schema.schemata": _rows_schemata,
    "information_schema.tables": _rows_tables,
    "information_schema.columns": _rows_columns,
    "information_schema.table_constraints": _rows_table_constraints,
    "information_schema.key_column_usage": _rows_key_column_usage,
}


def _to_table(rel: RelationDef, rows: Rows) -> pa.Table:
    # Column by column, and columns no row mentions as one repeated default: pg_attribute and
    # information_schema.columns have a row per lakehouse column and mostly default values.
    mentioned = set().union(*(row.keys() for row in rows)) if rows else set()
    arrays = []
    for (name, kind), column in zip(rel.columns, rel.arrow_schema, strict=True):
        default = _DEFAULT_BY_KIND.get(kind)
        if name in mentioned:
            arrays.append(pa.array([row.get(name, default) for row in rows], type=column.type))
        elif default is None:
            arrays.append(pa.nulls(len(rows), type=column.type))
        else:
            arrays.append(pa.array([default] * len(rows), type=column.type))
    return pa.Table.from_arrays(arrays, schema=rel.arrow_schema)


def build_catalog_tables(snap: CatalogSnapshot) -> dict[str, pa.Table]:
    """Every catalog relation as an Arrow table, keyed "pg_catalog.<rel>" / "information_schema.<rel>"."""
    ix = snap.index
    return {rel.key: _to_table(rel, _BUILDERS.get(rel.key, lambda _ix: [])(ix))
            for rel in RELATIONS}


# --- registration -------------------------------------------------------------------------------


@dataclass
class _Latest:
    """The most recently registered snapshot: what catalog functions answer from.

    One process serves one lakehouse, and sessions get SessionContexts of their own over the
    shared catalog, so the catalog functions (registered per session) find the catalog here.
    """

    snapshot: CatalogSnapshot | None = None
    tables: dict[str, pa.Table] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_LATEST = _Latest()


def current_index(env: Any = None) -> CatalogIndex | None:
    """The catalog a session's functions answer from: `env.catalog_snapshot` when the session
    has one (a CatalogSnapshot, or a callable returning the current one), else the snapshot
    registered last (None before the first registration).

    One process normally serves one lakehouse and the last registration is the truth; a process
    hosting several engines (tests) gives each session its own through env.
    """
    source = getattr(env, "catalog_snapshot", None)
    snap = source() if callable(source) else source
    if snap is None:
        snap = _LATEST.snapshot
    return snap.index if snap is not None else None


def register_catalog(ctx: datafusion.SessionContext, snap: CatalogSnapshot) -> None:
    """(Re)register every catalog relation into ctx's schemas pg_catalog and information_schema."""
    from datafusion.catalog import Schema

    previous = _LATEST.snapshot
    # the engine re-registers on every lakehouse change; most changes are new data, not new columns
    tables = _LATEST.tables if previous == snap and _LATEST.tables else build_catalog_tables(snap)
    catalog = ctx.catalog()
    for schema_name in ("pg_catalog", "information_schema"):
        if schema_name not in catalog.schema_names():
            catalog.register_schema(schema_name, Schema.memory_schema())
    for key, table in tables.items():
        schema_name, name = key.split(".", 1)
        schema = catalog.schema(schema_name)
        if name in schema.table_names():
            schema.deregister_table(name)
        schema.register_table(name, ctx.from_arrow(table))
    with _LATEST.lock:
        _LATEST.snapshot, _LATEST.tables = snap, tables
