"""The relations of pg_catalog and information_schema: their columns and PostgreSQL types, as
PostgreSQL 15 defines them, and what clients rely on about those columns."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa

from icegres.pg.types import pg_type_for_arrow

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
    # The rows of a set-returning function (FROM pg_get_keywords()), not a relation in pg_class.
    function: bool = False

    @cached_property
    def columns(self) -> tuple[tuple[str, str], ...]:
        return tuple(tuple(item.split(":", 1)) for item in self.spec.split())  # type: ignore[misc]

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([_catalog_field(name, kind) for name, kind in self.columns])

    @cached_property
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
    # Live: engine/activity.py registers the rows of the moment for each statement naming it.
    # client_addr is inet in PostgreSQL; text here (its text form is the same).
    _pg("pg_stat_activity", 12222, "datid:oid datname:name pid:int4 leader_pid:int4 usesysid:oid "
        "usename:name application_name:text client_addr:text client_hostname:text client_port:int4 "
        "backend_start:timestamptz xact_start:timestamptz query_start:timestamptz "
        "state_change:timestamptz wait_event_type:text wait_event:text state:text backend_xid:xid "
        "backend_xmin:xid query_id:int8 query:text backend_type:text", "v"),
    _pg("pg_views", 12028, "schemaname:name viewname:name viewowner:name definition:text", "v"),
    _pg("pg_matviews", 12038, "schemaname:name matviewname:name matviewowner:name "
        "tablespace:name hasindexes:bool ispopulated:bool definition:text", "v"),
    _pg("pg_tables", 12033, "schemaname:name tablename:name tableowner:name tablespace:name "
        "hasindexes:bool hasrules:bool hastriggers:bool rowsecurity:bool", "v"),
    _pg("pg_indexes", 12043, "schemaname:name tablename:name indexname:name tablespace:name "
        "indexdef:text", "v"),
    _pg("pg_init_privs", 3394, "objoid:oid classoid:oid objsubid:int4 privtype:char initprivs:aclitem[]"),
    _pg("pg_cast", 2605, "oid:oid castsource:oid casttarget:oid castfunc:oid castcontext:char castmethod:char"),
    _pg("pg_transform", 3576, "oid:oid trftype:oid trflang:oid trffromsql:regproc trftosql:regproc"),
    _pg("pg_operator", 2617, "oid:oid oprname:name oprnamespace:oid oprowner:oid oprkind:char oprcanmerge:bool oprcanhash:bool oprleft:oid oprright:oid oprresult:oid oprcom:oid oprnegate:oid oprcode:regproc oprrest:regproc oprjoin:regproc"),
    _pg("pg_opfamily", 2753, "oid:oid opfmethod:oid opfname:name opfnamespace:oid opfowner:oid"),
    _pg("pg_ts_parser", 3601, "oid:oid prsname:name prsnamespace:oid prsstart:regproc prstoken:regproc prsend:regproc prsheadline:regproc prslextype:regproc"),
    _pg("pg_ts_template", 3764, "oid:oid tmplname:name tmplnamespace:oid tmplinit:regproc tmpllexize:regproc"),
    _pg("pg_ts_dict", 3600, "oid:oid dictname:name dictnamespace:oid dictowner:oid dicttemplate:oid dictinitoption:text"),
    _pg("pg_ts_config", 3602, "oid:oid cfgname:name cfgnamespace:oid cfgowner:oid cfgparser:oid"),
    _pg("pg_foreign_data_wrapper", 2328, "oid:oid fdwname:name fdwowner:oid fdwhandler:oid fdwvalidator:oid fdwacl:aclitem[] fdwoptions:text[]"),
    _pg("pg_foreign_server", 1417, "oid:oid srvname:name srvowner:oid srvfdw:oid srvtype:text srvversion:text srvacl:aclitem[] srvoptions:text[]"),
    _pg("pg_default_acl", 826, "oid:oid defaclrole:oid defaclnamespace:oid defaclobjtype:char defaclacl:aclitem[]"),
    _pg("pg_conversion", 2607, "oid:oid conname:name connamespace:oid conowner:oid conforencoding:int4 contoencoding:int4 conproc:regproc condefault:bool"),
    _pg("pg_event_trigger", 3466, "oid:oid evtname:name evtevent:name evtowner:oid evtfoid:oid evtenabled:char evttags:text[]"),
    _pg("pg_subscription", 6100, "oid:oid subdbid:oid subskiplsn:text subname:name subowner:oid subenabled:bool subbinary:bool substream:bool subtwophasestate:char subdisableonerr:bool subconninfo:text subslotname:name subsynccommit:text subpublications:text[]"),
    _pg("pg_amop", 2602, "oid:oid amopfamily:oid amoplefttype:oid amoprighttype:oid amopstrategy:int2 amoppurpose:char amopopr:oid amopmethod:oid amopsortfamily:oid"),
    _pg("pg_amproc", 2603, "oid:oid amprocfamily:oid amproclefttype:oid amprocrighttype:oid amprocnum:int2 amproc:regproc"),
    _pg("pg_seclabels", 12099, "objoid:oid classoid:oid objsubid:int4 objtype:text objnamespace:oid objname:text provider:text label:text", relkind="v"),
    _pg("pg_shseclabel", 3592, "objoid:oid classoid:oid provider:text label:text"),
    _pg("pg_db_role_setting", 2964, "setdatabase:oid setrole:oid setconfig:text[]"),
    RelationDef("pg_catalog", "pg_get_keywords", "r",
                "word:text catcode:char barelabel:bool catdesc:text baredesc:text", function=True),
    _info("schemata", "catalog_name:name schema_name:name schema_owner:name "
          "default_character_set_catalog:name default_character_set_schema:name "
          "default_character_set_name:name sql_path:text"),
    _info("table_privileges", "grantor:name grantee:name table_catalog:name table_schema:name "
          "table_name:name privilege_type:text is_grantable:text with_hierarchy:text"),
    _info("column_privileges", "grantor:name grantee:name table_catalog:name table_schema:name "
          "table_name:name column_name:name privilege_type:text is_grantable:text"),
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
    _info("sequences", "sequence_catalog:name sequence_schema:name sequence_name:name data_type:text "
          "numeric_precision:int4 numeric_precision_radix:int4 numeric_scale:int4 start_value:text "
          "minimum_value:text maximum_value:text increment:text cycle_option:text"),
    _info("check_constraints", "constraint_catalog:name constraint_schema:name "
          "constraint_name:name check_clause:text"),
    _info("constraint_column_usage", "table_catalog:name table_schema:name table_name:name "
          "column_name:name constraint_catalog:name constraint_schema:name constraint_name:name"),
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
