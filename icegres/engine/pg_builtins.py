"""PostgreSQL 15.18's built-in types and functions, as its pg_type and pg_proc list them (generated),
and what icegres derives from them: type OIDs by name, format_type, Arrow typmods."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

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
    if typmod is not None and typmod < 0 and oid == 1042:
        # PostgreSQL's format_type_extended: bpchar with typmod -1 is not the same as CHARACTER,
        # which means CHARACTER(1); with no typmod given (NULL) it says "character"
        return "bpchar"
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
2855|pg_is_other_temp_schema|f|s|16|26|f
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
    argtypes: tuple[int, ...]  # the input arguments (proargtypes)
    retset: bool
    argnames: tuple[str, ...] = ()  # of every argument, OUT ones too (proargnames)
    argmodes: str = ""  # one letter per argument of allargtypes: o OUT, v VARIADIC; "" all IN
    allargtypes: tuple[int, ...] = ()  # every argument's type, when modes are given
    argdefaults: tuple[str, ...] = ()  # the defaults of the last input arguments

    @property
    def arguments(self) -> tuple[tuple[str, str, int], ...]:
        """(mode, name, type) of every argument, OUT ones too, in order."""
        types = self.allargtypes or self.argtypes
        modes = self.argmodes or "i" * len(types)
        names = self.argnames or ("",) * len(types)
        return tuple(zip(modes, names, types, strict=True))

    @cached_property
    def variadic(self) -> int:
        return next((t for mode, _, t in self.arguments if mode == "v"), 0)


# What PostgreSQL 15's pg_proc says of a function beyond the columns of the table above, for the
# functions that have it: argument names, modes, defaults (pgcli shows them as it completes a
# function name; \df prints them).
_DETAILS: dict[int, dict[str, object]] = {
    1686: {"argnames": ("word", "catcode", "barelabel", "catdesc", "baredesc"), "argmodes": "ooooo",
           "allargtypes": (25, 18, 16, 25, 25)},
    2096: {"argnames": ("pid", "timeout"), "argdefaults": ("0",)},
    3200: {"argmodes": "v", "allargtypes": (2276,)},
}


def _parse_procs(table: str) -> tuple[BuiltinFunction, ...]:
    out = []
    for line in table.strip().splitlines():
        oid, name, kind, volatile, rettype, argtypes, retset = line.split("|")
        args = tuple(int(a) for a in argtypes.split(",") if a)
        out.append(BuiltinFunction(int(oid), name, kind, volatile, int(rettype), args, retset == "t",
                                   **_DETAILS.get(int(oid), {})))  # type: ignore[arg-type]
    return tuple(out)


BUILTIN_FUNCTIONS: tuple[BuiltinFunction, ...] = _parse_procs(_PROCS_TABLE)
