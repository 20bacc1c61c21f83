-- Catalog/session SQL sent by psycopg, captured from PostgreSQL 15 (tests/unit/client_sql/capture.py).
-- oids: {"class.demo.cities": 16393, "class.demo.pt": 16405, "class.demo.trips": 16386, "class.demo.trips_pkey": 16391, "namespace.demo": 16385, "namespace.public": 2200, "type.demo._cities": 16394, "type.demo._mood": 16398, "type.demo._pt": 16406, "type.demo._trips": 16387, "type.demo.cities": 16395, "type.demo.mood": 16399, "type.demo.pt": 16407, "type.demo.trips": 16388}
-- next
BEGIN
-- next
SELECT 1
-- next
SAVEPOINT "_pg3_1"
-- next
-- params: {"$1": "text"}
SELECT
	    typname AS name, oid, typarray AS array_oid,
	    oid::regtype::text AS regtype, typdelim AS delimiter
	FROM pg_type t
	WHERE t.oid = to_regtype($1)
	ORDER BY t.oid
-- next
RELEASE "_pg3_1"
-- next
-- params: {"$1": "demo.mood"}
SELECT name, oid, array_oid, regtype, array_agg(label) AS labels
	FROM (
	    SELECT
	        t.typname AS name, t.oid AS oid, t.typarray AS array_oid,
	        t.oid::regtype::text AS regtype, e.enumlabel AS label
	    FROM pg_type t
	    LEFT JOIN  pg_enum e
	    ON e.enumtypid = t.oid
	    WHERE t.oid = to_regtype($1)
	    ORDER BY e.enumsortorder
	) x
	GROUP BY name, oid, array_oid, regtype
-- next
-- params: {"$1": "demo.pt"}
SELECT
	    t.typname AS name, t.oid AS oid, t.typarray AS array_oid,
	    t.oid::regtype::text AS regtype,
	    coalesce(a.fnames, '{}') AS field_names,
	    coalesce(a.ftypes, '{}') AS field_types
	FROM pg_type t
	LEFT JOIN (
	    SELECT
	        attrelid,
	        array_agg(attname) AS fnames,
	        array_agg(atttypid) AS ftypes
	    FROM (
	        SELECT a.attrelid, a.attname, a.atttypid
	        FROM pg_attribute a
	        JOIN pg_type t ON t.typrelid = a.attrelid
	        WHERE t.oid = to_regtype($1)
	        AND a.attnum > 0
	        AND NOT a.attisdropped
	        ORDER BY a.attnum
	    ) x
	    GROUP BY attrelid
	) a ON a.attrelid = t.typrelid
	WHERE t.oid = to_regtype($1)
-- next
-- params: {"$1": "1"}
SELECT id, city FROM demo.trips WHERE id > $1
-- next
COMMIT
